"""``analyze(mechanism) -> PrivacyReport``: the complete, labelled privacy statement of one mechanism.

The curves come from the one accounting engine (:mod:`gdpcore.engine`); a report is read off them in one way
(:meth:`PrivacyReport.from_curves`). Two accountants:

* ``"pld"``: privacy-loss distributions (dp_accounting's construction; vectorised by :mod:`gdpcore.pld` for
  Poisson-subsampled Gaussians and schedules of them). A pessimistic (connect-the-dots) curve gives every reported
  number; an optimistic twin (the tests on the privacy-buckets composition, a post-processed mechanism) gives the
  other end of every bracket. By default the step is refined until the brackets of epsilon at
  the asked deltas, mu and the advantage are within 1% (``status`` says when a budget stopped it earlier).
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
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from gdpcore import closed_form, guidance, kinds
from gdpcore._validation import (
    check_alpha_min,
    check_choice,
    check_discretization,
    check_open_unit_array,
    check_positive,
    check_tolerance,
)
from gdpcore.curve import SymmetricCurve
from gdpcore.engine import (
    DEFAULT_DELTAS,
    DEFAULT_MEMORY_BUDGET,
    DEFAULT_TIME_BUDGET,
    DEFAULT_TOLERANCE,
    Budget,
    Curves,
    Provenance,
    optimistic_epsilon,
    produce,
)
from gdpcore.mechanisms import Mechanism

__all__ = ["DEFAULT_ALPHA_MIN", "GDP_COMPLETE_REGRET", "PrivacyReport", "analyze"]

DEFAULT_ALPHA_MIN = 1e-10
"""mu certifies f_mu <= f for FPR (and FNR) >= this cut-off; gdpnum uses the same 1e-10 (seed 000 Sec. 3.4)."""

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
    provenance: Provenance | None = dataclasses.field(repr=False, default=None)
    neighbouring_relation: str = ""
    """The neighbouring relation every number is stated for ("add_remove" or "replace_one"): the mechanism's."""

    def __post_init__(self) -> None:
        relation = self.mechanism.neighbouring_relation
        if self.neighbouring_relation and self.neighbouring_relation != relation:
            raise ValueError(
                f"neighbouring_relation must be the mechanism's {relation!r}, got {self.neighbouring_relation!r}"
            )
        object.__setattr__(self, "neighbouring_relation", relation)

    @classmethod
    def from_curves(cls, mechanism: Mechanism, curves: Curves, *, alpha_min: float) -> PrivacyReport:
        """The report of ``mechanism`` read off the engine's curves (:func:`gdpcore.engine.produce`): the one way a
        report is built."""
        prov = curves.provenance
        # A user's curve, profile or PLD is what the user says it is: the accountant names it first, so that every
        # number read from this report (and its rows and card) carries that provenance (gdpcore.kinds.curves); a
        # kind whose ends bound different mechanisms (the batch samplers) says which bound each end is.
        accountant = "; ".join([*kinds.input_notes(mechanism), *kinds.ends_notes(mechanism), prov.accountant])
        return cls(
            mechanism=mechanism,
            accountant=accountant,
            discretization=prov.discretization,
            alpha_min=float(alpha_min),
            _pessimistic=curves.pessimistic,
            _optimistic=curves.optimistic,
            _exact_mu=curves.exact_mu,
            diagnostics=dict(prov.diagnostics),
            provenance=prov,
        )

    @property
    def status(self) -> str:
        """ "ok", or why the numbers are looser than asked ("tolerance_not_met: ...", "discretization_limited: ...",
        "over_budget: ..." with the RDP fallback, "bracket_of_bounds: ..." when the two ends bound different
        mechanisms, :func:`gdpcore.kinds.ends_notes`); every number stays a valid bound of its labelled type."""
        return "ok" if self.provenance is None else self.provenance.status

    @property
    def certified_gap(self) -> float:
        """Achieved certified gap (:func:`gdpcore.engine.certified_gap`); 0 for exact reports, inf without a twin."""
        if self.exact:
            return 0.0
        if self.provenance is not None and self.provenance.certified_gap is not None:
            return float(self.provenance.certified_gap)
        return math.inf

    # -- labels --------------------------------------------------------------------------------------------------------
    @property
    def exact(self) -> bool:
        return self._exact_mu is not None

    @property
    def _mu_exact(self) -> float:
        if self._exact_mu is None:
            raise ValueError("this report has no closed-form mu")
        return float(self._exact_mu)

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
            return closed_form.get_epsilon_from_gdp(mu=self._mu_exact, delta=delta)
        if side == "optimistic":
            out = optimistic_epsilon(self._curve(side), np.atleast_1d(np.asarray(delta, dtype=float)))
            return float(out[0]) if np.ndim(delta) == 0 else out.reshape(np.shape(delta))
        return self._curve(side).epsilon_at(delta)

    def delta(self, epsilon: np.ndarray | float, *, side: Side = "pessimistic") -> np.ndarray | float:
        """delta(eps): the privacy profile, vectorised; any real eps."""
        if self.exact:
            return closed_form.get_delta_from_gdp(mu=self._mu_exact, epsilon=epsilon)
        return self._curve(side).delta_at(epsilon)

    # -- trade-off curve ---------------------------------------------------------------------------------------------
    def fnr(self, fpr: np.ndarray | float, *, side: Side = "pessimistic") -> np.ndarray | float:
        """beta(alpha): the lowest false-negative rate any membership test can reach at false-positive rate alpha."""
        if self.exact:
            return closed_form.get_beta_from_gdp(mu=self._mu_exact, alpha=fpr)
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
            return closed_form.get_advantage_from_gdp(mu=self._mu_exact)
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
            return self._mu_exact, math.nan, 0.0
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
            "neighbouring_relation": self.neighbouring_relation,
            "accountant": self.accountant,
            "discretization": self.discretization,
            "status": self.status,
            "certified_gap": None if self.provenance is None else self.provenance.certified_gap,
            "tolerance": None if self.provenance is None else self.provenance.tolerance,
            "mu": {"value": self.mu, "bound": labels["mu"], "lower": self.mu_lower},
            "mu_certified_for_fpr_at_least": None if self.exact else self.mu_cutoff,
            "mu_binding_fpr": None if self.exact else self.mu_binding_fpr,
            "gdp_regret": {
                "value": self.gdp_regret,
                "bound": labels["gdp_regret"],
                "bracket": list(self.gdp_regret_bracket),
                "regime_warning": guidance.regime_warning(self.mechanism),  # seed 000 rule of thumb
            },
            "gdp_is_complete": self.gdp_is_complete,
            "advantage": {"value": self.advantage, "bound": labels["advantage"], "lower": self.advantage_lower},
            "bayes_security": {"value": self.bayes_security, "bound": labels["bayes_security"]},
            "fixed_point": dict(zip(("value", "bound"), guidance.fixed_point(self), strict=True)),
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
                for a in (*fprs, guidance.fixed_point(self)[0])  # the last row: alpha* (FPR = FNR)
            ],
            "diagnostics": dict(self.diagnostics),
        }
        return out


