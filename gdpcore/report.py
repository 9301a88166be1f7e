"""``analyze(mechanism) -> PrivacyReport``: the complete, labelled privacy statement of one mechanism.

Two accountants:

* ``"pld"``: Google dp_accounting PLDs. A pessimistic (connect-the-dots) curve gives every reported number; an
  optimistic twin (privacy buckets rounded down; plus a certified residual shift for Poisson-subsampled Gaussians,
  see ``_optimistic_curve``) gives the other side of the bracket, whose width is the
  accountant's own discretisation error.
* ``"closed_form"``: compositions of plain Gaussian mechanisms are exactly mu-GDP (seed 000 Sec. 5); all numbers
  are exact.

``accountant="auto"`` (default) takes the closed form when it is exact and the PLD otherwise.

What each number is (``PrivacyReport.bound_types``): epsilon(delta), delta(eps), tpr, advantage, mu are *upper*
bounds; fnr and bayes_security are *lower* bounds; gdp_regret is an *estimate* of the fit of mu-GDP to the
pessimistic curve (itself computed to a certified bracket). With the closed form every number is *exact*.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal

import numpy as np

from gdpcore import closed_form, fast_pld
from gdpcore._validation import check_choice, check_open_unit_array, check_positive, check_probability
from gdpcore.accounting import ACCOUNTANT_NAME, DEFAULT_DISCRETIZATION, build_pld, loss_pmfs
from gdpcore.curve import SymmetricCurve, curve_from_loss_pmf, curve_from_remove_pmf
from gdpcore.mechanisms import Composed, Mechanism, SelfComposed, SubsampledGaussian

__all__ = ["DEFAULT_ALPHA_MIN", "GDP_COMPLETE_REGRET", "PrivacyReport", "analyze"]

DEFAULT_ALPHA_MIN = 1e-10
"""mu certifies f_mu <= f for FPR (and FNR) >= this cut-off; gdpnum uses the same 1e-10 (seed 000 Sec. 3.4)."""

_RESIDUAL_TAIL = 1e-14
"""Chernoff tail of the optimistic side's residual shift (Poisson-subsampled Gaussians): lower-bound profiles are
lowered by this plus the FFT wrap-around slack (1e-15), far below any delta a report is read at."""
_OFFSET_MARGIN = 1e3
"""The shifted twin is used only when every FPR mu is certified at is >= this many times its profile offset: where
mu is read at FPR ~ 1e-17 (the cut-off lowered in huge-epsilon cells) an offset of 1e-14 would make mu_lower vacuous,
and dp_accounting's plain privacy buckets (no offset) are the better lower bound."""

GDP_COMPLETE_REGRET = 1e-2
"""Below this regret mu-GDP is an essentially complete description (seed 000 Prop. 4.1: advantage over-reported by
at most 2 percentage points)."""

Side = Literal["pessimistic", "optimistic"]


