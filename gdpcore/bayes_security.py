"""Bayes security beta* = 1 - max advantage for DP-SGD: exact from the accountant, closed-form estimates, planning and
conversions (seed 004, Cherubin et al., USENIX Security 2024).

* Exact: beta* = 1 - delta(0) = 1 - TV (Prop. 3 / Prop. 8) from the accountant's curve (:func:`get_bayes_security_
  from_report`): a *lower* bound with a PLD accountant (its delta(0) is an upper bound), exact for closed-form GDP.
* Closed form (Cor. 7): beta* ~= 1 - erf(q sqrt(T) / (sqrt(2) sigma)) for substitution (replace-one) adjacency, and
  1 - erf(q sqrt(T) / (2 sqrt(2) sigma)) for add/remove (the official code's ``relation="r"``). Both replace the
  Gaussian mixture by one Gaussian (Prop. 4); the rigorous error term is sqrt(T q (1 - q)) / sigma (two Prop. 4 terms,
  Thm 6) - usually vacuous - so the value is labelled ``"estimate"``. Measured error (this module's tests):
  substitution vs the exact reference (docs/references.md S004-2) at q = 0.001, sigma = 1: +0.0020 / +0.0065 / +0.0143 at 1 / 10 / 50
  epochs (the paper claims <= 0.01 up to 50 epochs; the tests allow 0.015); add/remove vs the PLD accountant (and
  prv-accountant): +0.0039 / +0.0123 / +0.0273. The closed form is *optimistic* (too high) for multi-step runs.
* Planning (Eq. 4 and inverses): q = erfinv(1 - beta*) sqrt(2) sigma / sqrt(T); sigma, T_max and epochs_max alike.
* Conversions: advantage 1 - beta*; attack success (uniform prior) 1 - beta*/2, in general 1 - beta* min(pi, 1 - pi);
  TPR <= 1 + FPR - beta* (Prop. 9, pi <= 1/2; pi/(1-pi)(1 + FPR - beta*) otherwise), clipped at 1.
* Attribute inference (Cor. 10): beta* ~= 1 - erf(q ||R|| / (2 sqrt(2) sigma C)), R_t = per-step max distance of
  clipped gradients when only the sensitive attribute changes (L2 norm by default as in the official code; L1 is the
  more conservative form of the printed proof).
* From gradients (Alg. 4, Sec. 5.4): :func:`get_max_gradient_distances` turns per-step sets of clipped gradients (one
  per attribute value, per record in the batch) into R_t, exactly (the point-set diameter, O(|A|^2)) or by Sec. 5.4's
  approximation 2 max_a ||g_a - mean|| (O(|A|), never below the diameter, so never more optimistic);
  :func:`check_attribute_inference_from_gradients` puts both Cor. 10 values next to the Cor. 7 (MIA) value of the run.
* (eps, delta) => beta* >= (2 - 2 delta)/(e^eps + 1) (Eq. 5, Humphries et al.), a lower bound; and the Sec. 4.2.1
  estimate eps >= ln((2 - beta* - 2 delta)/beta*).
* Where Cor. 7 fails: Sec. 4.1 (Fig. 4) finds the error "small (<= 0.01) for sigma >= 1 up to 50 epochs", ~0.02 at
  100 epochs, and "large" for sigma < 1 ("not advisable to use our bound for sigma < 1"). Every Cor. 7 value carries
  these warnings (``BayesSecurity.warnings``); :func:`check_bayes_security_from_dpsgd` puts the accountant's value
  of the same run next to it (at sigma 0.5, q 0.001, 100 epochs: 0.527 against 0.155, docs/references.md S004-2).
* Array input: :func:`get_bayes_security_from_dpsgd_array` and :func:`get_bayes_security_from_epsilon_delta_array`
  broadcast Cor. 7 and Eq. 5 over grids of parameters (the same formulas as the scalar functions).
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import Any

import numpy as np
from scipy import special

from gdpcore._validation import (
    bounded_repr,
    check_choice,
    check_count,
    check_discretization,
    check_positive,
    check_probability,
    check_real,
)

__all__ = [
    "COR7_RELIABLE_MAX_EPOCHS",
    "COR7_RELIABLE_MIN_SIGMA",
    "COR7_VALIDATED_MAX_Q",
    "BayesSecurity",
    "BayesSecurityArray",
    "AttributeInferenceCheck",
    "BayesSecurityCheck",
    "check_attribute_inference_from_gradients",
    "get_max_gradient_distances",
    "check_bayes_security_from_dpsgd",
    "cor7_warnings",
    "get_bayes_security_from_dpsgd_array",
    "get_bayes_security_from_epsilon_delta_array",
    "get_advantage_from_bayes_security",
    "get_attack_success_from_bayes_security",
    "get_bayes_security_from_attribute_distances",
    "get_bayes_security_from_dpsgd",
    "get_bayes_security_from_epsilon_delta",
    "get_bayes_security_from_report",
    "get_epsilon_estimate_from_bayes_security",
    "get_max_epochs_for_bayes_security",
    "get_max_steps_for_bayes_security",
    "get_noise_multiplier_for_bayes_security",
    "get_sampling_rate_for_bayes_security",
    "get_tpr_bound_from_bayes_security",
]

RELATIONS = ("replace_one", "add_remove")


@dataclasses.dataclass(frozen=True)
class BayesSecurity:
    """A Bayes-security value with its label and, for estimates, the Prop. 4 / Thm 6 error term."""

    value: float
    bound: str  # "exact" | "lower" | "estimate"
    error_term: float = 0.0  # |true - value| <= error_term for estimates (rigorous but usually vacuous)
    relation: str | None = None
    source: str = ""
    warnings: tuple[str, ...] = ()  # where the paper says the estimate is unreliable (Cor. 7: sigma < 1, > 50 epochs)


def _k(relation: str) -> float:
    return 1.0 if check_choice("relation", relation, RELATIONS) == "replace_one" else 2.0


def get_bayes_security_from_report(report: Any) -> BayesSecurity:
    """beta* = 1 - advantage = 1 - delta(0) of the report's curve (seed 004 Prop. 3/8; seed 000 Eq. 8).

    Lower bound for PLD reports (their advantage is an upper bound), exact for closed-form GDP reports. The relation
    is the mechanism's (add/remove for the core's subsampled Gaussian).
    """
    exact = bool(report.exact)
    return BayesSecurity(
        value=float(report.bayes_security),
        bound="exact" if exact else "lower",
        relation=report.mechanism.neighbouring_relation,
        source=report.accountant,
    )


def get_bayes_security_from_dpsgd(
    *, sampling_rate: float, noise_multiplier: float, steps: float, relation: str = "replace_one"
) -> BayesSecurity:
    """Closed-form DP-SGD MIA estimate (seed 004 Cor. 7): 1 - erf(q sqrt(T) / (k sqrt(2) sigma)), k = 1 for
    replace-one (the paper's threat model), 2 for add/remove. Labelled ``"estimate"``; ``error_term`` is the rigorous
    sqrt(T q (1 - q)) / sigma of Prop. 4 (twice the per-mixture TV bound)."""
    q = check_probability("sampling_rate", sampling_rate)
    sigma = check_positive("noise_multiplier", noise_multiplier)
    t = check_positive("steps", steps)
    value_arr, err_arr = _cor7(q, sigma, t, _k(relation))
    value, err = float(value_arr), float(err_arr)
    # The paper's closed form is stated for substitution (replace-one, its Game 2); add/remove halves the erf argument.
    source = (
        "seed 004 Cor. 7 (replace-one: the paper's substitution relation)"
        if relation == "replace_one"
        else "seed 004 Cor. 7 with the add/remove sensitivity (the official code's relation='r')"
    )
    return BayesSecurity(
        value=value,
        bound="estimate",
        error_term=err,
        relation=relation,
        source=source,
        warnings=cor7_warnings(noise_multiplier=sigma, sampling_rate=q, steps=t),
    )


COR7_RELIABLE_MIN_SIGMA = 1.0
"""Seed 004 Sec. 4.1: "for sigma < 1 the error is large ... it is not advisable to use our bound for sigma < 1"."""
COR7_RELIABLE_MAX_EPOCHS = 50.0
"""Seed 004 Sec. 4.1 (Fig. 4, p = 0.001): error <= 0.01 for sigma >= 1 "up to 50 epochs", ~0.02 at 100 epochs."""
COR7_VALIDATED_MAX_Q = 0.005
"""The largest sampling rate the authors' web calculator accepts (github.com/microsoft/dpsgd-calculator,
``MAX_SAMPLE_RATE``: "at most 0.015 error in the Bayes security approximation")."""


def cor7_warnings(*, noise_multiplier: float, sampling_rate: float, steps: float) -> tuple[str, ...]:
    """The warnings seed 004 Sec. 4.1 (Fig. 4) attaches to the Cor. 7 closed form: sigma < 1 (error "large": at
    sigma 0.5, q 0.001, 100 epochs Cor. 7 gives 0.527 against the exact 0.155, docs/references.md S004-2) and more
    than 50 epochs q T (error up to ~0.02 at 100 epochs). Both say the estimate is optimistic (too high). Also a
    sampling rate above the range the authors' calculator accepts (q <= 0.005). The rigorous error term of Prop. 4 is
    reported as a number, not a warning: it is >= 1 (bounds nothing) for most practical runs (seed 004 Sec. 4.1)."""
    out = []
    epochs = sampling_rate * steps
    if noise_multiplier < COR7_RELIABLE_MIN_SIGMA:
        out.append(
            f"noise_multiplier {noise_multiplier:g} < 1: seed 004 Sec. 4.1 finds the Cor. 7 error large for sigma < 1 "
            "(the estimate is optimistic; at sigma 0.5, q 0.001, 100 epochs it gives 0.527 against the exact 0.155) "
            "- use the accountant's value (check_bayes_security_from_dpsgd)"
        )
    if epochs > COR7_RELIABLE_MAX_EPOCHS:
        out.append(
            f"{epochs:g} epochs (q T) > 50: seed 004 Sec. 4.1 bounds the Cor. 7 error by 0.01 only up to 50 epochs "
            "(~0.02 at 100 epochs, sigma >= 1; optimistic) - use the accountant's value (check_bayes_security_from_dpsgd)"
        )
    if sampling_rate > COR7_VALIDATED_MAX_Q:
        out.append(f"sampling_rate {sampling_rate:g} > {COR7_VALIDATED_MAX_Q:g}: outside the range the paper validates")
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class BayesSecurityArray:
    """Cor. 7 over a broadcast grid of (q, sigma, T): ``value`` and ``error_term`` arrays, and ``unreliable`` (True
    where :func:`cor7_warnings` warns: sigma < 1, more than 50 epochs, or q > 0.005)."""

    value: np.ndarray
    error_term: np.ndarray
    unreliable: np.ndarray
    bound: str
    relation: str
    source: str


def _array(name: str, value: Any, *, low: float, high: float | None, low_open: bool = True) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number or an array of numbers, got {bounded_repr(value)}") from None
    bad = np.isnan(arr) | ((arr <= low) if low_open else (arr < low))
    if high is not None:
        bad |= arr > high
    if bad.any():
        first = arr.ravel()[int(np.argmax(bad.ravel()))]
        rng = ("(" if low_open else "[") + f"{low:g}, " + (f"{high:g}]" if high is not None else "inf)")
        raise ValueError(f"{name} must be in {rng}, got {bounded_repr(float(first))}")
    return arr


def get_bayes_security_from_dpsgd_array(
    *, sampling_rate: Any, noise_multiplier: Any, steps: Any, relation: str = "replace_one"
) -> BayesSecurityArray:
    """Cor. 7 (seed 004) broadcast over arrays of sampling rates, noise multipliers and steps (numpy rules); the same
    formula and error term as :func:`get_bayes_security_from_dpsgd`, elementwise. ``unreliable`` marks the entries
    the paper warns about (Sec. 4.1: sigma < 1 or more than 50 epochs; q above the authors' calculator range)."""
    q = _array("sampling_rate", sampling_rate, low=0.0, high=1.0)
    sigma = _array("noise_multiplier", noise_multiplier, low=0.0, high=None)
    t = _array("steps", steps, low=0.0, high=None)
    q, sigma, t = np.broadcast_arrays(q, sigma, t)
    value, err = _cor7(q, sigma, t, _k(relation))
    unreliable = (sigma < COR7_RELIABLE_MIN_SIGMA) | (q * t > COR7_RELIABLE_MAX_EPOCHS) | (q > COR7_VALIDATED_MAX_Q)
    return BayesSecurityArray(
        value=value,
        error_term=err,
        unreliable=np.asarray(unreliable, bool),
        bound="estimate",
        relation=relation,
        source="seed 004 Cor. 7",
    )


@dataclasses.dataclass(frozen=True)
class BayesSecurityCheck:
    """Cor. 7 next to the accountant's value of the same DP-SGD run (seed 004 Sec. 4.1 compares them the same way).

    ``exact_lower`` = 1 - delta(0) of the pessimistic PLD (a *lower* bound on beta*, within the step's discretisation
    of the exact value: 0.15459 against 0.15521 at sigma 0.5, q 0.001, 100 epochs), ``exact_upper`` = 1 - delta(0)
    of the optimistic twin (an *upper* bound, nan when the twin is not available; loose for long replace-one runs at
    a fixed step - ``status`` is the accountant's own word on its bracket); ``error`` = estimate - exact_lower, the
    amount by which Cor. 7 may be optimistic (> 0: the closed form claims more security than certified).
    """

    estimate: BayesSecurity
    exact_lower: float
    exact_upper: float
    error: float
    warnings: tuple[str, ...]
    relation: str
    discretization: float
    source: str
    status: str = ""


def _accountant_mechanism(q: float, sigma: float, steps: int, relation: str) -> Any:
    from gdpcore.mechanisms import SampledWithoutReplacementGaussian, SubsampledGaussian

    if relation == "add_remove":
        return SubsampledGaussian(noise_multiplier=sigma, sampling_rate=q, steps=steps)
    # Replace-one: the pair (1 - q) N(0) + q N(-C) vs (1 - q) N(0) + q N(C) (seed 004 Game 2) depends on q only; the
    # fixed-batch kind carries it with q = batch / dataset, which must reproduce the float q exactly.
    frac = Fraction(q).limit_denominator(10**12)
    if float(frac) != q:
        frac = Fraction(q)
    if frac == 1:
        frac = Fraction(2, 2)
    return SampledWithoutReplacementGaussian(
        noise_multiplier=sigma, dataset_size=frac.denominator, batch_size=frac.numerator, steps=steps
    )


def check_bayes_security_from_dpsgd(
    *,
    sampling_rate: float,
    noise_multiplier: float,
    steps: int,
    relation: str = "replace_one",
    discretization: float = 1e-4,
) -> BayesSecurityCheck:
    """The Cor. 7 estimate with its warnings and, next to it, beta* = 1 - delta(0) of the same run from the PLD
    accountant (:func:`gdpcore.analyze`; seed 004 Prop. 3/8 and Sec. 4.1, which uses the PLD accountant as ground
    truth). Replace-one (the paper's substitution) uses the pair (1 - q) N(0) + q N(-C) vs (1 - q) N(0) + q N(C),
    add/remove the Poisson-subsampled Gaussian. Takes seconds for 1e5 steps at the default step 1e-4."""
    q = check_probability("sampling_rate", sampling_rate)
    sigma = check_positive("noise_multiplier", noise_multiplier)
    t = check_count("steps", steps)
    check_choice("relation", relation, RELATIONS)
    d = check_discretization(discretization)
    est = get_bayes_security_from_dpsgd(sampling_rate=q, noise_multiplier=sigma, steps=t, relation=relation)
    from gdpcore.report import analyze  # local import: the report imports this module's users

    rep = analyze(_accountant_mechanism(q, sigma, t, relation), discretization=d, deltas=[1e-5])
    lower = float(rep.bayes_security)
    adv_lo = float(rep.advantage_lower)
    upper = 1.0 - adv_lo if math.isfinite(adv_lo) else math.nan
    return BayesSecurityCheck(
        estimate=est,
        exact_lower=lower,
        exact_upper=upper,
        error=est.value - lower,
        warnings=est.warnings,
        relation=relation,
        discretization=d,
        source=rep.accountant,
        status=rep.status,
    )


def _cor7(q: Any, sigma: Any, t: Any, k: float) -> tuple[np.ndarray, np.ndarray]:
    """Cor. 7 and its Prop. 4 / Thm 6 error term, elementwise (the one place the formula lives)."""
    value = 1.0 - special.erf(q * np.sqrt(t) / (k * math.sqrt(2.0) * sigma))
    err = np.sqrt(t * q * (1.0 - q)) / sigma
    return np.asarray(value, float), np.asarray(err, float)


def _c(target: float, steps: float) -> float:
    # erfinv(1 - beta*) sqrt(2) / sqrt(T)  (Eq. 4 with sigma factored out)
    return float(special.erfinv(1.0 - target) * math.sqrt(2.0) / math.sqrt(steps))


def _target(target: Any) -> float:
    return check_probability("target", target, high_open=True)


def get_sampling_rate_for_bayes_security(
    *, target: float, noise_multiplier: float, steps: float, relation: str = "replace_one"
) -> float:
    """Eq. 4: the sampling rate q = k erfinv(1 - beta*) sqrt(2) sigma / sqrt(T) at which the Cor. 7 estimate equals
    ``target`` (an estimate, not a guarantee). Beta* >= 0.98 and T = 5000 give q ~= 0.00035 sigma."""
    b = _target(target)
    sigma = check_positive("noise_multiplier", noise_multiplier)
    t = check_positive("steps", steps)
    return _k(relation) * _c(b, t) * sigma


def get_noise_multiplier_for_bayes_security(
    *, target: float, sampling_rate: float, steps: float, relation: str = "replace_one"
) -> float:
    """Inverse of Eq. 4: sigma = q sqrt(T) / (k sqrt(2) erfinv(1 - beta*)) (estimate)."""
    b = _target(target)
    q = check_probability("sampling_rate", sampling_rate)
    t = check_positive("steps", steps)
    return q / (_k(relation) * _c(b, t))


def get_max_steps_for_bayes_security(
    *, target: float, sampling_rate: float, noise_multiplier: float, relation: str = "replace_one"
) -> float:
    """Inverse of Eq. 4: T_max = (k sqrt(2) sigma erfinv(1 - beta*) / q)^2 (estimate; real-valued)."""
    b = _target(target)
    q = check_probability("sampling_rate", sampling_rate)
    sigma = check_positive("noise_multiplier", noise_multiplier)
    return float((_k(relation) * math.sqrt(2.0) * sigma * special.erfinv(1.0 - b) / q) ** 2)


def get_max_epochs_for_bayes_security(
    *, target: float, sampling_rate: float, noise_multiplier: float, relation: str = "replace_one"
) -> float:
    """Epochs E = q T_max = 2 k^2 sigma^2 erfinv(1 - beta*)^2 / q, with the paper's convention T = E/q."""
    t = get_max_steps_for_bayes_security(
        target=target, sampling_rate=sampling_rate, noise_multiplier=noise_multiplier, relation=relation
    )
    return float(sampling_rate) * t


def get_advantage_from_bayes_security(beta: float) -> float:
    """Adv = 1 - beta* (seed 004 Sec. 2: for MIA the equivalence is direct)."""
    return 1.0 - check_probability("beta", beta, low_open=False)


def get_attack_success_from_bayes_security(beta: float, *, prior: float = 0.5) -> float:
    """Upper bound on the attacker's success probability, 1 - beta* min(pi, 1 - pi); 1 - beta*/2 for a uniform prior
    (seed 004 Sec. 6.2 "V"; beta* = 0.98 -> 51%)."""
    b = check_probability("beta", beta, low_open=False)
    pi = check_probability("prior", prior, low_open=False)
    return 1.0 - b * min(pi, 1.0 - pi)


def get_tpr_bound_from_bayes_security(
    beta: float, *, fpr: np.ndarray | float, prior: float = 0.5
) -> np.ndarray | float:
    """Prop. 9: TPR <= 1 + FPR - beta* for pi <= 1/2, pi/(1 - pi)(1 + FPR - beta*) otherwise; clipped at 1."""
    b = check_probability("beta", beta, low_open=False)
    pi = check_probability("prior", prior, high_open=True)
    f = np.asarray(fpr, dtype=float)
    if np.isnan(f).any() or (f < 0).any() or (f > 1).any():
        raise ValueError(f"fpr must be in [0, 1], got {fpr!r}")
    scale = 1.0 if pi <= 0.5 else pi / (1.0 - pi)
    out = np.minimum(1.0, scale * (1.0 + f - b))
    return float(out) if out.ndim == 0 else out


def get_bayes_security_from_attribute_distances(
    *,
    sampling_rate: float,
    noise_multiplier: float,
    clipping_norm: float,
    max_gradient_distances: Any,
    norm: str = "l2",
) -> BayesSecurity:
    """Attribute-inference estimate (seed 004 Cor. 10): 1 - erf(q ||R|| / (2 sqrt(2) sigma C)).

    ``max_gradient_distances`` is R = (R_1..R_T), R_t = max over the batch and over attribute pairs of the distance
    between clipped gradients (Alg. 4); each R_t must be in [0, 2C]. ``norm="l2"`` (official code) or ``"l1"`` (the
    printed proof's last step; more conservative). With R_t = 2C for all t this equals Cor. 7 (replace-one).
    """
    q = check_probability("sampling_rate", sampling_rate)
    sigma = check_positive("noise_multiplier", noise_multiplier)
    c = check_positive("clipping_norm", clipping_norm)
    check_choice("norm", norm, ("l2", "l1"))
    try:
        r = np.asarray(max_gradient_distances, dtype=float).ravel()
    except (TypeError, ValueError):
        raise ValueError(
            f"max_gradient_distances must be an array of numbers, got {max_gradient_distances!r}"
        ) from None
    if r.size == 0:
        raise ValueError("max_gradient_distances must not be empty, got []")
    if np.isnan(r).any() or (r < 0).any() or (r > 2 * c * (1 + 1e-12)).any():
        raise ValueError(f"max_gradient_distances must be in [0, 2 * clipping_norm = {2 * c}], got {r.max()!r}")
    mag = float(np.linalg.norm(r)) if norm == "l2" else float(r.sum())
    value = float(1.0 - special.erf(q * mag / (2.0 * math.sqrt(2.0) * sigma * c)))
    err = math.sqrt(r.size * q * (1.0 - q)) / sigma
    return BayesSecurity(
        value=value, bound="estimate", error_term=err, relation="replace_one", source="seed 004 Cor. 10"
    )


def get_bayes_security_from_epsilon_delta(*, epsilon: float, delta: float) -> BayesSecurity:
    """Eq. 5 (Humphries et al.): an (eps, delta)-DP mechanism has Adv <= (e^eps - 1 + 2 delta)/(e^eps + 1), i.e.
    beta* >= (2 - 2 delta)/(e^eps + 1): a *lower* bound (tight at eps = 0: beta* = 1 - delta)."""
    eps = check_real("epsilon", epsilon)
    if eps < 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon!r}")
    d = check_probability("delta", delta, low_open=False)
    value = float(get_bayes_security_from_epsilon_delta_array(epsilon=eps, delta=d))
    return BayesSecurity(value=value, bound="lower", source="seed 004 Eq. 5")


