"""Training-run adapters: what Opacus and TF-Privacy record about a DP-SGD run, as a gdpcore mechanism.

Pure functions (no file I/O: ``tasks.training_runs`` reads accountant files). Each returns a :class:`TrainingRun`: the
gdpcore mechanism, the *sampler* the batches were drawn with, the neighbouring relation, the step count and where it
all came from. :meth:`TrainingRun.analyze` accounts for it with :func:`gdpcore.analyze` (the one engine) and relabels
the numbers when the accounting does not match the sampler (*sampler honesty*, below).

Opacus (``opacus.accountants.IAccountant``)
    An accountant's ``history`` is a list of ``(noise_multiplier, sample_rate, num_steps)`` entries, one per run of
    identical steps (Opacus merges consecutive equal steps); ``state_dict()`` is ``{"history": history, "mechanism":
    "rdp" | "prv" | "gdp"}``. Every Opacus accountant (RDP, PRV, GDP) accounts each step as a Poisson-subsampled
    Gaussian with rate ``sample_rate`` under add/remove adjacency, so a history maps to a composition of
    :class:`~gdpcore.SubsampledGaussian` phases - the same mechanism whichever accountant recorded it (gdpcore's
    tight PLD accountant then replaces Opacus's). ``make_private(poisson_sampling=True)`` (Opacus's default) draws the
    batches with ``DPDataLoader`` (Poisson sampling): the accounting is then a guarantee. With
    ``poisson_sampling=False`` the batches come from the user's shuffled ``DataLoader`` while Opacus still accounts
    them as Poisson: the numbers are an *estimate* (sampler ``"shuffle"``).

TF-Privacy (``compute_dp_sgd_privacy_lib.compute_dp_sgd_privacy_statement``)
    Its conventions, reproduced exactly: sampling rate ``q = batch_size / number_of_examples``; step count
    ``ceil(num_epochs / q)`` (14,063 for N = 60,000, B = 256, 60 epochs, where epochs x ceil(N / B) would give 14,100);
    ``used_microbatching=True`` (its default) halves the noise multiplier, because a microbatch of size > 1 doubles the
    add/remove sensitivity of the clipped microbatch mean (Ponomareva et al. 2023, "How to DP-fy ML", Sec. 5.6); its
    "assuming Poisson sampling" line is ``SelfComposed(PoissonSampled(q, Gaussian(sigma')), ceil(epochs / q))``
    accounted under add/remove of one example. With ``max_examples_per_user = k > 1`` TF-Privacy converts the
    example-level (eps, delta) by group privacy (Vadhan 2017, Lemma 2.2); here the user-level mechanism itself is
    accounted: each of the user's <= k examples is Poisson-sampled independently, so one step releases a Gaussian
    shifted by Binomial(k, q) clipped contributions - a mixture of Gaussians with sensitivities 0..k and binomial
    weights (dp_accounting's ``MixtureOfGaussiansDpEvent``), available when that kind is registered.

Sampler honesty
    ``sampler`` is ``"poisson"`` (each example included independently with probability q per step: the accounted
    mechanism), ``"shuffle"`` (a shuffled pass over the data in fixed-size batches, each example once per epoch) or
    ``"fixed"`` (each step draws a fixed-size batch uniformly without replacement). Poisson accounting is *not* a
    proven bound for shuffled batches (Chua et al. 2024, "How Private are DP-SGD Implementations?", show the gap can
    be large), so a ``"shuffle"`` run keeps the Poisson-accounted numbers but every one of them is labelled
    ``"estimate"`` with :data:`SHUFFLE_REASON`. Fixed-size batches under replace-one adjacency are exactly
    dp_accounting's ``SampledWithoutReplacementDpEvent``; when a kind for it is registered the run is accounted
    exactly, otherwise (and under add/remove) the Poisson numbers are labelled ``"estimate"`` (:data:`FIXED_REASON`).
    ``"cyclic"`` and ``"balls_in_bins"`` are accounted by their own kinds (:mod:`gdpcore.kinds.samplers`) by the
    registry (tasks.manifest); an adapter called directly keeps Poisson numbers for them, labelled estimates
    (:data:`OWN_KIND_REASON`). The libraries' options map to samplers by :func:`opacus_sampler`
    (``poisson_sampling``) and :func:`keras_sampler` (``Model.fit(shuffle=...)``), which a manifest's ``opacus`` /
    ``tf_privacy`` form (and MLflow's ``dp.tf_privacy``) states (tasks.manifest); a shuffled run whose recorded
    rate is 1/T (T batches per epoch) also gets the proven lower bound of its shuffled mechanism beside the Poisson
    estimate (:func:`gdpcore.kinds.samplers.shuffled_counterpart`, Chua et al. 2024).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from dp_accounting import dp_event as ev
from scipy import stats

from gdpcore import kinds
from gdpcore._validation import bounded_repr
from gdpcore.engine.gap import DEFAULT_DELTAS
from gdpcore.events import from_dp_event
from gdpcore.kinds import UnsupportedMechanismError
from gdpcore.mechanisms import NEIGHBOURING_RELATIONS, Composed, Mechanism, SubsampledGaussian
from gdpcore.report import analyze

__all__ = [
    "FIXED_REASON",
    "SAMPLERS",
    "OWN_KIND_REASON",
    "SHUFFLE_REASON",
    "TrainingRun",
    "TrainingRunReport",
    "from_opacus_history",
    "from_opacus_state_dict",
    "composed",
    "dpsgd_mechanism",
    "fixed_batch_mechanism",
    "from_tf_privacy",
    "mechanism_caveat",
    "Bound",
    "GdpAuditAccounting",
    "OPACUS_ACCOUNTANT_NAME",
    "register_opacus_accountant",
    "keras_sampler",
    "opacus_sampler",
    "sampler_caveat",
    "tf_privacy_steps",
]

SAMPLERS: tuple[str, ...] = ("poisson", "shuffle", "fixed", "cyclic", "balls_in_bins")
"""Batch samplers a run can state. ``cyclic`` (the same fixed batch order every epoch) and ``balls_in_bins`` (each
example in one uniformly chosen step per epoch) are accounted by their own kinds (gdpcore.kinds.samplers:
cyclic_gaussian, balls_in_bins_gaussian), not as Poisson sampling, so they carry no caveat."""

SHUFFLE_REASON = (
    "the batches were shuffled, not Poisson-sampled, and Poisson accounting is not a proven bound for shuffled "
    "batches, so these numbers are an estimate of the run's privacy, not an upper bound"
)
FIXED_REASON = (
    "the batches had a fixed size (sampling without replacement) and were accounted as Poisson sampling under "
    "add/remove adjacency, which is not a proven bound for them, so these numbers are an estimate, not an upper bound"
)

OWN_KIND_REASON = (
    "the batches were drawn by a cyclic or balls-in-bins sampler and accounted as Poisson sampling, which is not a "
    "proven bound for them (their own kinds, cyclic_gaussian and balls_in_bins_gaussian, are), so these numbers are an "
    "estimate, not an upper bound"
)

_OPACUS_MECHANISMS = ("rdp", "prv", "gdp", "gdp-audit")  # the last: register_opacus_accountant's


def opacus_sampler(poisson_sampling: object) -> str:
    """The sampler of Opacus's ``make_private(poisson_sampling=...)``: True (its default: ``DPDataLoader``, Poisson
    sampling, what every Opacus accountant accounts) -> ``"poisson"``; False (the user's ``DataLoader``, reshuffled
    every epoch and cut into ``len(data_loader)`` fixed-size batches, still accounted as Poisson with
    ``sample_rate = 1 / len(data_loader)``) -> ``"shuffle"``: the Poisson numbers are estimates
    (:data:`SHUFFLE_REASON`), and the recorded 1/T gives the shuffled run's proven lower bound
    (:func:`gdpcore.kinds.samplers.shuffled_counterpart`, Chua et al. 2024)."""
    if not isinstance(poisson_sampling, bool):
        raise ValueError(f"poisson_sampling must be true or false, got {bounded_repr(poisson_sampling)}")
    return "poisson" if poisson_sampling else "shuffle"


def keras_sampler(shuffle: object) -> str:
    """The sampler of Keras ``Model.fit(shuffle=...)`` batches (TF-Privacy's DP Keras optimizers train through it,
    and so do the jax_privacy / Keras examples that cut a shuffled dataset into fixed batches):

    * ``True`` (Keras's default) reshuffles the examples every epoch and cuts fixed-size batches, and ``"batch"``
      shuffles batch-sized chunks (each example's step is still uniform over the epoch's T steps, independently per
      epoch): ``"shuffle"``. TF-Privacy's "assuming Poisson sampling" numbers are then estimates
      (:data:`SHUFFLE_REASON`); the shuffled run's proven lower bound needs q = batch_size / number_of_examples = 1/T,
      i.e. a batch size that divides the dataset (no short last batch).
    * ``False`` keeps one order every epoch: ``"cyclic"`` (each example in one batch per epoch, the last batch
      possibly short: ceil(N / batch_size) batches; exactly (sqrt(epochs)/sigma)-GDP whatever the batch sizes,
      :class:`gdpcore.kinds.samplers.CyclicGaussian`).

    A manifest's ``tf_privacy: {shuffle: ...}`` (and MLflow's ``dp.tf_privacy``) is read through this function
    (tasks.manifest).
    """
    if shuffle is True or shuffle == "batch":
        return "shuffle"
    if shuffle is False:
        return "cyclic"
    raise ValueError(f"shuffle must be true, false or 'batch' (Keras Model.fit), got {bounded_repr(shuffle)}")


def sampler_caveat(sampler: str, *, exact_fixed: bool = False) -> str | None:
    """The one-sentence reason a run's Poisson-accounted numbers are an estimate, or None when they are a bound."""
    _check_sampler(sampler)
    if sampler == "shuffle":
        return SHUFFLE_REASON
    if sampler == "fixed" and not exact_fixed:
        return FIXED_REASON
    if sampler in ("cyclic", "balls_in_bins"):  # tasks.manifest accounts them by their own kinds instead
        return OWN_KIND_REASON
    return None


