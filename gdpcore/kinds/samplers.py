"""DP-SGD with the batch samplers people use instead of Poisson sampling: cyclic (deterministic) batches, batches
reshuffled every epoch, and balls-in-bins (random allocation). Registered by :mod:`gdpcore.kinds`.

Convention (Chua et al., "How Private are DP-SGD Implementations?", ICML 2024: the ABLQ mechanisms): a run has
``epochs`` epochs of ``steps_per_epoch`` steps; each step releases the sum of the clipped contributions (L2 norm at most ``sensitivity``)
of the examples in its batch plus N(0, (noise_multiplier * sensitivity)^2). Adjacent datasets differ in one example
replaced by a record that contributes nothing (Chua et al.'s "zeroing-out" relation, their stand-in for add/remove
that keeps every batch's size): the relation of Poisson DP-SGD under add/remove, so ``noise_multiplier`` means what it
means for :class:`~gdpcore.mechanisms.SubsampledGaussian` and the numbers are comparable with Poisson accounting at
``sampling_rate = 1 / steps_per_epoch``. Every kind here is a function of sigma = ``noise_multiplier`` alone (the
sensitivity cancels), which is what all bounds below use.

* :class:`CyclicGaussian`: each example in exactly one batch per epoch, the same fixed order every epoch. The differing
  example moves one (adaptively chosen) step's sum by at most the sensitivity per epoch and no other step: ``epochs``
  adaptively composed Gaussian mechanisms, exactly (sqrt(epochs)/sigma)-GDP (Dong, Roth, Su 2022, Cor. 3.3), with
  equality for the linear query that puts the whole sensitivity on the example's step (Chua et al. 2024,
  "deterministic" ABLQ_D). Every number is *exact*.
* :class:`ShuffledGaussian`: the examples are reshuffled (a fresh uniform permutation, independent of the data) every
  epoch and cut into ``steps_per_epoch`` fixed batches.

  - Upper end (every default number): the cyclic guarantee. For each fixed sequence of permutations the run is a
    cyclic run with a different (still data-independent) batch order per epoch, exactly (sqrt(epochs)/sigma)-GDP by
    the argument above; the random permutations make the released outputs a mixture, with the same weights under
    both datasets, of those mechanisms' outputs, and the hockey-stick divergence is jointly convex, so every
    delta(eps) of the shuffled run is at most the cyclic one (revealing the permutations only adds information, and
    not revealing them is post-processing). This is a valid upper bound with no amplification by shuffling.
  - Lower end (``side="optimistic"``): the proven lower bound of Chua et al. 2024 (their shuffle lower bound:
    the pair below, tested with the cube sets {max_t x_t <= C}), extended to reshuffled epochs as in Chua et
    al., "Scalable DP-SGD: Shuffling vs. Poisson Subsampling", NeurIPS 2024 (one epoch's lower privacy-loss
    distribution composed over the epochs). With every other example contributing -1 and the differing one +1
    (zeroed in the neighbour), after a shift of the known constants one epoch releases
    P = (1/T) sum_t N(2 e_t, sigma^2 I_T) against Q = (1/T) sum_t N(e_t, sigma^2 I_T), T = ``steps_per_epoch``;
    reshuffling makes the epochs independent, so the run releases P^E against Q^E. Any test on that pair
    lower-bounds the run's privacy profile. We post-process one epoch's output to the slice of its largest
    coordinate (the cube sets cut into thin slices, whose P- and Q-masses are closed forms in the normal CDF), round
    each slice's privacy loss *down* to the lattice and merge equal buckets (:func:`max_slice_lower_pld`): a
    privacy-buckets PMF of a post-processing of the pair, which the engine's optimistic twin composes over epochs and
    reads through threshold tests (a lower bound, :mod:`gdpcore.engine.twin`). Labelled "lower (proven, Chua et al.
    2024)" in :data:`LOWER_LABEL`. This is the construction of their released code (google-research
    ``dpsgd_batch_sampler_accounting``, ``ShuffleAccountant``) on a finer lattice: tests/test_samplers_published.py
    recomputes their numbers independently; the lower end matches their single-epoch cube-set values to 1e-4 and is
    never below their multi-epoch values above delta 1e-12 (docs/references.md CH-1, CH-2).
* :class:`BallsInBinsGaussian`: each example placed in one uniformly chosen step of each epoch, independently (Chua
  et al., "Balls-and-Bins Sampling for DP-SGD", AISTATS 2025; Feldman and Shenfeld, "Privacy amplification by random
  allocation", 2025: random allocation of 1 of T steps).

  - Upper end: the smaller of the cyclic guarantee (every fixed allocation puts the differing example in exactly
    one step per epoch; joint convexity as above) and the amplified random-allocation bound (exact remove-direction
    RDP of Chua et al. 2025's dominating pair, Feldman and Shenfeld 2025's Gaussian case; a shifted Gaussian or a
    lower-tail bound for the add direction), per epoch, composed by the engine: :mod:`gdpcore.kinds.random_allocation` states the theorem
    and its conditions. Labelled by :func:`gdpcore.kinds.random_allocation.upper_label`.
  - Lower end: the same slice construction on the pair Chua et al. 2025 analyse for balls-in-bins,
    P = (1/T) sum_t N(e_t, sigma^2 I_T) against Q = N(0, sigma^2 I_T) (the differing example contributes +1 at its
    uniformly chosen step, every other example 0): the mechanism releases exactly this pair on that dataset pair, so
    the bound is proven without any dominance result.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar

import numpy as np
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from scipy import special

from gdpcore._validation import Choice, Count, Positive
from gdpcore.kinds import random_allocation
from gdpcore.kinds._common import NOT_PURE, dpa_discretisation, log_uniform
from gdpcore.kinds.registry import KindSpec, Unsupported
from gdpcore.mechanisms import Composed, Mechanism, SelfComposed, SubsampledGaussian, param

__all__ = [
    "BALLS_IN_BINS_GAUSSIAN",
    "CYCLIC_GAUSSIAN",
    "LOWER_LABEL",
    "SHUFFLED_GAUSSIAN",
    "BallsInBinsGaussian",
    "CyclicGaussian",
    "ShuffledGaussian",
    "max_slice_lower_pld",
    "max_slice_masses",
    "shuffled_counterpart",
]

LOWER_LABEL = {
    "shuffled_gaussian": "lower (proven, Chua et al. 2024)",
    "balls_in_bins_gaussian": "lower (proven, Chua et al. 2025 pair)",
    "cyclic_gaussian": "exact",
}
"""What the optimistic end of each sampler kind's report is (the pessimistic end is "upper", "exact" for cyclic)."""

