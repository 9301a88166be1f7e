"""The generic path: every other mechanism, its single steps composed by :mod:`gdpcore.pld`."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from gdpcore import kinds
from gdpcore.accounting import ACCOUNTANT_NAME
from gdpcore.curve import (
    SymmetricCurve,
    curve_from_loss_pmf,
)
from gdpcore.engine.base import _Law, _pmf_diagnostics, _ProducerBase
from gdpcore.engine.gap import certified_gap
from gdpcore.engine.ladder import GENERIC_START
from gdpcore.engine.plan import _SINGLE_BYTES_PER_POINT, PLD_TIME_SHARE, Deadline, _Refused
from gdpcore.engine.rdp import rdp_fallback
from gdpcore.engine.results import PLD_ENGINE, Curves, Provenance
from gdpcore.engine.twin import _smallest_query, optimistic_curve
from gdpcore.mechanisms import Mechanism
from gdpcore.pmf import LossPMF

_GENERIC_MAX_ROUNDS = 6


_GENERIC_LAW = _Law(
    order=1.0,
    share=0.8,
    # Single steps and compositions grow as 1 / step.
    predict=lambda _elapsed, cost, ratio: 1.25 * cost * ratio,
    # A finer step widened the bracket: round-off allowances (per atom, more atoms) dominate where the report reads
    # (delta near 1e-12 on multi-part compositions); the coarser round is kept.
    stalled=lambda gap, previous, _ratio: gap >= previous,
    stall_reason="a finer step widened the bracket: round-off allowances dominate",
)
"""Every other mechanism: the twin's privacy buckets are first order in the step (the pessimistic side second)."""