def mechanism_caveat(mechanism: Mechanism, sampler: str | None) -> str | None:
    """The reason the numbers of a run described directly by ``mechanism`` (a gdpcore mechanism or a DpEvent) are an
    estimate under ``sampler``, or None: shuffled batches always; fixed-size batches when the mechanism accounts them
    as Poisson sampling (:func:`gdpcore.kinds.accounts_poisson_sampling`)."""
    if sampler == "shuffle":
        return SHUFFLE_REASON
    if sampler == "fixed" and kinds.accounts_poisson_sampling(mechanism):
        return FIXED_REASON
    if sampler in ("cyclic", "balls_in_bins") and kinds.accounts_poisson_sampling(mechanism):
        return OWN_KIND_REASON
    return None


def _check_sampler(sampler: object) -> str:
    if sampler not in SAMPLERS:
        raise ValueError(f"sampler must be one of {', '.join(SAMPLERS)}, got {sampler!r}")
    return str(sampler)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainingRun:
    """A training run as gdpcore accounts for it.

    ``mechanism`` is what is accounted; ``estimate_reason`` is None when its numbers are bounds for the run as it was
    trained, else the one sentence saying why they are only an estimate (then every number is labelled
    ``"estimate"``). ``steps`` counts the DP-SGD steps of all phases; ``source`` says where the parameters came from
    and how they were mapped.
    """

    mechanism: Mechanism
    sampler: str | None  # None: not stated (e.g. a DpEvent, which says what is accounted, not how batches were drawn)
    neighbouring: str
    steps: int | None  # None: not a step-based run
    source: str
    privacy_unit: str = "example"
    estimate_reason: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.mechanism, Mechanism):
            raise ValueError(f"mechanism must be a gdpcore mechanism, got {self.mechanism!r}")
        if self.sampler is not None:
            _check_sampler(self.sampler)
        if self.neighbouring != self.mechanism.neighbouring_relation:
            raise ValueError(
                f"neighbouring {self.neighbouring!r} differs from the mechanism's {self.mechanism.neighbouring_relation!r}"
            )

    @property
    def is_estimate(self) -> bool:
        return self.estimate_reason is not None

    def label(self, bound: str) -> str:
        """A number's label for this run: ``"estimate"`` when the sampler is not what was accounted, else ``bound``."""
        return "estimate" if self.is_estimate else bound

    def relabel(self, bound_types: Mapping[str, str]) -> dict[str, str]:
        return {k: self.label(v) for k, v in bound_types.items()}

    def analyze(self, **kwargs: Any) -> TrainingRunReport:
        """:func:`gdpcore.analyze` of :attr:`mechanism` (same keyword arguments), labelled for this run's sampler."""
        return TrainingRunReport(run=self, report=analyze(self.mechanism, **kwargs))


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainingRunReport:
    """A :class:`~gdpcore.PrivacyReport` of a :class:`TrainingRun`, with the run's labels.

    The numbers are the report's (read them there: ``.report.mu``, ``.report.epsilon(1e-5)``, ...);
    :attr:`bound_types` and :meth:`summary` say what they are *for this run*: ``"estimate"`` everywhere when the
    batches were not drawn the way they were accounted.
    """

    run: TrainingRun
    report: Any  # gdpcore.PrivacyReport

    @property
    def bound_types(self) -> dict[str, str]:
        return self.run.relabel(self.report.bound_types)

    @property
    def mu(self) -> float:
        return float(self.report.mu)

    def epsilon(self, delta: Any) -> Any:
        return self.report.epsilon(delta)

    def summary(self, **kwargs: Any) -> dict[str, Any]:
        """:meth:`PrivacyReport.summary` with every ``bound`` relabelled, plus the run's sampler, neighbouring
        relation, privacy unit, step count, source and (when its numbers are estimates) the reason."""
        out = _relabel_summary(self.report.summary(**kwargs), self.run)
        out["training_run"] = {
            "sampler": self.run.sampler,
            "neighbouring": self.run.neighbouring,
            "privacy_unit": self.run.privacy_unit,
            "steps": self.run.steps,
            "source": self.run.source,
            "numbers": "estimate" if self.run.is_estimate else "bounds as labelled",
            "estimate_reason": self.run.estimate_reason,
        }
        return out