MAX_SLICES = 400_000
"""Most slices of the largest coordinate built for one epoch's lower bound (any slicing is a valid post-processing;
finer slices only tighten it). The slice width is ``step * sigma^2`` (the loss moves by about ``step`` across one)
unless that would exceed this count."""

_TAIL = 1e-25
"""The two end slices (max below ``lo``, max above ``hi``) hold about this much P-mass; they are kept, exactly, as
buckets of their own (nothing is truncated)."""

_ROUNDING_MARGIN = 1e-6
"""Slack, in lattice units, subtracted before a slice's privacy loss is rounded down, so that floating-point error in
the log masses can never round a loss up."""

_EPOCHS_DOC = "number of epochs (passes over the data)"
_STEPS_DOC = "number of batches (steps) per epoch"
_NOISE_DOC = "noise standard deviation in units of the clipping norm"
_SENS_DOC = "clipping norm (L2 sensitivity of one example's contribution)"
_RELATION_DOC = (
    "neighbouring relation the guarantee is stated for (add_remove: one example zeroed out, the batch sizes kept;"
    " Chua et al. 2024)"
)


def _relation():
    return param(_RELATION_DOC, Choice(("add_remove",)), default="add_remove")


@dataclasses.dataclass(frozen=True, kw_only=True)
class CyclicGaussian(Mechanism):
    """DP-SGD with deterministic batches: each example in exactly one batch per epoch, the same order every epoch.

    Exactly (sqrt(epochs)/noise_multiplier)-GDP (module docstring)."""

    kind: ClassVar[str] = "cyclic_gaussian"
    noise_multiplier: float = param(_NOISE_DOC, Positive())
    steps_per_epoch: int = param(_STEPS_DOC, Count())
    epochs: int = param(_EPOCHS_DOC, Count())
    sensitivity: float = param(_SENS_DOC, Positive(), default=1.0)
    neighbouring: str = _relation()