def get_bayes_security_from_epsilon_delta_array(*, epsilon: Any, delta: Any) -> np.ndarray:
    """Eq. 5 broadcast over arrays: beta* >= (2 - 2 delta)/(e^eps + 1) elementwise (lower bounds), the formula of
    :func:`get_bayes_security_from_epsilon_delta`."""
    eps = _array("epsilon", epsilon, low=0.0, high=None, low_open=False)
    d = _array("delta", delta, low=0.0, high=1.0, low_open=False)
    with np.errstate(over="ignore"):
        return np.asarray((2.0 - 2.0 * d) / (np.exp(eps) + 1.0), float)


def get_epsilon_estimate_from_bayes_security(*, beta: float, delta: float) -> float:
    """Sec. 4.2.1: eps >= ln((2 - beta* - 2 delta)/beta*) - a rough *estimate* (a lower bound on any valid eps if
    beta* were exact; the paper calls it loose). Non-positive when delta >= 1 - beta*."""
    b = check_probability("beta", beta)
    d = check_probability("delta", delta, low_open=False, high_open=True)
    arg = (2.0 - b - 2.0 * d) / b
    return math.log(arg) if arg > 0 else -math.inf


# -- attribute inference from gradients (Alg. 4, Sec. 5.4) ----------------------------------------------------------
def _step_sets(gradients: Any) -> list[np.ndarray]:
    """Per step, an array (records, |A|, d) of gradients (one row per attribute value)."""
    if isinstance(gradients, np.ndarray):
        steps = [gradients[t] for t in range(gradients.shape[0])] if gradients.ndim == 4 else None
        if steps is None:
            raise ValueError(
                f"gradients must be (steps, records, attribute values, dimension), got an array of shape {gradients.shape}"
            )
    elif isinstance(gradients, list | tuple):
        steps = list(gradients)
    else:
        raise ValueError(
            f"gradients must be a list over steps of (records, attribute values, dimension) arrays, got {bounded_repr(gradients)}"
        )
    if not steps:
        raise ValueError("gradients must hold at least one step, got []")
    out = []
    for t, g in enumerate(steps):
        try:
            arr = np.asarray(g, dtype=float)
        except (TypeError, ValueError):
            raise ValueError(f"gradients[{t}] must be an array of numbers, got {bounded_repr(g)}") from None
        if arr.size == 0:
            out.append(np.zeros((0, 2, 1)))
            continue
        if arr.ndim != 3 or arr.shape[1] < 2:
            raise ValueError(
                f"gradients[{t}] must be (records, attribute values >= 2, dimension), got shape {arr.shape}"
            )
        if not np.isfinite(arr).all():
            raise ValueError(f"gradients[{t}] must be finite")
        out.append(arr)
    return out


