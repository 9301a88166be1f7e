"""gdpcore's PLD constructions and compositions: the Poisson-subsampled Gaussian's single steps (vectorised
dp_accounting constructions), FFT powers with a-priori round-off bounds, tilted tails, and the optimistic twin's
privacy buckets and threshold tests.

Modules: :mod:`~gdpcore.pld.subsampled_gaussian` (single steps), :mod:`~gdpcore.pld.powers` (FFT powers on Chernoff
windows, round-off bounds, linear convolution), :mod:`~gdpcore.pld.tilt` (tilted tails),
:mod:`~gdpcore.pld.composition` (repeated steps and phases composed), :mod:`~gdpcore.pld.buckets` (the optimistic
twin's compositions and threshold tests). Why these are hand-written rather than dp_accounting's (speed, measured):
docs/engine-measurements.md.

dp_accounting's public types are kept where they cost nothing: :func:`to_dp_accounting_pld` wraps the arrays as a
``PrivacyLossDistribution`` of ``DensePLDPmf`` objects (its queries agree with ours; tests check it).

What differs from dp_accounting, and why it stays pessimistic:

* The hockey-stick divergences at the grid points come from closed forms instead of dp_accounting's
  ``mu_upper_cdf(x) - exp(eps + log cdf(x))`` difference of two nearly equal numbers:

  - remove (P = (1-q) N(0, s^2) + q N(-1, s^2), Q = N(0, s^2)), for e^eps > 1 - q:
    ``delta_R(eps) = q * delta_G(l0)`` with ``e^l0 = (e^eps - 1 + q) / q``;  ``1 - e^eps`` below;
  - add (P = N(0, s^2), Q = (1-q) N(0, s^2) + q N(1, s^2)), for e^eps < 1 / (1 - q):
    ``delta_A(eps) = c * delta_G(eps + log q - log c)`` with ``c = 1 - (1-q) e^eps``; 0 above;

  where delta_G is the profile of the Gaussian mechanism with mu = 1/s (exact, evaluated in log space by
  :func:`gdpcore.closed_form.get_log_delta_from_gdp`). Both follow by factoring the common N(0, s^2) component out of
  sup_S P(S) - e^eps Q(S). Connect-the-dots is pessimistic for *exact* divergences at the grid points (the chord of
  the convex function e^eps -> delta lies above it), so nothing is lost against dp_accounting.
* Composition is an rfft power on a window sized by a Chernoff bound (``tail_mass_truncation = 1e-15``, added to the
  infinity mass, as in dp_accounting); one transform of a single-step PMF is reused for every number of steps that
  fits the same FFT length.

Cross-checked against dp_accounting (tests/test_pld.py): single-step PMFs agree with
``from_gaussian_mechanism(..., use_connect_dots=True)`` to round-off, composed epsilons to 1e-6 relative.

Optimistic twin (lower ends of brackets only; :func:`optimistic_single_step_pld`, :func:`optimistic_composition`,
:func:`threshold_test_masses`):

* privacy buckets rounded down, exactly dp_accounting's ``pessimistic_estimate=False, use_connect_dots=False``
  remove PMF (bucket masses as closed-form CDF/survival differences; tests: round-off agreement, composed epsilon to
  1e-6). Read as a PLD, its delta(eps) is a lower bound, but a loose one: every step's loss is rounded down by about
  d / 2, so after T steps epsilon is low by about T d / 2 (10-90% relative at T = 1e4 on the reference grid at the
  steps connect-the-dots needs) - a first-order error, against second order for connect-the-dots.
* read as a mechanism instead, the buckets lose only second-order information: bucketing the output by loss bucket
  is post-processing, so every test on the composed bucket index K is a test on the mechanism's output
  (data processing), and both laws of K are convolution powers - P of the bucket masses P_k, Q of the bucket masses
  Q_k = P_k e^{-l_k} <= e^{-k d} w_k, with w_k = P_k e^{-r_k} and r_k a closed-form lower bound on the bucket's loss
  residual l_k - k d. The twin is the curve through all such tests (:func:`threshold_test_masses` has the
  proof; :func:`gdpcore.curve.curve_from_threshold_tests`). It replaced a residual shift (delta(eps) >=
  delta_buckets(eps - c) - tail with a Chernoff bound c on the residuals' sum), whose deviation term left gaps
  10-20x larger at the same step (docs/references.md A-1; docs/engine-measurements.md).
"""

from gdpcore.pld.buckets import optimistic_composition, optimistic_loss_pmf, threshold_test_masses
from gdpcore.pld.composition import compose_loss_pmf, compose_phases, convolve_pmfs, to_dp_accounting_pld
from gdpcore.pld.powers import TAIL_MASS_TRUNCATION, WRAP_TAIL, fft_bytes, fft_length
from gdpcore.pld.subsampled_gaussian import (
    LOG_MASS_TRUNCATION_BOUND,
    SINGLE_STEP_TAIL,
    horizon_bucket,
    optimistic_single_step_length,
    optimistic_single_step_pld,
    single_step,
    single_step_length,
    single_step_pld,
    subsampled_gaussian_loss_pmf,
)
from gdpcore.pld.tilt import (
    SPLICED_BYTES_PER_POINT,
    TILT_FRACTION,
    refine_tail,
    tilt_for_loss,
    tilt_for_tail,
    tilted_log_mgf,
)

__all__ = [
    "LOG_MASS_TRUNCATION_BOUND",
    "SINGLE_STEP_TAIL",
    "SPLICED_BYTES_PER_POINT",
    "TAIL_MASS_TRUNCATION",
    "TILT_FRACTION",
    "WRAP_TAIL",
    "compose_loss_pmf",
    "compose_phases",
    "convolve_pmfs",
    "fft_bytes",
    "fft_length",
    "horizon_bucket",
    "optimistic_composition",
    "optimistic_loss_pmf",
    "optimistic_single_step_length",
    "optimistic_single_step_pld",
    "refine_tail",
    "single_step",
    "single_step_length",
    "single_step_pld",
    "subsampled_gaussian_loss_pmf",
    "threshold_test_masses",
    "tilt_for_loss",
    "tilt_for_tail",
    "tilted_log_mgf",
    "to_dp_accounting_pld",
]