@dataclasses.dataclass(frozen=True, eq=False)
class PrivacyReport:
    """Privacy report of one mechanism. Build it with :func:`analyze`.

    Numbers default to the *pessimistic* side (safe for the data subject). ``side="optimistic"`` returns the other
    end of the accountant's bracket (not a guarantee: a bound on how loose the guarantee may be).
    """

    mechanism: Mechanism
    accountant: str
    discretization: float | None
    alpha_min: float
    _pessimistic: SymmetricCurve | None = dataclasses.field(repr=False)
    _optimistic: SymmetricCurve | None = dataclasses.field(repr=False)
    _exact_mu: float | None = dataclasses.field(repr=False, default=None)
    diagnostics: dict[str, float] = dataclasses.field(default_factory=dict)

    # -- labels --------------------------------------------------------------------------------------------------------
    @property
    def exact(self) -> bool:
        return self._exact_mu is not None

    @property
    def bound_types(self) -> dict[str, str]:
        """What each reported number is: "upper", "lower", "estimate" or "exact"."""
        if self.exact:
            return dict.fromkeys(
                ("epsilon", "delta", "fnr", "tpr", "advantage", "bayes_security", "mu", "gdp_regret"), "exact"
            )
        return {
            "epsilon": "upper",
            "delta": "upper",
            "fnr": "lower",
            "tpr": "upper",
            "advantage": "upper",
            "bayes_security": "lower",
            "mu": "upper",
            "gdp_regret": "estimate",
        }

    def curve(self, side: Side = "pessimistic") -> SymmetricCurve:
        """The piecewise-linear trade-off curve behind the numbers of ``side`` (PLD accountant only; ``ValueError``
        for exact reports, whose curve is the closed form f_mu)."""
        if self.exact:
            raise ValueError("an exact (closed-form) report has no piecewise-linear curve; use fnr()/delta()")
        return self._curve(side)

    def _curve(self, side: Side) -> SymmetricCurve:
        check_choice("side", side, ("pessimistic", "optimistic"))
        curve = self._pessimistic if side == "pessimistic" else self._optimistic
        if curve is None:
            raise ValueError(f"side={side!r} is not available for accountant {self.accountant!r}")
        return curve

    # -- profile ---------------------------------------------------------------------------------------------------
    def epsilon(self, delta: np.ndarray | float, *, side: Side = "pessimistic") -> np.ndarray | float:
        """Smallest eps >= 0 such that the mechanism is (eps, delta)-DP; vectorised over ``delta`` in (0, 1)."""
        check_open_unit_array("delta", delta)
        if self.exact:
            return closed_form.get_epsilon_from_gdp(mu=self._exact_mu, delta=delta)
        return self._curve(side).epsilon_at(delta)

    def delta(self, epsilon: np.ndarray | float, *, side: Side = "pessimistic") -> np.ndarray | float:
        """delta(eps): the privacy profile, vectorised; any real eps."""
        if self.exact:
            return closed_form.get_delta_from_gdp(mu=self._exact_mu, epsilon=epsilon)
        return self._curve(side).delta_at(epsilon)

    # -- trade-off curve ---------------------------------------------------------------------------------------------
    def fnr(self, fpr: np.ndarray | float, *, side: Side = "pessimistic") -> np.ndarray | float:
        """beta(alpha): the lowest false-negative rate any membership test can reach at false-positive rate alpha."""
        if self.exact:
            return closed_form.get_beta_from_gdp(mu=self._exact_mu, alpha=fpr)
        return self._curve(side).fnr(fpr)

    def tpr(self, fpr: np.ndarray | float, *, side: Side = "pessimistic") -> np.ndarray | float:
        """Highest attack true-positive rate at false-positive rate alpha: 1 - beta(alpha)."""
        beta = self.fnr(fpr, side=side)
        return 1.0 - beta

    def breakpoints(self, *, side: Side = "pessimistic") -> tuple[np.ndarray, np.ndarray]:
        """Vertices (alpha, beta) of the piecewise-linear curve (PLD accountant only)."""
        return self._curve(side).breakpoints()

    # -- scalars -----------------------------------------------------------------------------------------------------
    @property
    def advantage(self) -> float:
        """Maximum membership-inference advantage TPR - FPR = delta(0) = TV distance (seed 000 Eq. 8): upper bound."""
        if self.exact:
            return closed_form.get_advantage_from_gdp(mu=self._exact_mu)
        return self._curve("pessimistic").advantage

    @property
    def advantage_lower(self) -> float:
        """The optimistic end of the advantage bracket."""
        if self.exact:
            return self.advantage
        if self._optimistic is None:
            return math.nan
        return self._curve("optimistic").advantage

    @property
    def bayes_security(self) -> float:
        """Bayes security beta* = 1 - advantage (Cherubin et al. 2024): lower bound."""
        return 1.0 - self.advantage

    @property
    def mu(self) -> float:
        """Tightest pessimistic mu with f_mu <= f for all FPR and FNR >= ``alpha_min`` (seed 000 Eq. 5 / Eq. 21)."""
        return self._mu_and_alpha("pessimistic")[0]

    @property
    def has_optimistic(self) -> bool:
        return self.exact or self._optimistic is not None

    @property
    def mu_lower(self) -> float:
        """mu of the optimistic curve at the same cut-off: the true tightest mu lies in [mu_lower, mu].

        NaN when the report was built with ``optimistic=False``.
        """
        if self.exact:
            return self.mu
        if self._optimistic is None:
            return math.nan
        return self._mu_and_alpha("optimistic")[0]

    @property
    def mu_binding_fpr(self) -> float:
        """The FPR at which mu is attained (the binding point of Eq. 21)."""
        return self._mu_and_alpha("pessimistic")[1]

    @property
    def mu_cutoff(self) -> float:
        """mu certifies f_mu <= f wherever FPR and FNR are both >= this cut-off: ``alpha_min``, or lower when the
        curve meets the diagonal below alpha_min (see :meth:`gdpcore.curve.SymmetricCurve.mu`). 0 for exact mu."""
        return self._mu_and_alpha("pessimistic")[2]

    def _mu_and_alpha(self, side: Side) -> tuple[float, float, float]:
        if self.exact:
            return float(self._exact_mu), math.nan, 0.0
        key = f"_mu_{side}"
        cached = self.__dict__.get(key)
        if cached is None:
            cached = self._curve(side).mu(alpha_min=self.alpha_min)
            object.__setattr__(self, key, cached)
        return cached

    @property
    def gdp_regret(self) -> float:
        """Regret Delta(f, f_mu) (seed 000 Eq. 6 / Eq. 24): the upper end of a certified bracket of width <= 1e-9."""
        return self.gdp_regret_bracket[1]

    @property
    def gdp_regret_bracket(self) -> tuple[float, float]:
        if self.exact:
            return 0.0, 0.0
        cached = self.__dict__.get("_regret")
        if cached is None:
            cached = self._curve("pessimistic").regret_against_gdp(self.mu)
            object.__setattr__(self, "_regret", cached)
        return cached

    @property
    def gdp_is_complete(self) -> bool:
        """regret < 1e-2: mu-GDP is an essentially complete description (seed 000 Prop. 4.1)."""
        return self.gdp_regret < GDP_COMPLETE_REGRET

    def regret(self, representation: str, *, delta: float | None = None, orders: Any = None) -> float:
        """Regret (seed 000 Eq. 24) of stating this guarantee as ``representation`` ("pure_dp", "epsilon_delta" at
        ``delta``, "zcdp", "rdp", "gdp"); ``inf`` where it cannot describe the mechanism. Labelled details:
        :func:`gdpcore.representations.get_regret`."""
        from gdpcore.representations import get_regret  # local import: representations imports this module's users

        return get_regret(self, representation, delta=delta, orders=orders).regret

    # -- export ------------------------------------------------------------------------------------------------------
    def summary(
        self,
        *,
        deltas: tuple[float, ...] = (1e-5, 1e-6, 1e-9),
        fprs: tuple[float, ...] = (1e-10, 1e-8, 1e-6, 1e-4, 1e-3, 1e-2, 1e-1),
    ) -> dict[str, Any]:
        """A JSON-ready dict: every number with its bound type, the accountant and its discretisation."""
        labels = self.bound_types

        def other_side(fn, x):
            if self.exact:
                return float(fn(x))
            if self._optimistic is None:
                return None
            return float(fn(x, side="optimistic"))

        out: dict[str, Any] = {
            "mechanism": self.mechanism.to_dict(),
            "mechanism_hash": self.mechanism.content_hash,
            "accountant": self.accountant,
            "discretization": self.discretization,
            "mu": {"value": self.mu, "bound": labels["mu"], "lower": self.mu_lower},
            "mu_certified_for_fpr_at_least": None if self.exact else self.mu_cutoff,
            "mu_binding_fpr": None if self.exact else self.mu_binding_fpr,
            "gdp_regret": {
                "value": self.gdp_regret,
                "bound": labels["gdp_regret"],
                "bracket": list(self.gdp_regret_bracket),
            },
            "gdp_is_complete": self.gdp_is_complete,
            "advantage": {"value": self.advantage, "bound": labels["advantage"], "lower": self.advantage_lower},
            "bayes_security": {"value": self.bayes_security, "bound": labels["bayes_security"]},
            "epsilon": [
                {
                    "delta": d,
                    "value": float(self.epsilon(d)),
                    "bound": labels["epsilon"],
                    "lower": other_side(self.epsilon, d),
                }
                for d in deltas
            ],
            "tpr": [
                {
                    "fpr": a,
                    "value": float(self.tpr(a)),
                    "bound": labels["tpr"],
                    "lower": other_side(self.tpr, a),
                }
                for a in fprs
            ],
            "diagnostics": dict(self.diagnostics),
        }
        return out


