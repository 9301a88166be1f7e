"""The one accounting engine: every pessimistic and optimistic trade-off curve gdpcore reports comes from here.

:func:`produce` turns a mechanism, the numbers a user asks for (epsilon at ``deltas``, mu certified down to
``alpha_min``, the advantage), an accuracy target and a budget into a pair of symmetric curves with their
provenance (:class:`Curves`): the pessimistic curve gives every reported number (an upper bound on the privacy
profile), the optimistic twin the other end of every bracket (a proven lower bound). :class:`Producer` does the
same for a batch and shares single-step PMFs and their transforms between mechanisms with equal (sigma, q).
``analyze``, ``analyze_grid``, the calibration evaluator, representations, divergences and claims all read curves
built here; nothing else in gdpcore builds a composed PMF.

Modules, one concern each:

* :mod:`~gdpcore.engine.ladder` - **the ladder**: every step the engine chooses is ``LADDER_TOP * 2^(-k/2)`` (6.4e-2
  down to ``LADDER_FINEST`` = 1e-7; the generic path's first step ``GENERIC_START`` is the one exception), so cells
  with nearby parameters share single steps; a refinement halves the step or jumps several rungs at once when the
  measured error law says so. Calibration walks every fourth rung.
* :mod:`~gdpcore.engine.gap` - **the certified gap** (:func:`certified_gap`): the largest of the relative epsilon gaps
  at ``deltas``, the relative mu gap and the relative advantage gap between the two ends, by one relative-difference
  policy (:func:`relative_gap`; epsilons and advantages below ``GAP_FLOOR`` = 0.01 and mus below ``MU_GAP_FLOOR`` =
  0.2 compared absolutely, the doubling comparison included). Below 0.01 an epsilon bracket's absolute width is what
  bounds e^eps, the factor in every attack bound TPR <= e^eps FPR + delta, so it is held to ``tolerance`` x 0.01
  absolute (e^eps to 1e-4 per cell of a batch); the module gives the measurements behind both numbers. Both ends
  are proven bounds, so the gap is a certified bracket width, not an estimate. With ``discretization=None`` the step
  is refined until it is at most ``tolerance`` (0.1% for one report, 1% per cell of a batch).
* :mod:`~gdpcore.engine.twin` - **the twin** (:func:`optimistic_curve`): privacy buckets rounded down
  (dp_accounting's ``pessimistic_estimate=False`` construction) read as a post-processed mechanism, whose every test
  is a test on the mechanism: the twin is the curve through the error rates of all tests on the composed bucket
  index K (``pld.threshold_test_masses``, ``curve.curve_from_threshold_tests``). Both laws of K are convolution
  powers: P of the bucket masses, Q of the bucket masses moved by e^{-k d} and bounded through each bucket's residual
  lower bound (``LossPMF.bucket_q_weights``). Its error is second order in the step, like connect-the-dots. Its only
  slack is the FFT wrap-around, ``TWIN_TAIL_FACTOR`` x the smallest delta or FPR read (capped at 1e-10 of it) per
  phase.
* :mod:`~gdpcore.engine.plan` - **the planner**: the working memory of a computation (single steps, FFT buffers,
  curve arrays) is estimated in closed form or from the single steps' Chernoff windows *before* anything large is
  allocated - dp_accounting's single-step constructions too (:func:`gdpcore.kinds.pld_points`, in bytes and
  seconds); a step whose plan exceeds ``Budget.memory_bytes`` is refused, and a time budget stops refinement when
  the next round would not fit in ``Budget.seconds``. On the generic path a deadline (:class:`~gdpcore.engine.plan.
  Deadline`, ``PLD_TIME_SHARE`` of the budget) is read between pieces of work (each single step, convolution, twin
  phase). When even the first step is refused, the result is dp_accounting's RDP bound (:mod:`~gdpcore.engine.rdp`:
  looser, valid, labelled ``rdp_fallback``; its quadratures bounded in memory, long schedules coarsened to a valid
  upper bound), within the rest of the time budget, or a one-line ``budget_exceeded`` refusal
  (:class:`~gdpcore.engine.plan.BudgetExceededError`) with no number.
* :mod:`~gdpcore.engine.subsampled_gaussian` - **the subsampled-Gaussian path** (schedules of Poisson-subsampled
  Gaussians, :mod:`gdpcore.pld`'s vectorised constructions). A batch cell composes its pessimistic side once, at
  2^1.5 x the a-priori step (``_START_OVER_RULE``), and lets the certified gap check it: the twin proves the upper
  end within the gap of the truth. Only a missed gap measures the step's error law err(d) ~ c d^2
  (connect-the-dots is second order: coarse - fine ~ 3 x the error of fine) by a doubling comparison of the numbers
  the gap reads, refines the step until it is within ``ERROR_TARGET_RATIO`` x tolerance, and leaves the law to the
  later cells of its group (scaled by sqrt(T / T_then)). A report (0.1%) measures its first step's error. The twin
  is refined separately by its gap law c d^1.8.
* :mod:`~gdpcore.engine.generic` - **the generic path**: every other mechanism (discrete Gaussian, Laplace,
  randomized response, mixtures, compositions such as DP-SGD + a Laplace release) split into independent single
  steps (:mod:`~gdpcore.engine.parts`), each built exactly by its kind's dp_accounting construction
  (Poisson-subsampled Gaussian steps by gdpcore.pld's) and composed with gdpcore.pld's FFT powers and linear convolutions,
  whose a-priori round-off bounds move the curves to the safe side (dp_accounting's ``self_compose`` carries none;
  docs/references.md, "five discrete Gaussians"). Both sides share one step, refined by the twin's first-order law.
* :mod:`~gdpcore.engine.base` / :mod:`~gdpcore.engine.producer` - the producer: caches and hints, one repeated step
  composed, and the one refinement skeleton both paths run (:meth:`Producer._refine_steps`). A result that cannot
  meet the target within the budget carries ``status`` "tolerance_not_met: ..." with the achieved gap; both ends stay
  valid bounds.

Round-off: composed PMFs carry a rigorous per-atom a-priori round-off bound (``pld._power_roundoff``;
tests/test_roundoff.py checks it against an extended-precision composition) moved to the safe side of each end
(:mod:`gdpcore.pmf`), so brackets never invert at tiny delta. Where that allowance would matter for the smallest
delta or FPR read, the upper tail is recomputed on the single step tilted by half the tilt that centres it on the
read region (``pld.TILT_FRACTION``), on both sides.

The measurements behind the constants (error laws, gap laws, start factors) are in docs/engine-measurements.md.
"""