class _GenericPath(_ProducerBase):
    """The generic path of the producer."""

    def _compose_generic(
        self,
        parts: list[tuple[LossPMF, LossPMF | None, int]],
        *,
        planned_bytes: float = 0.0,
        check: Callable[[], None] | None = None,
    ) -> tuple[SymmetricCurve, LossPMF, LossPMF | None, float | None]:
        """The pessimistic curve of ``parts``: remove direction, and the add direction (a symmetric part's add PMF is
        its remove PMF) when any part is asymmetric, the profile being their pointwise max
        (:func:`gdpcore.curve.curve_from_loss_pmf`); each PMF's round-off allowance is added to every atom there.
        Also returns the loss the remove direction's tail was tilted towards (None if not)."""
        remove, tilt_loss = self._compose_direction(
            [(r, steps) for r, _, steps in parts], planned_bytes=planned_bytes, check=check
        )
        add = None
        if any(a is not None for _, a, _ in parts):
            add, _ = self._compose_direction(
                [(r if a is None else a, steps) for r, a, steps in parts], planned_bytes=planned_bytes, check=check
            )
        return curve_from_loss_pmf(remove, add), remove, add, tilt_loss

    def _generic(self, mechanism: Mechanism, fixed: float | None, optimistic: bool, t0) -> Curves:
        """Both sides at one step per round (:meth:`_refine_steps` with the first-order ``_GENERIC_LAW``), from
        ``GENERIC_START``; the RDP fallback when even the first round's plan is refused.

        Budgets: every round's single steps are sized before dp_accounting builds them
        (:meth:`plan_single_steps`, bytes and predicted seconds), and the deadline (``PLD_TIME_SHARE`` of the time
        budget, :class:`Deadline`) is read before each single step, convolution and twin phase; a refusal in the
        first round leaves the rest of the budget to the RDP fallback."""
        prev: tuple[float, float] | None = None  # (step, single-step bytes) of the last round
        deadline = Deadline.after(t0, PLD_TIME_SHARE * self.budget.seconds)

        def check() -> None:
            deadline.check("on the PLD rounds")

        def attempt(d: float) -> tuple[tuple[Curves, LossPMF, float | None, float], float | None]:
            nonlocal prev
            if prev is not None and prev[1] * prev[0] / d > self.budget.memory_bytes:
                # Single steps grow as 1 / step: refuse before dp_accounting builds them.
                raise _Refused(f"single steps of ~{prev[1] * prev[0] / d:.3g} bytes at discretization {d:g}")
            self.plan_single_steps(mechanism, d, deadline)
            parts = self._generic_parts(mechanism, d, "pessimistic", check)
            smallest = _smallest_query(self.deltas, self.alpha_min, None)
            _, mem = self.plan_generic(parts, d, smallest_query=smallest)
            prev = (d, float(sum(_SINGLE_BYTES_PER_POINT * r.probs.size for r, _, _ in parts)))
            pess, remove, add, tilt_loss = self._compose_generic(parts, planned_bytes=float(mem), check=check)
            diagnostics = _pmf_diagnostics(remove)
            diagnostics["add_direction_gap"] = pess.add_direction_gap
            diagnostics["add_excess_mass"] = 0.0 if add is None else max(0.0, add.p_mass - 1.0)
            opt, twin, gap = None, "not built", None
            upper_only: str | None = None
            if optimistic:
                smallest = _smallest_query(self.deltas, self.alpha_min, pess)
                try:
                    opt_parts = self._generic_parts(mechanism, d, "optimistic", check)
                    # The optimistic FFTs span the mass down to the wrap-around slack: planned on their own.
                    _, opt_mem = self.plan_generic(opt_parts, d, smallest_query=smallest)
                    singles = [(r, steps) for r, _, steps in opt_parts]
                    opt, twin = optimistic_curve(
                        singles,
                        mechanism,
                        d,
                        smallest,
                        tilt_target=tilt_loss,
                        tilt_max_bytes=self.budget.memory_bytes - opt_mem,
                        check=check,
                    )
                    gap = certified_gap(pess, opt, deltas=self.deltas, alpha_min=self.alpha_min)
                except kinds.UnsupportedMechanismError as why:  # a kind with upper bounds only (zCDP, truncated)
                    twin, upper_only = "not available", f"upper_bound_only: {why}"
                except _Refused:
                    twin, gap = "not built (over budget)", math.inf
            curves = Curves(
                pess,
                opt,
                None,
                Provenance(
                    accountant=(
                        f"{ACCOUNTANT_NAME} single steps composed by gdpcore.pld (connect-the-dots, pessimistic;"
                        f" optimistic twin: {twin})"
                    ),
                    engine=PLD_ENGINE,  # dp_accounting built the single steps; gdpcore.pld composed them
                    discretization=d,
                    discretization_lower=d if optimistic else None,
                    status=upper_only or "ok",
                    certified_gap=gap,
                    tolerance=None if fixed is not None else self.tolerance,
                    support_length=int(remove.probs.size),
                    memory_estimate_bytes=mem,
                    diagnostics=diagnostics,
                ),
            )
            return (curves, remove, tilt_loss, smallest), gap

        def roundoff_dominates(value: tuple[Curves, LossPMF, float | None, float], gap: float) -> str | None:
            _, remove, tilt_loss, smallest = value
            if tilt_loss is None and remove.max_roundoff * remove.probs.size > 1e-2 * smallest:
                # The round-off allowance (per atom, untilted: a multi-part composition) is comparable with the
                # smallest delta or FPR read; a finer step only adds atoms to it, so refinement cannot close the gap.
                return "the round-off allowance is comparable with the smallest delta or FPR read"
            return None

        # Ends that bound different mechanisms (kinds.ends_notes): their gap is the bracket's, not the step's, and no
        # finer step closes it, so one round is run.
        ends = kinds.ends_notes(mechanism)
        run = self._refine_steps(
            attempt,
            fixed if fixed is not None else GENERIC_START,
            rounds=1 if fixed is not None or ends else _GENERIC_MAX_ROUNDS,
            law=_GENERIC_LAW,
            t0=t0,
            stop=roundoff_dominates,
        )
        if run.best is None:
            why = str(run.refused)
            if "time budget" not in why:
                why += f" > budget {self.budget.memory_bytes:.0f} bytes"
            return rdp_fallback(mechanism, f"over_budget: {why}", deadline=Deadline.after(t0, self.budget.seconds))
        best: Curves = run.best[0][0]
        prov = best.provenance
        if fixed is None and optimistic and prov.certified_gap is not None and prov.certified_gap > self.tolerance:
            if ends and prov.status == "ok":
                status = (
                    f"bracket_of_bounds: certified gap {prov.certified_gap:.2e} is the width between two proven bounds"
                    f" of different mechanisms ({'; '.join(ends)}), not a discretisation error"
                )
            else:
                status = f"tolerance_not_met: certified gap {prov.certified_gap:.2e} > tolerance {self.tolerance:g}"
            best = dataclasses.replace(best, provenance=dataclasses.replace(prov, status=status))
        return best