def analyze(
    mechanism: Mechanism,
    *,
    accountant: Literal["auto", "pld", "closed_form"] = "auto",
    discretization: float = DEFAULT_DISCRETIZATION,
    alpha_min: float = DEFAULT_ALPHA_MIN,
    optimistic: bool = True,
) -> PrivacyReport:
    """Account for ``mechanism`` and return its :class:`PrivacyReport`.

    Args:
        mechanism: a :mod:`gdpcore.mechanisms` description.
        accountant: ``"auto"`` (closed form when exact, else PLD), ``"pld"`` or ``"closed_form"``.
        discretization: dp_accounting's ``value_discretization_interval`` for the PLD accountant.
        alpha_min: the FPR/FNR cut-off below which mu is not certified (tail truncation of the accountant).
        optimistic: also build the optimistic twin (doubles the cost; needed for the lower ends of brackets).
    """
    if not isinstance(mechanism, Mechanism):
        raise ValueError(f"mechanism must be a gdpcore mechanism, got {mechanism!r}")
    check_choice("accountant", accountant, ("auto", "pld", "closed_form"))
    check_positive("discretization", discretization)
    check_probability("alpha_min", alpha_min, high_open=True)
    if alpha_min >= 0.5:
        raise ValueError(f"alpha_min must be < 0.5, got {alpha_min!r}")
    exact_mu = mechanism.gaussian_mu()
    if accountant == "closed_form" and exact_mu is None:
        raise ValueError(
            f"accountant='closed_form' needs a composition of plain Gaussian mechanisms, got {mechanism.kind!r}"
        )
    if accountant in ("auto", "closed_form") and exact_mu is not None:
        return PrivacyReport(
            mechanism=mechanism,
            accountant="closed_form.gaussian",
            discretization=None,
            alpha_min=alpha_min,
            _pessimistic=None,
            _optimistic=None,
            _exact_mu=float(exact_mu),
        )

    pld = build_pld(mechanism, discretization=discretization, pessimistic=True)
    remove, add = loss_pmfs(pld, pessimistic=True)
    pess = curve_from_loss_pmf(remove, add)
    diagnostics: dict[str, float] = {
        "support_length": float(remove.probs.size),
        "infinity_mass": remove.infinity_mass,
        "remove_p_mass": remove.p_mass,
        # Sum p e^-l of the remove PMF: the mass-consistency check. Values away from 1 flag the truncated lower
        # tail (not read by the curve construction; see gdpcore.accounting).
        "remove_q_mass": remove.q_mass,
        "add_direction_gap": pess.add_direction_gap,
        "add_excess_mass": 0.0 if add is None else max(0.0, add.p_mass - 1.0),
    }
    opt, twin = (None, "")
    if optimistic:
        smallest_fpr = min(float(alpha_min), pess.fixed_point)  # mu's cut-off is lowered below alpha* (curve.mu)
        opt, twin = _optimistic_curve(mechanism, float(discretization), smallest_fpr=smallest_fpr)
    return PrivacyReport(
        mechanism=mechanism,
        accountant=f"{ACCOUNTANT_NAME} (connect-the-dots, pessimistic"
        + (f"; optimistic twin: {twin})" if twin else ")"),
        discretization=float(discretization),
        alpha_min=float(alpha_min),
        _pessimistic=pess,
        _optimistic=opt,
        diagnostics=diagnostics,
    )


