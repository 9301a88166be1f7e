"""gdp-audit as the accountant inside an Opacus training loop (optional extra ``gdp-audit[opacus]``).

This module imports Opacus (and so torch) when it is imported; nothing else in :mod:`gdpcore` imports it.
:func:`gdpcore.adapters.register_opacus_accountant` imports it on demand and registers :class:`GdpAuditAccountant`
with Opacus's accountant registry (``opacus.accountants.register_accountant``) under :data:`MECHANISM`, so that
``PrivacyEngine(accountant="gdp-audit")`` creates one (``opacus.accountants.create_accountant``).

What it accounts
    Opacus's interface (``opacus.accountants.accountant.IAccountant``): the optimizer hook calls
    :meth:`~GdpAuditAccountant.step` once per DP-SGD step with the noise multiplier and the Poisson sampling rate; the
    history merges consecutive equal steps into ``(noise_multiplier, sample_rate, num_steps)`` phases exactly as
    Opacus's RDP and PRV accountants do (``opacus/accountants/prv.py``), so a ``state_dict()`` of this accountant and
    of theirs hold the same history. That history is read by :func:`gdpcore.adapters.from_opacus_history` (a
    composition of Poisson-subsampled Gaussian phases, add/remove adjacency) and accounted by
    :func:`gdpcore.analyze`: the one engine, so every number here equals the report of the same history, with its
    bound label (``"upper"``, or ``"estimate"`` when :attr:`~GdpAuditAccountant.sampler` says the batches were not
    Poisson-sampled; :mod:`gdpcore.adapters`, sampler honesty).

Reusing work
    A report is computed once per history (the cache key is the history as a tuple, the sampler and the deltas whose
    epsilon brackets the engine refines): ``get_epsilon``, :meth:`~GdpAuditAccountant.mu`,
    :meth:`~GdpAuditAccountant.tpr_at_fpr` and :meth:`~GdpAuditAccountant.advantage` asked at the same step share
    one analysis. Assigning ``accountant.history`` directly (as ``opacus.accountants.utils.get_noise_multiplier``
    does) is seen through the key, never answered from a stale report.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from opacus.accountants.accountant import IAccountant

from gdpcore.adapters import TrainingRunReport, from_opacus_history
from gdpcore.engine.gap import DEFAULT_DELTAS

__all__ = ["MECHANISM", "Bound", "GdpAuditAccountant"]

MECHANISM = "gdp-audit"
"""The name Opacus knows this accountant by (``PrivacyEngine(accountant=MECHANISM)``, ``state_dict()["mechanism"]``)."""

_CACHE_SIZE = 4  # reports kept (the current history's, and a few a caller may alternate with)


class Bound(NamedTuple):
    """A number and what it is for this run: ``"upper"`` / ``"lower"`` (a certified bound), ``"exact"`` or
    ``"estimate"`` (gdpcore.report.PrivacyReport.bound_types, relabelled by gdpcore.adapters.TrainingRun)."""

    value: float
    bound: str


class GdpAuditAccountant(IAccountant):
    """Opacus accountant backed by gdpcore's tight PLD accounting; also answers mu-GDP, TPR at FPR and advantage.

    ``sampler`` is how the batches are drawn: ``"poisson"`` (Opacus's ``DPDataLoader``, the default of
    ``make_private``) makes every number a certified bound; ``"shuffle"`` (``poisson_sampling=False``) or
    ``"fixed"`` keeps the Poisson-accounted numbers and labels them ``"estimate"`` (gdpcore.adapters.SHUFFLE_REASON).
    Opacus creates the accountant without arguments; set ``engine.accountant.sampler`` when the loader is not Poisson.
    """

    def __init__(self, *, sampler: str = "poisson") -> None:
        super().__init__()
        self.history: list[tuple[float, float, int]] = []
        self.sampler = sampler
        self._deltas: tuple[float, ...] = tuple(DEFAULT_DELTAS)
        self._cache: dict[tuple[Any, ...], TrainingRunReport] = {}

    # -- Opacus's interface ----------------------------------------------------------------------------------------
    def step(self, *, noise_multiplier: float, sample_rate: float) -> None:
        """One DP-SGD step: merged into the last phase when (noise_multiplier, sample_rate) are unchanged."""
        if self.history:
            sigma, q, steps = self.history[-1]
            if sigma == noise_multiplier and q == sample_rate:
                self.history[-1] = (sigma, q, steps + 1)
                return
        self.history.append((noise_multiplier, sample_rate, 1))

    def get_epsilon(self, delta: float, *args: Any, **kwargs: Any) -> float:
        """epsilon at ``delta`` spent so far: an upper bound (label: :meth:`epsilon`); 0 before the first step.

        Opacus's accountant-specific keyword arguments (``eps_error`` of PRV, ``alphas`` of RDP) do not apply to
        this accountant and are refused by name rather than ignored."""
        if args or kwargs:
            names = [*map(repr, args), *kwargs]
            raise ValueError(f"gdp-audit get_epsilon takes only delta, got also {', '.join(names)[:200]}")
        return self.epsilon(delta).value

    def __len__(self) -> int:
        """Number of optimisation steps taken so far (the interface's meaning; Opacus's RDP and PRV accountants
        return the number of history phases, which is also > 0 exactly when a step was taken)."""
        return sum(int(t) for _, _, t in self.history)

    @classmethod
    def mechanism(cls) -> str:
        return MECHANISM

    # -- certified numbers -------------------------------------------------------------------------------------------
    def report(self, delta: float | None = None) -> TrainingRunReport:
        """The labelled report of the history so far (gdpcore.adapters.TrainingRun.analyze), computed once per
        history; ``delta`` joins the deltas whose epsilon brackets the engine refines to its tolerance."""
        if delta is not None:
            _check_delta(delta)
            if delta not in self._deltas:
                self._deltas = tuple(sorted({*self._deltas, float(delta)}))
        if not self.history:
            raise ValueError("the accountant recorded no step yet: there is nothing to report")
        key = (tuple(tuple(p) for p in self.history), self.sampler, self._deltas)
        cached = self._cache.get(key)
        if cached is None:
            run = from_opacus_history(self.history, sampler=self.sampler)
            cached = run.analyze(deltas=self._deltas)
            if len(self._cache) >= _CACHE_SIZE:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = cached
        return cached

    def epsilon(self, delta: float) -> Bound:
        """epsilon(delta) with its label; ``(0, "exact")`` before the first step."""
        _check_delta(delta)
        if not self.history:
            return Bound(0.0, "exact")
        rep = self.report(delta)
        return Bound(float(rep.epsilon(delta)), rep.bound_types["epsilon"])

    def mu(self) -> Bound:
        """Tightest pessimistic mu-GDP (gdpcore.report.PrivacyReport.mu) with its label; ``(0, "exact")`` before the
        first step."""
        if not self.history:
            return Bound(0.0, "exact")
        rep = self.report()
        return Bound(rep.mu, rep.bound_types["mu"])

    def tpr_at_fpr(self, fpr: float) -> Bound:
        """Highest membership-inference TPR at false-positive rate ``fpr`` with its label; ``(fpr, "exact")`` before
        the first step (no step, no test beats guessing)."""
        if isinstance(fpr, bool) or not isinstance(fpr, int | float) or not 0 < fpr < 1:
            raise ValueError(f"fpr must be a number in (0, 1), got {fpr!r}"[:200])
        if not self.history:
            return Bound(float(fpr), "exact")
        rep = self.report()
        return Bound(float(rep.report.tpr(float(fpr))), rep.bound_types["tpr"])

    def advantage(self) -> Bound:
        """Maximum membership-inference advantage TPR - FPR with its label; ``(0, "exact")`` before the first step."""
        if not self.history:
            return Bound(0.0, "exact")
        rep = self.report()
        return Bound(float(rep.report.advantage), rep.bound_types["advantage"])


def _check_delta(delta: Any) -> None:
    if isinstance(delta, bool) or not isinstance(delta, int | float) or not (0 < delta < 1) or math.isnan(delta):
        raise ValueError(f"delta must be a number in (0, 1), got {delta!r}"[:200])