@dataclasses.dataclass(frozen=True, kw_only=True)
class ShuffledGaussian(Mechanism):
    """DP-SGD with the data reshuffled every epoch and cut into ``steps_per_epoch`` fixed batches (Opacus with
    ``poisson_sampling=False``, Keras / TF, jax_privacy examples): upper end the cyclic guarantee, lower end the proven
    shuffle lower bound of Chua et al. 2024 (module docstring)."""

    kind: ClassVar[str] = "shuffled_gaussian"
    noise_multiplier: float = param(_NOISE_DOC, Positive())
    steps_per_epoch: int = param(_STEPS_DOC, Count())
    epochs: int = param(_EPOCHS_DOC, Count())
    sensitivity: float = param(_SENS_DOC, Positive(), default=1.0)
    neighbouring: str = _relation()


@dataclasses.dataclass(frozen=True, kw_only=True)
class BallsInBinsGaussian(Mechanism):
    """DP-SGD with balls-in-bins batches: each example in one uniformly chosen step of every epoch (random allocation
    of 1 of ``steps_per_epoch`` steps); upper end the cyclic guarantee, lower end a proven bound (module docstring)."""

    kind: ClassVar[str] = "balls_in_bins_gaussian"
    noise_multiplier: float = param(_NOISE_DOC, Positive())
    steps_per_epoch: int = param(_STEPS_DOC, Count())
    epochs: int = param(_EPOCHS_DOC, Count())
    sensitivity: float = param(_SENS_DOC, Positive(), default=1.0)
    neighbouring: str = _relation()


SamplerMechanism = CyclicGaussian | ShuffledGaussian | BallsInBinsGaussian

# (mean of the differing example's step under the dataset, under its neighbour), after the shift by the known
# contributions of the other examples (module docstring).
_PAIRS = {"shuffled_gaussian": (2.0, 1.0), "balls_in_bins_gaussian": (1.0, 0.0)}


# ---------------------------------------------------------------------------------------------------------------------
# The lower bound: one epoch's output post-processed to the slice of its largest coordinate
# ---------------------------------------------------------------------------------------------------------------------
def _log_max_cdf(c: np.ndarray, sigma: float, steps: int, mean: float) -> np.ndarray:
    """log Pr[max_t x_t <= c] under (1/T) sum_t N(mean e_t, sigma^2 I_T): every component gives the same value,
    Phi((c - mean)/sigma) Phi(c/sigma)^(T-1)."""
    return special.log_ndtr((c - mean) / sigma) + (steps - 1) * special.log_ndtr(c / sigma)


def _slice_edges(sigma: float, steps: int, upper_mean: float, step: float) -> np.ndarray:
    # lo: Phi(lo/sigma)^T ~ _TAIL (the upper mixture's mass below lo is smaller still); hi: T * Q((hi - mean)/sigma)
    # ~ _TAIL. Both end regions are kept as slices of their own.
    lo = sigma * float(special.ndtri(math.exp(math.log(_TAIL) / steps)))
    hi = upper_mean + sigma * float(-special.ndtri(_TAIL / steps))
    width = max(step * sigma**2, (hi - lo) / MAX_SLICES)
    n = max(1, math.ceil((hi - lo) / width))
    return lo + width * np.arange(n + 1)