def _optimistic_curve(
    mechanism: Mechanism, discretization: float, *, smallest_fpr: float
) -> tuple[SymmetricCurve, str]:
    """The optimistic twin: a curve whose profile is a proven lower bound on the mechanism's, and its label.

    Privacy buckets (every loss rounded down) lose about T * d / 2 in epsilon after T compositions: 10% of epsilon at
    T = 1e4, d = 1e-4. For Poisson-subsampled Gaussians, and schedules of them (Opacus histories, phases), the
    rounding is largely given back by the certified residual shift of
    :func:`gdpcore.fast_pld.certified_optimistic_composition` (the construction the grid engine uses), which brings
    the eps bracket to ~1e-4 (tests/test_report.py checks it against dp_accounting at a finer step). Other mechanisms use
    dp_accounting's privacy buckets directly, as do cells whose mu is read at FPRs comparable with the shifted
    twin's profile offset (``_OFFSET_MARGIN``).
    """
    offset_ok = smallest_fpr >= _OFFSET_MARGIN * (_RESIDUAL_TAIL + fast_pld.TAIL_MASS_TRUNCATION)
    phases = _subsampled_gaussian_phases(mechanism) if offset_ok else None
    if phases is not None and len(phases) <= _MAX_SHIFTED_PHASES:
        parts = [
            (
                fast_pld.optimistic_single_step_pld(
                    noise_multiplier=sigma, sampling_rate=q, discretization=discretization
                ),
                steps,
            )
            for (sigma, q), steps in phases.items()
        ]
        pmf, offset, _ = fast_pld.certified_optimistic_composition(parts, tail=_RESIDUAL_TAIL)
        return (
            curve_from_remove_pmf(pmf, delta_offset=offset),
            "privacy buckets + certified residual shift, gdpcore.fast_pld",
        )
    pld_opt = build_pld(mechanism, discretization=discretization, pessimistic=False)
    remove_opt, _ = loss_pmfs(pld_opt, pessimistic=False)
    # Optimistic side: the remove direction alone is a lower bound on the mechanism's profile. dp_accounting's
    # self_compose adds its truncation allowance (1e-15) to the infinity mass even for optimistic PMFs; mass at
    # +inf can only raise delta, so it is dropped here to keep this side a lower bound.
    remove_opt = dataclasses.replace(remove_opt, infinity_mass=0.0)
    return curve_from_loss_pmf(remove_opt, None), "privacy buckets"


_MAX_SHIFTED_PHASES = 16  # distinct (sigma, q) phases composed by the shifted twin; longer schedules use dp_accounting


def _subsampled_gaussian_phases(mechanism: Mechanism) -> dict[tuple[float, float], int] | None:
    """{(noise multiplier, q): total steps} when ``mechanism`` is a composition of Poisson-subsampled Gaussians with
    q < 1 only (any nesting of Composed / SelfComposed), else None."""
    if isinstance(mechanism, SubsampledGaussian):
        if not mechanism.sampling_rate < 1:
            return None
        return {(mechanism.noise_multiplier, mechanism.sampling_rate): mechanism.steps}
    if isinstance(mechanism, SelfComposed):
        inner = _subsampled_gaussian_phases(mechanism.mechanism)
        return None if inner is None else {k: v * mechanism.count for k, v in inner.items()}
    if isinstance(mechanism, Composed):
        out: dict[tuple[float, float], int] = {}
        for part in mechanism.mechanisms:
            inner = _subsampled_gaussian_phases(part)
            if inner is None:
                return None
            for k, v in inner.items():
                out[k] = out.get(k, 0) + v
        return out
    return None