from gdpcore.engine.gap import (
    DEFAULT_DELTAS,
    DEFAULT_GRID_TOLERANCE,
    DEFAULT_TOLERANCE,
    ERROR_TARGET_RATIO,
    GAP_FLOOR,
    MU_GAP_FLOOR,
    certified_gap,
    optimistic_epsilon,
    relative_gap,
)
from gdpcore.engine.ladder import GENERIC_START, LADDER_FINEST, LADDER_TOP, ladder_floor, start_step
from gdpcore.engine.parts import generic_parts
from gdpcore.engine.plan import DEFAULT_MEMORY_BUDGET, DEFAULT_TIME_BUDGET, Budget, BudgetExceededError
from gdpcore.engine.producer import Producer, produce
from gdpcore.engine.rdp import kind_rdp_curve, rdp_fallback
from gdpcore.engine.results import PLD_ENGINE, Curves, Provenance
from gdpcore.engine.twin import TWIN_TAIL_FACTOR, optimistic_curve, twin_tail

__all__ = [
    "DEFAULT_DELTAS",
    "DEFAULT_GRID_TOLERANCE",
    "DEFAULT_MEMORY_BUDGET",
    "DEFAULT_TIME_BUDGET",
    "DEFAULT_TOLERANCE",
    "ERROR_TARGET_RATIO",
    "GAP_FLOOR",
    "GENERIC_START",
    "LADDER_FINEST",
    "LADDER_TOP",
    "MU_GAP_FLOOR",
    "PLD_ENGINE",
    "TWIN_TAIL_FACTOR",
    "Budget",
    "BudgetExceededError",
    "Curves",
    "Producer",
    "Provenance",
    "certified_gap",
    "generic_parts",
    "kind_rdp_curve",
    "ladder_floor",
    "optimistic_curve",
    "optimistic_epsilon",
    "produce",
    "rdp_fallback",
    "relative_gap",
    "start_step",
    "twin_tail",
]