def _slice_log_masses(edges: np.ndarray, sigma: float, steps: int, mean: float) -> np.ndarray:
    """log masses of (-inf, e_0], (e_0, e_1], ..., (e_{n-1}, e_n], (e_n, inf) for the largest coordinate."""
    log_cdf = _log_max_cdf(edges, sigma, steps, mean)
    with np.errstate(divide="ignore"):
        inner = log_cdf[1:] + np.log(-np.expm1(log_cdf[:-1] - log_cdf[1:]))
        top = np.log(-np.expm1(log_cdf[-1:]))
    return np.concatenate([log_cdf[:1], inner, top])


def max_slice_masses(
    sigma: float, steps: int, means: tuple[float, float], step: float
) -> tuple[np.ndarray, np.ndarray]:
    """(log P-masses, log Q-masses) of the slices of the largest coordinate of one epoch's output, P and Q the
    mixtures (1/T) sum_t N(m e_t, sigma^2 I_T) with m = ``means`` = (upper, lower); closed forms in the normal CDF.
    The slices partition the real line (their P-masses sum to 1)."""
    edges = _slice_edges(sigma, steps, means[0], step)
    return _slice_log_masses(edges, sigma, steps, means[0]), _slice_log_masses(edges, sigma, steps, means[1])


def max_slice_lower_pld(
    sigma: float, steps: int, means: tuple[float, float], step: float
) -> pld_lib.PrivacyLossDistribution:
    """A privacy-buckets PLD (losses rounded *down*) of one epoch's output post-processed to its largest coordinate's
    slice, for the pair of :func:`max_slice_masses`: every bucket is an event (a union of slices) whose P-mass is
    exact and whose privacy loss is at most the slice's true log(P/Q), so Q(bucket) <= P(bucket) e^{-loss}. Composing
    such PMFs over independent epochs and reading threshold tests on the composed index gives a proven lower bound on
    the pair's (hence the mechanism's) privacy profile (:func:`gdpcore.engine.optimistic_curve`)."""
    log_p, log_q = max_slice_masses(sigma, steps, means, step)
    keep = np.isfinite(log_p)
    log_p, log_q = log_p[keep], log_q[keep]
    with np.errstate(invalid="ignore"):
        losses = (log_p - log_q) / step - _ROUNDING_MARGIN
    finite = np.isfinite(losses)
    # A slice whose Q-mass underflowed has a loss above every finite one: rounding it down to the largest finite
    # loss keeps it a lower bound.
    top = float(np.max(losses[finite])) if finite.any() else 0.0
    index = np.floor(np.where(finite, losses, top)).astype(np.int64)
    lower = int(index.min())
    probs = np.bincount(index - lower, weights=np.exp(log_p))
    pmf = pld_pmf.DensePLDPmf(step, lower, probs, 0.0, False)
    return pld_lib.PrivacyLossDistribution(pmf)