def get_max_gradient_distances(gradients: Any, *, clipping_norm: float, method: str = "full") -> np.ndarray:
    """R_t of seed 004 Cor. 10 / Alg. 4 from per-step gradient sets: ``gradients[t]`` is an array (records in the
    batch at step t, |A| attribute values, d) of per-sample gradients of each record with its sensitive attribute set
    to each value (the same label). Every gradient is clipped to ``clipping_norm`` first (as DP-SGD does), then
    ``method="full"``: R_t = max over records of the point-set diameter max_{a, b} ||g_a - g_b|| (O(|A|^2));
    ``method="approximate"``: Sec. 5.4's 2 max_a ||g_a - mean|| (O(|A|); by the triangle inequality never below the
    diameter, so the beta* it gives is never more optimistic). A step with no record has R_t = 0."""
    c = check_positive("clipping_norm", clipping_norm)
    check_choice("method", method, ("full", "approximate"))
    out = []
    for g in _step_sets(gradients):
        if g.shape[0] == 0:
            out.append(0.0)
            continue
        norms = np.linalg.norm(g, axis=2, keepdims=True)
        clipped = g / np.maximum(1.0, norms / c)
        if method == "full":
            diff = clipped[:, :, None, :] - clipped[:, None, :, :]
            r = float(np.linalg.norm(diff, axis=3).max())
        else:
            centre = clipped.mean(axis=1, keepdims=True)
            r = float(2.0 * np.linalg.norm(clipped - centre, axis=2).max())
        out.append(min(r, 2.0 * c))  # R_t <= 2C always (round-off guard for the Cor. 10 validation)
    return np.asarray(out, float)