def analyze(
    mechanism: Mechanism,
    *,
    accountant: Literal["auto", "pld", "closed_form"] = "auto",
    discretization: float | None = None,
    alpha_min: float = DEFAULT_ALPHA_MIN,
    optimistic: bool = True,
    deltas: Sequence[float] = DEFAULT_DELTAS,
    tolerance: float = DEFAULT_TOLERANCE,
    memory_budget_bytes: float = DEFAULT_MEMORY_BUDGET,
    time_budget_seconds: float = DEFAULT_TIME_BUDGET,
) -> PrivacyReport:
    """Account for ``mechanism`` and return its :class:`PrivacyReport` (curves from :mod:`gdpcore.engine`).

    Args:
        mechanism: a :mod:`gdpcore.mechanisms` description.
        accountant: ``"auto"`` (closed form when exact, else PLD), ``"pld"`` or ``"closed_form"``.
        discretization: None (default): the step is refined until the certified bracket of epsilon at ``deltas``,
            mu and the advantage is within ``tolerance``; a number: that fixed step (no refinement).
        alpha_min: the FPR/FNR cut-off below which mu is not certified (tail truncation of the accountant).
        optimistic: also build the optimistic twin (needed for the lower ends of brackets and for refinement).
        deltas: the deltas whose epsilon brackets the refinement controls (any delta can be queried afterwards).
        tolerance: target relative width of every controlled bracket (default 1%).
        memory_budget_bytes: working memory, checked before allocating; over it, the result is the RDP fallback
            or the best coarser result, with a status saying so.
        time_budget_seconds: refinement stops when the next step would exceed it (status says so).
    """
    if not isinstance(mechanism, Mechanism):
        raise ValueError(f"mechanism must be a gdpcore mechanism, got {mechanism!r}")
    check_choice("accountant", accountant, ("auto", "pld", "closed_form"))
    if discretization is not None:
        check_discretization(discretization)
    check_alpha_min(alpha_min)
    if isinstance(deltas, (str, bytes)):
        raise ValueError(f"deltas must be a sequence of numbers in (0, 1), got {deltas!r}")
    d_arr = np.atleast_1d(check_open_unit_array("deltas", deltas))
    tol = check_tolerance(tolerance)
    memory = check_positive("memory_budget_bytes", memory_budget_bytes)
    seconds = check_positive("time_budget_seconds", time_budget_seconds)
    curves = produce(
        mechanism,
        deltas=d_arr,
        alpha_min=float(alpha_min),
        tolerance=tol,
        budget=Budget(memory_bytes=memory, seconds=seconds),
        discretization=None if discretization is None else float(discretization),
        optimistic=optimistic,
        accountant=accountant,
    )
    return PrivacyReport.from_curves(mechanism, curves, alpha_min=alpha_min)