def shuffled_counterpart(mechanism: Mechanism) -> Mechanism | None:
    """The shuffled run a Poisson-accounted description stands for, for its proven lower bound; None if there is none.

    Opacus with ``poisson_sampling=False`` (and Keras / TF-Privacy) accounts a shuffled run of T = ``steps_per_epoch``
    fixed batches per epoch as a :class:`~gdpcore.mechanisms.SubsampledGaussian` with ``sampling_rate`` = 1/T
    (Opacus: 1 / len(data_loader)). The counterpart keeps the noise multiplier and sensitivity and counts the *whole*
    epochs only (``steps // T``): a run's output contains those epochs' outputs, so their lower bound is one of the
    run's (a partial epoch can only add privacy loss). Phases (``Composed`` / ``SelfComposed`` of such descriptions)
    map part by part: Chua et al.'s dataset pair is the same in every phase, so the run releases the product of the
    phases' pairs and the composed lower bound is one of the run's. None unless every part is a Poisson-subsampled
    Gaussian with 1/q an integer (to 1e-9) and at least one whole epoch.
    """
    if isinstance(mechanism, SelfComposed):
        inner = shuffled_counterpart(mechanism.mechanism)
        return None if inner is None else SelfComposed(mechanism=inner, count=mechanism.count)
    if isinstance(mechanism, Composed):
        parts = [shuffled_counterpart(part) for part in mechanism.mechanisms]
        return None if any(p is None for p in parts) else Composed(mechanisms=tuple(p for p in parts if p is not None))
    if not isinstance(mechanism, SubsampledGaussian):
        return None
    per_epoch = round(1.0 / mechanism.sampling_rate)
    if per_epoch < 1 or abs(per_epoch * mechanism.sampling_rate - 1.0) > 1e-9 or mechanism.steps < per_epoch:
        return None
    return ShuffledGaussian(
        noise_multiplier=mechanism.noise_multiplier,
        steps_per_epoch=per_epoch,
        epochs=mechanism.steps // per_epoch,
        sensitivity=mechanism.sensitivity,
    )


# ---------------------------------------------------------------------------------------------------------------------
# Hooks
# ---------------------------------------------------------------------------------------------------------------------
def _epoch_gaussian_pld(m: SamplerMechanism, *, step: float, pessimistic: bool) -> pld_lib.PrivacyLossDistribution:
    """One epoch of deterministic batches: one Gaussian step (sensitivity cancels)."""
    return pld_lib.from_gaussian_mechanism(
        m.noise_multiplier * m.sensitivity, sensitivity=m.sensitivity, **dpa_discretisation(step, pessimistic)
    )


def _bracket_pld(m: SamplerMechanism, *, step: float, pessimistic: bool) -> pld_lib.PrivacyLossDistribution:
    """Upper end: one epoch of cyclic batches; lower end: the slice construction on the kind's pair."""
    if pessimistic:
        return _epoch_gaussian_pld(m, step=step, pessimistic=True)
    return max_slice_lower_pld(m.noise_multiplier, m.steps_per_epoch, _PAIRS[m.kind], step)


def _gdp_mu(m: SamplerMechanism) -> float:
    return math.sqrt(m.epochs) / m.noise_multiplier


def _cyclic_rdp(label: str):
    """The cyclic guarantee's RDP, epochs * t / (2 sigma^2) (``epochs`` Gaussians of mu = 1/sigma), labelled."""
    return lambda m, t: (m.epochs * t / (2.0 * m.noise_multiplier**2), label)


def _cyclic_rho(label: str):
    """The cyclic guarantee's zCDP rho, epochs / (2 sigma^2), labelled (constant ratio: limit "any")."""
    return lambda m: (m.epochs / (2.0 * m.noise_multiplier**2), label, "any")


def _draw(cls: type[SamplerMechanism]):
    def draw(rng: np.random.Generator) -> SamplerMechanism:
        return cls(
            noise_multiplier=log_uniform(rng, 0.6, 4.0),
            steps_per_epoch=int(round(log_uniform(rng, 1.0, 2000.0))),
            epochs=int(rng.integers(1, 6)),
            sensitivity=float(rng.choice([1.0, 2.0])),
        )

    return draw


_NO_EVENT = "dp_accounting has no DpEvent for this batch sampler"
_NO_CLT = "the CLT accountant applies to Poisson-subsampled Gaussians only"