def _relabel_summary(node: Any, run: TrainingRun) -> Any:
    if isinstance(node, dict):
        return {
            k: (run.label(v) if k == "bound" and isinstance(v, str) else _relabel_summary(v, run))
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_relabel_summary(v, run) for v in node]
    return node


# -- Opacus --------------------------------------------------------------------------------------------------------
def _number(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{where} must be a number, got {bounded_repr(value)}")
    try:
        x = float(value)
    except OverflowError:  # an int such as 10**1000
        x = math.inf
    if not math.isfinite(x):
        raise ValueError(f"{where} must be finite, got {bounded_repr(value)}")
    return x


def _history_phases(history: Any) -> list[tuple[float, float, int]]:
    if isinstance(history, str | bytes | Mapping) or not isinstance(history, Sequence):
        raise ValueError(
            f"history must be a list of (noise_multiplier, sample_rate, num_steps), got {bounded_repr(history)}"
        )
    if not history:
        raise ValueError("history is empty: the accountant recorded no step")
    phases = []
    for i, entry in enumerate(history):
        if isinstance(entry, str | bytes | Mapping) or not isinstance(entry, Sequence) or len(entry) != 3:
            raise ValueError(
                f"history[{i}] must be (noise_multiplier, sample_rate, num_steps), got {bounded_repr(entry)}"
            )
        sigma = _number(f"history[{i}][0] (noise_multiplier)", entry[0])
        q = _number(f"history[{i}][1] (sample_rate)", entry[1])
        steps = entry[2]
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(f"history[{i}][2] (num_steps) must be a positive integer, got {bounded_repr(steps)}")
        if steps > 10**9:  # tasks.registry.MAX_STEPS: the accountant's float arithmetic overflows far beyond it
            raise ValueError(f"history[{i}][2] (num_steps) must be at most 10**9, got {bounded_repr(steps)}")
        if sigma <= 0:
            raise ValueError(f"history[{i}][0] (noise_multiplier) must be > 0, got {bounded_repr(entry[0])}")
        if not 0 < q <= 1:
            raise ValueError(f"history[{i}][1] (sample_rate) must be in (0, 1], got {bounded_repr(entry[1])}")
        phases.append((sigma, q, int(steps)))
    return phases


def dpsgd_mechanism(phases: Sequence[tuple[float, float, int]]) -> Mechanism:
    """DP-SGD phases [(noise multiplier, sampling rate, steps), ...] as Poisson-subsampled Gaussians (sensitivity 1,
    add/remove): one phase as is, several composed."""
    return composed([SubsampledGaussian(noise_multiplier=s, sampling_rate=q, steps=t) for s, q, t in phases])


def composed(parts: Sequence[Mechanism]) -> Mechanism:
    """The sequential composition of ``parts``: the one part itself when there is one."""
    return parts[0] if len(parts) == 1 else Composed(mechanisms=tuple(parts))


def from_opacus_history(
    history: Any,
    *,
    poisson_sampling: bool = True,
    sampler: str | None = None,
    mechanism: str | None = None,
) -> TrainingRun:
    """An Opacus accountant's ``history`` as a :class:`TrainingRun`.

    Args:
        history: ``[(noise_multiplier, sample_rate, num_steps), ...]`` as ``accountant.history`` holds it.
        poisson_sampling: the ``make_private(poisson_sampling=...)`` flag of the run (Opacus's default True: batches
            from ``DPDataLoader``); False means shuffled fixed-size batches (sampler ``"shuffle"``).
        sampler: overrides the flag (``"poisson"``, ``"shuffle"`` or ``"fixed"``).
        mechanism: the accountant that recorded the history (``"rdp"``, ``"prv"``, ``"gdp"``), for the source text.
    """
    if not isinstance(poisson_sampling, bool):
        raise ValueError(f"poisson_sampling must be true or false, got {poisson_sampling!r}")
    sampler = _check_sampler(sampler if sampler is not None else opacus_sampler(poisson_sampling))
    if mechanism is not None and mechanism not in _OPACUS_MECHANISMS:
        raise ValueError(
            f"mechanism must be one of {', '.join(_OPACUS_MECHANISMS)} (Opacus accountants), got {bounded_repr(mechanism)}"
        )
    phases = _history_phases(history)
    acct = (
        "gdp-audit accountant"
        if mechanism == "gdp-audit"
        else (f"{mechanism.upper()}Accountant" if mechanism else "accountant")
    )
    source = f"Opacus {acct} history, {len(phases)} phase(s) of (noise_multiplier, sample_rate, steps)"
    return TrainingRun(
        mechanism=dpsgd_mechanism(phases),
        sampler=sampler,
        neighbouring="add_remove",
        steps=sum(t for _, _, t in phases),
        source=source,
        estimate_reason=sampler_caveat(sampler),
    )


def from_opacus_state_dict(
    state: Mapping[str, Any], *, poisson_sampling: bool = True, sampler: str | None = None
) -> TrainingRun:
    """An Opacus ``accountant.state_dict()`` (``{"history": [...], "mechanism": "rdp"}``) as a :class:`TrainingRun`.

    ``mechanism`` may also be given as a name of the accountant class (Opacus stores the ``mechanism`` classmethod
    itself; :mod:`tasks.training_runs` turns it into its name when reading a file)."""
    if not isinstance(state, Mapping):
        raise ValueError(f"an Opacus state_dict must be a mapping with 'history', got {type(state).__name__}")
    if "history" not in state:
        raise ValueError("an Opacus state_dict needs a 'history' key: [(noise_multiplier, sample_rate, steps), ...]")
    unknown = set(state) - {"history", "mechanism"}
    if unknown:
        raise ValueError(
            f"unknown key {bounded_repr(sorted(map(str, unknown))[0])} in an Opacus state_dict (expected history, mechanism)"
        )
    mech = state.get("mechanism")
    if mech is not None and mech not in _OPACUS_MECHANISMS:
        raise ValueError(f"mechanism must be one of {', '.join(_OPACUS_MECHANISMS)}, got {bounded_repr(mech)}")
    return from_opacus_history(state["history"], poisson_sampling=poisson_sampling, sampler=sampler, mechanism=mech)


# -- gdp-audit as the accountant of an Opacus training loop ----------------------------------------------------------
OPACUS_ACCOUNTANT_NAME = "gdp-audit"
"""The name Opacus knows gdp-audit's accountant by (``PrivacyEngine(accountant="gdp-audit")``, ``state_dict()``)."""

_REPORT_CACHE_SIZE = 4  # reports kept per accountant (the current history's, and a few a caller may alternate with)


class Bound(NamedTuple):
    """A number and what it is for this run: ``"upper"`` / ``"lower"`` (a certified bound), ``"exact"`` or
    ``"estimate"`` (:attr:`gdpcore.PrivacyReport.bound_types`, relabelled by :meth:`TrainingRun.relabel`)."""

    value: float
    bound: str


class GdpAuditAccounting:
    """The accounting of gdp-audit's Opacus accountant, free of torch: :func:`register_opacus_accountant` makes the
    Opacus class ``GdpAuditAccountant`` from it and ``opacus.accountants.IAccountant`` (which adds the optimizer hook
    ``get_optimizer_hook_fn`` and ``state_dict`` / ``load_state_dict``).

    Opacus's interface: the optimizer hook calls :meth:`step` once per DP-SGD step with the noise multiplier and the
    Poisson sampling rate; :attr:`history` merges consecutive equal steps into ``(noise_multiplier, sample_rate,
    num_steps)`` phases exactly as Opacus's RDP and PRV accountants do (``opacus/accountants/prv.py``), so a
    ``state_dict()`` of this accountant and of theirs hold the same history. The history is read by
    :func:`from_opacus_history` and accounted by :func:`gdpcore.analyze` (the one engine): every number equals the
    report of the same history, with its bound label.

    ``sampler`` is how the batches are drawn: ``"poisson"`` (Opacus's ``DPDataLoader``, the default of
    ``make_private``) makes every number a certified bound; ``"shuffle"`` (``poisson_sampling=False``) or ``"fixed"``
    keeps the Poisson-accounted numbers and labels them ``"estimate"`` (:data:`SHUFFLE_REASON`). Opacus creates the
    accountant without arguments: set ``engine.accountant.sampler`` when the loader is not Poisson.

    Reusing work: a report is computed once per history (the cache key is the history as a tuple, the sampler and
    the deltas whose epsilon brackets the engine refines), so ``get_epsilon``, :meth:`mu`, :meth:`tpr_at_fpr` and
    :meth:`advantage` asked at the same step share one analysis. Assigning ``accountant.history`` directly (as
    ``opacus.accountants.utils.get_noise_multiplier`` does) is seen through the key, never answered from a stale report.
    """

    def __init__(self, *, sampler: str = "poisson") -> None:
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
        """epsilon at ``delta`` spent so far: an upper bound (its label: :meth:`epsilon`); 0 before the first step.

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
        return OPACUS_ACCOUNTANT_NAME

    # -- certified numbers -------------------------------------------------------------------------------------------
    def report(self, delta: float | None = None) -> TrainingRunReport:
        """The labelled report of the history so far (:meth:`TrainingRun.analyze`), computed once per history;
        ``delta`` joins the deltas whose epsilon brackets the engine refines to its tolerance."""
        if delta is not None:
            _check_delta(delta)
            if delta not in self._deltas:
                self._deltas = tuple(sorted({*self._deltas, float(delta)}))
        if not self.history:
            raise ValueError("the accountant recorded no step yet: there is nothing to report")
        key = (tuple(tuple(p) for p in self.history), self.sampler, self._deltas)
        cached = self._cache.get(key)
        if cached is None:
            cached = from_opacus_history(self.history, sampler=self.sampler).analyze(deltas=self._deltas)
            if len(self._cache) >= _REPORT_CACHE_SIZE:
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
        """Tightest pessimistic mu-GDP (:attr:`gdpcore.PrivacyReport.mu`) with its label; ``(0, "exact")`` before the
        first step."""
        if not self.history:
            return Bound(0.0, "exact")
        rep = self.report()
        return Bound(rep.mu, rep.bound_types["mu"])

    def tpr_at_fpr(self, fpr: float) -> Bound:
        """Highest membership-inference TPR at false-positive rate ``fpr`` with its label; ``(fpr, "exact")`` before
        the first step (no step, no test beats guessing)."""
        if isinstance(fpr, bool) or not isinstance(fpr, int | float) or not 0 < fpr < 1:
            raise ValueError(f"fpr must be a number in (0, 1), got {bounded_repr(fpr)}")
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
    if isinstance(delta, bool) or not isinstance(delta, int | float) or not (0 < delta < 1):  # NaN fails too
        raise ValueError(f"delta must be a number in (0, 1), got {bounded_repr(delta)}")


_OPACUS_CLASS: list[type] = []  # the Opacus class, made once (its base class exists only when Opacus is imported)


def register_opacus_accountant(*, force: bool = False) -> type:
    """Register gdp-audit's accountant with Opacus under the name ``"gdp-audit"``
    (``opacus.accountants.register_accountant``), so that ``PrivacyEngine(accountant="gdp-audit")`` uses it; returns
    its class, ``GdpAuditAccountant`` (:class:`GdpAuditAccounting` on ``opacus.accountants.IAccountant``, also
    reachable as ``gdpcore.adapters.GdpAuditAccountant`` once made). Opacus (and torch) are imported here, never when
    gdpcore is imported. Registering again is a no-op; another class under the name is replaced only with
    ``force=True``.

    Raises ImportError naming the extra (``pip install 'gdp-audit[opacus]'``) when Opacus is not installed."""
    try:
        from opacus.accountants import create_accountant, register_accountant
        from opacus.accountants.accountant import IAccountant
    except ImportError as exc:
        raise ImportError("the Opacus accountant needs Opacus and torch: pip install 'gdp-audit[opacus]'") from exc
    if not _OPACUS_CLASS:
        cls = type(
            "GdpAuditAccountant",
            (GdpAuditAccounting, IAccountant),
            {"__module__": __name__, "__doc__": GdpAuditAccounting.__doc__},
        )
        globals()["GdpAuditAccountant"] = cls  # found by name (pickle, repr) like a class defined here
        _OPACUS_CLASS.append(cls)
    cls = _OPACUS_CLASS[0]
    try:
        register_accountant(OPACUS_ACCOUNTANT_NAME, cls, force=force)
    except ValueError:  # the name is taken: by this class (a repeated call) or by another one
        if type(create_accountant(OPACUS_ACCOUNTANT_NAME)) is not cls:
            raise ValueError(
                f"another accountant is registered with Opacus as {OPACUS_ACCOUNTANT_NAME!r}; force=True replaces it"
            ) from None
    return cls


# -- TF-Privacy ----------------------------------------------------------------------------------------------------
def tf_privacy_steps(*, number_of_examples: int, batch_size: int, num_epochs: float) -> tuple[float, int]:
    """(q, steps) exactly as TF-Privacy's ``_compute_dp_sgd_example_privacy`` computes them:
    ``q = batch_size / number_of_examples`` and ``steps = int(ceil(num_epochs / q))`` (same float operations)."""
    for name, v in (("number_of_examples", number_of_examples), ("batch_size", batch_size)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    epochs = _number("num_epochs", num_epochs)
    if epochs <= 0:
        raise ValueError(f"num_epochs must be > 0, got {num_epochs!r}")
    if batch_size > number_of_examples:
        raise ValueError(f"batch_size {batch_size} exceeds number_of_examples {number_of_examples}")
    q = batch_size / number_of_examples
    return q, int(math.ceil(epochs / q))


def from_tf_privacy(
    *,
    number_of_examples: int,
    batch_size: int,
    num_epochs: float,
    noise_multiplier: float,
    used_microbatching: bool = True,
    max_examples_per_user: int | None = None,
    sampler: str = "poisson",
    neighbouring: str = "add_remove",
) -> TrainingRun:
    """The parameters of TF-Privacy's ``compute_dp_sgd_privacy_statement`` as a :class:`TrainingRun` whose numbers
    match its "Epsilon assuming Poisson sampling" line (module docstring: q, step count, microbatching).

    Args:
        number_of_examples, batch_size, num_epochs, noise_multiplier, used_microbatching, max_examples_per_user: as
            TF-Privacy takes them (``used_microbatching`` defaults to True there too: microbatches of size > 1).
        sampler: how the batches were really drawn; TF-Privacy's own statement notes that Poisson sampling "is not
            usually done in training pipelines": say ``"shuffle"`` for a shuffled pipeline (numbers become estimates).
        neighbouring: ``"add_remove"`` (TF-Privacy's); ``"replace_one"`` only with ``sampler="fixed"``, where fixed-size
            batches are accounted exactly when a sampled-without-replacement kind is registered.
    """
    if not isinstance(used_microbatching, bool):
        raise ValueError(f"used_microbatching must be true or false, got {used_microbatching!r}")
    sigma = _number("noise_multiplier", noise_multiplier)
    if sigma <= 0:
        raise ValueError(f"noise_multiplier must be > 0, got {noise_multiplier!r}")
    q, steps = tf_privacy_steps(number_of_examples=number_of_examples, batch_size=batch_size, num_epochs=num_epochs)
    sampler = _check_sampler(sampler)
    if neighbouring not in NEIGHBOURING_RELATIONS:
        raise ValueError(f"neighbouring must be one of {', '.join(NEIGHBOURING_RELATIONS)}, got {neighbouring!r}")
    effective = sigma / 2 if used_microbatching else sigma
    micro = "microbatching halves the noise multiplier" if used_microbatching else "no microbatching"
    source = (
        f"TF-Privacy compute_dp_sgd_privacy_statement(number_of_examples={number_of_examples}, batch_size={batch_size},"
        f" num_epochs={num_epochs:g}, noise_multiplier={sigma:g}, used_microbatching={used_microbatching}"
        + ("" if max_examples_per_user is None else f", max_examples_per_user={max_examples_per_user}")
        + f"): q = {batch_size}/{number_of_examples}, steps = ceil(epochs / q) = {steps}, {micro}"
    )
    if max_examples_per_user is not None:
        k = max_examples_per_user
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"max_examples_per_user must be a positive integer, got {k!r}")
        if k > 1:
            if sampler != "poisson" or neighbouring != "add_remove":
                raise ValueError("max_examples_per_user > 1 is accounted for Poisson sampling under add_remove only")
            mech = _user_level_mechanism(effective, q, steps, k)
            return TrainingRun(
                mechanism=mech,
                sampler="poisson",
                neighbouring="add_remove",
                steps=steps,
                source=source + f"; user level: mixture of Gaussians, Binomial({k}, q) contributions per step",
                privacy_unit="user",
            )
    if neighbouring == "replace_one" and sampler != "fixed":
        raise ValueError(
            f"neighbouring 'replace_one' needs sampler 'fixed' (fixed-size batches); {sampler} sampling is accounted "
            "under add_remove"
        )
    if sampler == "fixed" and neighbouring == "replace_one":
        # Under replace-one a record's clipped contribution already moves by up to 2C with or without microbatches
        # (the doubling TF-Privacy applies is an add/remove effect), so the noise multiplier is not halved here.
        exact = _fixed_batch_mechanism(sigma, number_of_examples, batch_size, steps)
        if exact is not None:
            return TrainingRun(
                mechanism=exact,
                sampler="fixed",
                neighbouring="replace_one",
                steps=steps,
                source=source + "; fixed-size batches sampled without replacement, replace-one adjacency",
            )
    mech = dpsgd_mechanism([(effective, q, steps)])
    return TrainingRun(
        mechanism=mech,
        sampler=sampler,
        neighbouring="add_remove",
        steps=steps,
        source=source,
        estimate_reason=sampler_caveat(sampler),
    )


def _from_event(event: Any, neighbouring: str) -> Mechanism | None:
    """The registered kind describing a dp_accounting event, or None when no kind does (yet)."""
    try:
        return from_dp_event(event, neighboring_relation=neighbouring)
    except UnsupportedMechanismError:
        return None


def fixed_batch_mechanism(
    *, noise_multiplier: float, dataset_size: int, batch_size: int, steps: int
) -> Mechanism | None:
    """Fixed-size batches drawn uniformly without replacement, under replace-one adjacency: dp_accounting's
    ``SampledWithoutReplacementDpEvent`` composed ``steps`` times, as a gdpcore mechanism, or None when no registered
    kind describes it (the caller then labels the Poisson numbers as an estimate)."""
    return _fixed_batch_mechanism(noise_multiplier, dataset_size, batch_size, steps)


def _fixed_batch_mechanism(sigma: float, n: int, b: int, steps: int) -> Mechanism | None:
    event = ev.SelfComposedDpEvent(ev.SampledWithoutReplacementDpEvent(n, b, ev.GaussianDpEvent(sigma)), steps)
    return _from_event(event, "replace_one")


def _user_level_mechanism(sigma: float, q: float, steps: int, k: int) -> Mechanism:
    weights = [float(w) for w in stats.binom.pmf(range(k + 1), k, q)]
    event = ev.SelfComposedDpEvent(ev.MixtureOfGaussiansDpEvent(sigma, list(range(k + 1)), weights), steps)
    mech = _from_event(event, "add_remove")
    if mech is None:
        raise UnsupportedMechanismError(
            f"max_examples_per_user={k}: user-level accounting needs a registered mixture-of-Gaussians kind "
            "(dp_accounting MixtureOfGaussiansDpEvent); give max_examples_per_user=1 for the example-level statement"
        )
    return mech