@dataclasses.dataclass(frozen=True)
class AttributeInferenceCheck:
    """Cor. 10 from gradients: ``full`` (exact diameters) and ``approximate`` (Sec. 5.4; <= full), next to the Cor. 7
    MIA value ``mia`` of the same run (the AI value is never below it: R_t <= 2C). All three are estimates (Prop. 4);
    Sec. 5.3: do not publish beta*_AI when membership inference is also a concern (R_t may depend on the challenge
    record)."""

    full: BayesSecurity | None
    approximate: BayesSecurity
    mia: BayesSecurity
    distances_full: np.ndarray | None
    distances_approximate: np.ndarray


def check_attribute_inference_from_gradients(
    *,
    sampling_rate: float,
    noise_multiplier: float,
    clipping_norm: float,
    gradients: Any,
    full: bool = True,
    norm: str = "l2",
) -> AttributeInferenceCheck:
    """Seed 004 Alg. 4 + Cor. 10 from the per-step gradient sets users can record (see
    :func:`get_max_gradient_distances`): the approximate (Sec. 5.4) and, with ``full=True``, the exact-diameter
    Bayes security against attribute inference, and the Cor. 7 membership-inference value for the same T steps."""
    approx_r = get_max_gradient_distances(gradients, clipping_norm=clipping_norm, method="approximate")
    common = {"sampling_rate": sampling_rate, "noise_multiplier": noise_multiplier, "clipping_norm": clipping_norm}
    approx = get_bayes_security_from_attribute_distances(**common, max_gradient_distances=approx_r, norm=norm)
    full_r = get_max_gradient_distances(gradients, clipping_norm=clipping_norm, method="full") if full else None
    full_b = (
        None
        if full_r is None
        else get_bayes_security_from_attribute_distances(**common, max_gradient_distances=full_r, norm=norm)
    )
    mia = get_bayes_security_from_dpsgd(
        sampling_rate=sampling_rate, noise_multiplier=noise_multiplier, steps=int(approx_r.size)
    )
    return AttributeInferenceCheck(
        full=full_b, approximate=approx, mia=mia, distances_full=full_r, distances_approximate=approx_r
    )