CYCLIC_GAUSSIAN = KindSpec(
    cls=CyclicGaussian,
    steps_param="epochs",
    summary="DP-SGD on deterministic batches (same order every epoch): exactly (sqrt(epochs)/noise_multiplier)-GDP",
    draw=_draw(CyclicGaussian),
    pld=_epoch_gaussian_pld,
    pure_epsilon=lambda m: NOT_PURE,
    rdp=_cyclic_rdp("exact"),
    rho=_cyclic_rho("exact"),
    to_dp_event=Unsupported(_NO_EVENT),
    from_dp_event=Unsupported(_NO_EVENT),
    exact_mu=_gdp_mu,
    clt_mu_squared=Unsupported(_NO_CLT),
    gdp_upper_bound=lambda m: (_gdp_mu(m), "exact"),
    subsampled_gaussian_phases=Unsupported("deterministic batches are not Poisson-subsampled"),
)


_SLICE_LOWER = "lower end: the proven slice construction on its dominated pair (Chua et al. 2024)"


def _shuffled_ends(m: Any) -> str:
    return f"shuffled batches: upper end (proven: the deterministic-batch, cyclic, guarantee); {_SLICE_LOWER}"


def _balls_in_bins_ends(m: Any) -> str:
    upper = random_allocation.upper_label(m.noise_multiplier, m.steps_per_epoch)
    return f"balls-in-bins batches: upper end {upper.removeprefix('upper ')}; {_SLICE_LOWER}"


def _bracket_spec(cls: type[SamplerMechanism], summary: str, batches: str) -> KindSpec:
    """A sampler whose upper end is the cyclic guarantee (joint convexity over the data-independent batch
    assignments; RDP, zCDP and GDP are its exact values, upper bounds here) and whose lower end is the slice
    construction on the kind's own pair (:func:`_bracket_pld`)."""
    return KindSpec(
        cls=cls,
        steps_param="epochs",
        summary=summary,
        draw=_draw(cls),
        pld=_bracket_pld,
        pure_epsilon=lambda m: NOT_PURE,
        rdp=_cyclic_rdp("upper"),
        rho=_cyclic_rho("upper"),
        to_dp_event=Unsupported(_NO_EVENT),
        from_dp_event=Unsupported(_NO_EVENT),
        exact_mu=lambda m: None,
        clt_mu_squared=Unsupported(_NO_CLT),
        gdp_upper_bound=lambda m: (_gdp_mu(m), "upper"),
        subsampled_gaussian_phases=Unsupported(f"{batches} batches are not Poisson-subsampled"),
        ends_note=_shuffled_ends,
    )


SHUFFLED_GAUSSIAN = _bracket_spec(
    ShuffledGaussian,
    "DP-SGD on batches reshuffled every epoch: upper end the cyclic guarantee, lower end the proven shuffle lower"
    " bound (Chua et al. 2024)",
    "shuffled",
)


def _balls_in_bins_pld(m: SamplerMechanism, *, step: float, pessimistic: bool) -> pld_lib.PrivacyLossDistribution:
    """Upper end: one epoch's pair of min(cyclic, random-allocation bound) (:mod:`gdpcore.kinds.random_allocation`),
    the cyclic Gaussian where that bound improves nowhere; lower end: the slice construction (:func:`_bracket_pld`)."""
    if pessimistic:
        amplified = random_allocation.epoch_pld(m.noise_multiplier, m.steps_per_epoch, step)
        if amplified is not None:
            return amplified
    return _bracket_pld(m, step=step, pessimistic=pessimistic)


BALLS_IN_BINS_GAUSSIAN = dataclasses.replace(
    _bracket_spec(
        BallsInBinsGaussian,
        "DP-SGD on balls-in-bins batches (each example in one uniformly chosen step per epoch): upper end the smaller"
        " of the cyclic guarantee and the random-allocation bound (Feldman and Shenfeld 2025), lower end a proven"
        " bound",
        "balls-in-bins",
    ),
    pld=_balls_in_bins_pld,
    ends_note=_balls_in_bins_ends,
    rdp=lambda m, t: (m.epochs * random_allocation.epoch_rdp(m.noise_multiplier, m.steps_per_epoch, t), "upper"),
)
