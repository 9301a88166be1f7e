"""The model-manifest schema: one model version as a pydantic model, validated and resolved through gdpcore.adapters.

The file format and its conventions are described in :mod:`tasks.registry` (which loads folders of these files, each
file optionally in a child process with a deadline). This module validates one document (:func:`validate_manifest`,
:func:`load_manifest_file`); its errors are :class:`ManifestError` naming the file and the field.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)

from tasks.evidence_manifest import EvidenceSpec, resolve_scores_path
from tasks.safe_yaml import YamlError, bounded_message, load_yaml_file, shown, shown_key

__all__ = [
    "DEFAULT_REGISTRY",
    "MANIFEST_SCHEMA_VERSION",
    "STANDARD_DELTAS",
    "STANDARD_FPRS",
    "DeltaPolicy",
    "ManifestError",
    "ModelManifest",
    "is_valid_name",
    "load_manifest_file",
    "validate_manifest",
]

DEFAULT_REGISTRY = Path(__file__).resolve().parent.parent / "data" / "registry"
MANIFEST_SCHEMA_VERSION = 1
STANDARD_FPRS: tuple[float, ...] = (1e-6, 1e-4, 1e-3, 1e-2, 1e-1)
STANDARD_DELTAS: tuple[float, ...] = (1e-5, 1e-6, 1e-9)

NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
_NAME = re.compile(NAME_PATTERN)  # always used with fullmatch: '$' would also match before a trailing newline
MAX_STEPS = 10**9  # more DP-SGD steps than any training run; keeps every count inside int64 and the accountant
MAX_DATASET_SIZE = 10**15


def is_valid_name(value: object) -> bool:
    """A model / registry name usable as a path component and a hive partition value (full match, no newline)."""
    return isinstance(value, str) and _NAME.fullmatch(value) is not None


class ManifestError(ValueError):
    """An invalid manifest: the message names the file and the field."""

    def __init__(self, file: str | Path, field: str, message: str):
        file = str(file)
        self.file = file if len(file) <= 4096 else shown(file)  # PATH_MAX: a longer "path" is no file, just input
        self.field = field
        self.message = message = bounded_message(message)  # its values are bounded where formatted; this caps the rest
        super().__init__(f"{self.file}: {field}: {message}" if field else f"{self.file}: {message}")

    def __reduce__(self) -> tuple[Any, ...]:  # picklable: it travels back from the isolated loader's process
        return (ManifestError, (self.file, self.field, self.message))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# Strict scalars: YAML gives real numbers and booleans, so a quoted '7' or 'yes' is an author's mistake, not a value.
PosFloat = Annotated[float, Strict(), Field(gt=0, allow_inf_nan=False)]
Prob = Annotated[float, Strict(), Field(gt=0, le=1, allow_inf_nan=False)]
PosInt = Annotated[StrictInt, Field(gt=0, le=2**62)]
Steps = Annotated[StrictInt, Field(gt=0, le=MAX_STEPS)]


class DpSgd(_Strict):
    """One DP-SGD phase: sigma plus (batch_size and dataset size -> q) or sampling_rate; steps or epochs."""

    noise_multiplier: PosFloat
    batch_size: PosInt | None = None
    sampling_rate: Prob | None = None
    dataset_size: PosInt | None = None  # defaults to the model's dataset_size
    steps: Steps | None = None
    epochs: Annotated[float, Strict(), Field(gt=0, le=1e6, allow_inf_nan=False)] | None = None

    @model_validator(mode="after")
    def _one_of(self) -> DpSgd:
        if (self.batch_size is None) == (self.sampling_rate is None):
            raise ValueError("give exactly one of batch_size (q = batch_size / dataset_size) or sampling_rate")
        if (self.steps is None) == (self.epochs is None):
            raise ValueError("give exactly one of steps or epochs")
        return self

    def resolve(self, dataset_size: int | None) -> tuple[float, float, int]:
        """(noise_multiplier, q, steps); epochs become epochs * ceil(N / batch_size) steps (Opacus convention)."""
        n = self.dataset_size or dataset_size
        if self.sampling_rate is not None:
            q = float(self.sampling_rate)
            batches_per_epoch = math.ceil(1.0 / q)
        elif n is None:
            raise ValueError("batch_size needs dataset_size (q = batch_size / dataset_size)")
        else:
            batch = int(self.batch_size or 0)  # given: _one_of requires batch_size when sampling_rate is not
            if batch > n:
                raise ValueError(f"batch_size {shown(self.batch_size)} exceeds the dataset size {n}")
            q = batch / n
            batches_per_epoch = math.ceil(n / batch)
        # _one_of requires epochs when steps is not given
        steps = self.steps if self.steps is not None else round(float(self.epochs or 0.0) * batches_per_epoch)
        if not 1 <= steps <= MAX_STEPS:
            raise ValueError(f"epochs={shown(self.epochs)} gives {shown(steps)} steps, outside [1, {MAX_STEPS:,}]")
        return float(self.noise_multiplier), q, int(steps)


class TfPrivacy(_Strict):
    """TF-Privacy's ``compute_dp_sgd_privacy_statement`` parameters (:func:`gdpcore.adapters.from_tf_privacy`)."""

    number_of_examples: PosInt | None = None  # defaults to the model's dataset_size
    batch_size: PosInt
    epochs: Annotated[float, Strict(), Field(gt=0, le=1e6, allow_inf_nan=False)]
    noise_multiplier: PosFloat
    used_microbatching: StrictBool = True  # TF-Privacy's default: microbatches of size > 1 (noise multiplier halved)
    max_examples_per_user: PosInt | None = None
    # Keras Model.fit(shuffle=...), how the DP Keras optimizers' batches were drawn (gdpcore.adapters.keras_sampler):
    # true / "batch" -> shuffle, false -> cyclic; None: not stated.
    shuffle: StrictBool | Literal["batch"] | None = None

    @field_validator("shuffle", mode="before")
    @classmethod
    def _keras_shuffle(cls, v: Any) -> Any:
        if v is None or v is True or v is False or (isinstance(v, str) and v == "batch"):
            return v
        raise ValueError(f"Keras Model.fit shuffle must be true, false or 'batch', got {shown(v)}")


class OpacusFile(_Strict):
    """An Opacus accountant file (:func:`tasks.training_runs.load_opacus_file`), relative to the manifest."""

    file: StrictStr  # relative to the manifest's folder, and inside it
    poisson_sampling: StrictBool | None = None  # make_private(poisson_sampling=...); False = shuffled batches


FORMS: tuple[str, ...] = ("dpsgd", "phases", "opacus_history", "opacus", "tf_privacy", "dp_event", "gdpcore")
DPSGD_FORMS: tuple[str, ...] = ("dpsgd", "phases", "opacus_history", "opacus", "tf_privacy")


class MechanismSpec(_Strict):
    dpsgd: DpSgd | None = None
    phases: list[DpSgd] | None = Field(default=None, min_length=1)
    opacus_history: list[tuple[PosFloat, Prob, Steps]] | None = Field(default=None, min_length=1)
    opacus: OpacusFile | None = None
    tf_privacy: TfPrivacy | None = None
    dp_event: dict[str, Any] | None = None
    gdpcore: dict[str, Any] | None = None

    @field_validator("opacus_history", mode="before")
    @classmethod
    def _state_dict(cls, v: Any) -> Any:
        if isinstance(v, dict):  # an Opacus accountant state_dict: {"history": [...], "mechanism": "rdp"}
            if "history" not in v:
                raise ValueError(
                    "an accountant state_dict needs a 'history' key: [(noise_multiplier, sample_rate, steps), ...]"
                )
            return v["history"]
        return v

    @model_validator(mode="after")
    def _exactly_one(self) -> MechanismSpec:
        given = [k for k in FORMS if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of {', '.join(FORMS)}; got {given or 'none'}")
        return self

    @property
    def form(self) -> str:
        return next(k for k in FORMS if getattr(self, k) is not None)


class Claimed(_Strict):
    epsilon: PosFloat
    delta: Prob
    accountant: StrictStr = "unspecified"


class Accounting(_Strict):
    # None (default): the engine refines the step until the certified brackets are within its tolerance
    # (gdpcore.analyze). A fixed step must lie in [1e-6, 0.1]: below 1e-6 the PLD grid needs more memory than any
    # machine has (1e-300: 10^300 bins).
    discretization: Annotated[float, Strict(), Field(ge=1e-6, le=0.1, allow_inf_nan=False)] | None = None
    alpha_min: Annotated[float, Strict(), Field(gt=0, lt=0.5)] = 1e-10


class MlflowRef(_Strict):
    registered_model: StrictStr | None = None
    version: StrictStr | None = None


class DeltaPolicy(_Strict):
    """delta = ``fixed``, or 1 / N^``inverse_power`` (N the dataset size)."""

    fixed: Prob | None = None
    inverse_power: PosFloat | None = None

    @model_validator(mode="after")
    def _one(self) -> DeltaPolicy:
        if (self.fixed is None) == (self.inverse_power is None):
            raise ValueError("give exactly one of fixed or inverse_power")
        return self

    def value(self, n: int | None) -> float:
        if self.fixed is not None:
            return float(self.fixed)
        if n is None:
            raise ValueError(f"the delta policy {self.describe()} needs dataset_size (N)")
        return float(n) ** (-float(self.inverse_power or 0.0))  # given: _one requires it when fixed is not

    def describe(self) -> str:
        return f"fixed {self.fixed:g}" if self.fixed is not None else f"1/N^{self.inverse_power:g}"


_POWER = re.compile(r"^\s*1\s*/\s*N\s*\^\s*([0-9.]+)\s*$")


SAMPLER_KINDS = {"cyclic": "cyclic_gaussian", "balls_in_bins": "balls_in_bins_gaussian"}
"""The samplers accounted by their own kind (gdpcore.kinds.samplers) instead of as Poisson sampling."""


def batches_per_epoch(sampling_rate: float) -> int:
    """T, the batches of one epoch at rate q = batch_size / N: 1/q when it is an integer (to 1e-9, as Opacus records
    ``1 / len(data_loader)``), else ceil(1/q) = ceil(N / batch_size) (a short last batch)."""
    whole = round(1.0 / sampling_rate)
    if whole >= 1 and abs(whole * sampling_rate - 1.0) <= 1e-9:
        return int(whole)
    return math.ceil(1.0 / sampling_rate)


def _sampler_kind(sampler: str, noise_multiplier: float, per_epoch: int, epochs: int, sensitivity: float) -> Any:
    from gdpcore.mechanisms import mechanism_from_dict

    return mechanism_from_dict(
        {
            "kind": SAMPLER_KINDS[sampler],
            "noise_multiplier": noise_multiplier,
            "steps_per_epoch": per_epoch,
            "epochs": epochs,
            "sensitivity": sensitivity,
        }
    )


def sampler_mechanism(mechanism: Any, sampler: str) -> Any:
    """``mechanism`` (a Poisson-accounted DP-SGD description, phases allowed) as the ``sampler``'s kind: each
    Poisson-subsampled Gaussian with whole epochs becomes ``epochs = steps / T`` epochs of T batches; a mechanism
    already of that kind is kept. T = 1/q (what Opacus records: ``sample_rate = 1 / len(data_loader)``); ``cyclic``
    also accepts a short last batch, T = ceil(1/q) = ceil(N / batch_size) (:func:`batches_per_epoch`): each example is
    still in exactly one batch per epoch, so every epoch is one Gaussian of sensitivity 1 per example and the guarantee
    (sqrt(epochs)/sigma)-GDP does not depend on the batch sizes (gdpcore.kinds.samplers, CyclicGaussian).
    ``balls_in_bins`` needs q = 1/T exactly. ValueError (naming the sampler and the phase) otherwise."""
    from gdpcore.mechanisms import Composed, SelfComposed, SubsampledGaussian

    kind = SAMPLER_KINDS[sampler]
    if mechanism.kind == kind:
        return mechanism
    if isinstance(mechanism, SelfComposed):
        return SelfComposed(mechanism=sampler_mechanism(mechanism.mechanism, sampler), count=mechanism.count)
    if isinstance(mechanism, Composed):
        return Composed(mechanisms=tuple(sampler_mechanism(m, sampler) for m in mechanism.mechanisms))
    if not isinstance(mechanism, SubsampledGaussian):
        raise ValueError(
            f"sampler {sampler}: a {mechanism.kind} mechanism is not DP-SGD batches; describe it as {kind}"
        )
    q = mechanism.sampling_rate
    per_epoch = batches_per_epoch(q)
    exact = abs(per_epoch * q - 1.0) <= 1e-9
    if (sampler != "cyclic" and not exact) or mechanism.steps % per_epoch:
        needs = "q = 1/T (T batches per epoch)" + (
            " or a short last batch (T = ceil(1/q))" if sampler == "cyclic" else ""
        )
        raise ValueError(
            f"sampler {sampler} needs {needs} and whole epochs; got q = {shown(q)} and {shown(mechanism.steps)} steps"
        )
    return _sampler_kind(
        sampler, mechanism.noise_multiplier, per_epoch, mechanism.steps // per_epoch, mechanism.sensitivity
    )


def tf_privacy_sampler_mechanism(
    mechanism: Any, sampler: str, *, dataset_size: int, batch_size: int, epochs: float
) -> Any:
    """A ``tf_privacy`` run drawn by ``sampler`` (cyclic / balls_in_bins) as its kind: ``epochs`` (whole) epochs of
    T = ceil(N / batch_size) batches, the effective noise multiplier of TF-Privacy's conventions (``mechanism``,
    :func:`gdpcore.adapters.from_tf_privacy`). TF-Privacy's own step count ceil(epochs / q) is not used: with a short
    last batch it is not epochs x T. ``balls_in_bins`` needs a batch size dividing N (q = 1/T)."""
    if not float(epochs).is_integer():
        raise ValueError(f"sampler {sampler} needs whole epochs; got epochs = {shown(epochs)}")
    per_epoch = -(-dataset_size // batch_size)
    if sampler != "cyclic" and dataset_size % batch_size:
        raise ValueError(
            f"sampler {sampler} needs q = 1/T: batch_size {shown(batch_size)} does not divide {shown(dataset_size)}"
        )
    return _sampler_kind(sampler, mechanism.noise_multiplier, per_epoch, int(epochs), mechanism.sensitivity)


class ModelManifest(_Strict):
    name: StrictStr
    version: Annotated[StrictInt, Field(gt=0, le=2**31)]
    description: StrictStr = ""
    privacy_unit: StrictStr = "example"
    neighbouring: Literal["add_remove", "replace_one"] = "add_remove"
    sampler: Literal["poisson", "shuffle", "fixed", "cyclic", "balls_in_bins"] | None = (
        None  # None: poisson for the DP-SGD forms, else unstated
    )
    # N: needed only where a number depends on it (a 1/N^c delta policy, a batch size, TF-Privacy's default
    # number_of_examples, fixed-size batches); a fixed delta with sampling rates needs none.
    dataset_size: Annotated[StrictInt, Field(gt=0, le=MAX_DATASET_SIZE)] | None = None
    delta: DeltaPolicy
    production: StrictBool = False
    source: StrictStr = ""
    claimed: Claimed | None = None
    mechanism: MechanismSpec
    accounting: Accounting = Accounting()
    mlflow: MlflowRef = MlflowRef()
    # Best of K runs (hyper-parameter tuning): {distribution: fixed | geometric | logarithmic |
    # truncated_negative_binomial | poisson, count | mean | gamma | shape}, checked by
    # gdpcore.tuning.RepetitionDistribution.from_dict in _validate (errors name tuning.<field>).
    tuning: dict[StrictStr, Any] | None = None
    # Canary attack scores (tasks.evidence): audited by their own content-addressed key, so not part of spec_hash.
    evidence: EvidenceSpec | None = None
    # Set by the loader, not by the YAML author:
    manifest_path: str = ""

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not is_valid_name(v):
            raise ValueError(
                f"must be 1-128 of letters, digits, '.', '_', '-' (not starting with one of '._-'), got {shown(v)}"
            )
        return v

    @field_validator("delta", mode="before")
    @classmethod
    def _delta(cls, v: Any) -> Any:
        if isinstance(v, bool):
            raise ValueError(f"must be a number, '1/N^c' or a mapping, got {shown(v)}")
        if isinstance(v, int | float):
            return {"fixed": v}
        if isinstance(v, str):
            m = _POWER.match(v)
            if not m:
                raise ValueError(f"a string delta must look like '1/N^1.1', got {shown(v)}")
            return {"inverse_power": float(m.group(1))}
        return v

    @model_validator(mode="after")
    def _coherent(self) -> ModelManifest:
        d = self.delta_value
        if not 0 < d < 1:
            raise ValueError(f"delta: the policy {self.delta.describe()} gives delta={d!r}, outside (0, 1)")
        return self

    # -- derived ---------------------------------------------------------------------------------------------------
    @property
    def key(self) -> str:
        return f"{self.name}:{self.version}"

    def _n(self, what: str) -> int:
        """``dataset_size``, which ``what`` needs (ValueError naming both when it is not given)."""
        if self.dataset_size is None:
            raise ValueError(f"{what} needs dataset_size (N)")
        return self.dataset_size

    @property
    def delta_value(self) -> float:
        return self.delta.value(self.dataset_size)

    @property
    def sampler_value(self) -> str | None:
        """How the batches were drawn: the declared ``sampler``, else ``poisson`` for the DP-SGD forms (None for a
        gdpcore / dp_event mechanism that does not say)."""
        library = self._library_sampler()
        if self.sampler is not None:
            return self.sampler
        if library is not None:
            return library
        return "poisson" if self.mechanism.form in DPSGD_FORMS else None

    def _library_sampler(self) -> str | None:
        """The sampler a library option of the mechanism's form states (Opacus ``poisson_sampling``:
        :func:`gdpcore.adapters.opacus_sampler`; Keras ``shuffle`` of a ``tf_privacy`` form:
        :func:`gdpcore.adapters.keras_sampler`), or None. ValueError naming both fields when it contradicts an explicit
        ``sampler`` (Opacus's False only says the batches did not come from its Poisson loader: any other sampler fits).
        """
        from gdpcore import adapters

        opacus, tf = self.mechanism.opacus, self.mechanism.tf_privacy
        option: bool | str
        if opacus is not None and opacus.poisson_sampling is not None:
            field, option = "poisson_sampling", opacus.poisson_sampling
            library = adapters.opacus_sampler(option)
            agrees = self.sampler is None or (self.sampler == "poisson") == option
        elif tf is not None and tf.shuffle is not None:
            field, option = "shuffle", tf.shuffle
            library = adapters.keras_sampler(option)
            agrees = self.sampler is None or self.sampler == library
        else:
            return None
        if not agrees:
            shown_option = str(option).lower() if isinstance(option, bool) else shown(option)
            raise ValueError(
                f"{field}: {shown_option} means sampler {library}, which contradicts sampler: {self.sampler}"
            )
        return library

    @property
    def estimate_reason(self) -> str | None:
        """Why this model's numbers are only an estimate (one sentence), or None when they are bounds as labelled."""
        return self._resolved["estimate_reason"]

    @property
    def source_detail(self) -> str:
        """How the mechanism was derived from the manifest's form (adapter conventions, file read)."""
        return self._resolved["detail"]

    def mechanism_dict(self) -> dict[str, Any]:
        """The gdpcore mechanism this manifest describes (validated by :func:`gdpcore.mechanism_from_dict`)."""
        return dict(self._resolved["mechanism"])

    @functools.cached_property
    def _resolved_poisson(self) -> dict[str, Any]:
        """{mechanism (gdpcore dict), estimate_reason, detail}: each form through its adapter (gdpcore.adapters).
        Raises ValueError naming the problem; :func:`_validate` turns it into a ManifestError at ``mechanism.<form>``."""
        from gdpcore import adapters, mechanism_from_dict

        m, form, sampler = self.mechanism, self.mechanism.form, self.sampler_value
        if form in ("gdpcore", "dp_event"):
            if form == "gdpcore":
                mech = dict(m.gdpcore or {})
                detail = "gdpcore mechanism"
            else:
                from gdpcore.events import from_dp_event
                from tasks.training_runs import dp_event_from_data

                event = dp_event_from_data(m.dp_event, where="dp_event")
                mech = from_dp_event(event, neighboring_relation=self.neighbouring).to_dict()
                detail = f"dp_accounting {type(event).__name__} read under {self.neighbouring}"
            reason = None
            if sampler is not None:
                try:
                    reason = adapters.mechanism_caveat(mechanism_from_dict(mech), sampler)
                except ValueError:  # an invalid description is reported where it is built (build_mechanism)
                    reason = adapters.SHUFFLE_REASON if sampler == "shuffle" else None
            return {"mechanism": mech, "estimate_reason": reason, "detail": detail}
        fixed_exact = sampler == "fixed" and self.neighbouring == "replace_one"
        if self.neighbouring != "add_remove" and not fixed_exact:
            raise ValueError(
                f"neighbouring {self.neighbouring!r}: DP-SGD with {sampler} sampling is accounted under add_remove "
                "(replace_one needs sampler: fixed)"
            )
        # Exactly one form is given (MechanismSpec._exactly_one): each branch tests its own field.
        if (tf := m.tf_privacy) is not None:
            run = adapters.from_tf_privacy(
                number_of_examples=tf.number_of_examples or self._n("TF-Privacy's number_of_examples"),
                batch_size=tf.batch_size,
                num_epochs=tf.epochs,
                noise_multiplier=tf.noise_multiplier,
                used_microbatching=tf.used_microbatching,
                max_examples_per_user=tf.max_examples_per_user,
                sampler=sampler or "poisson",
                neighbouring=self.neighbouring,
            )
            if run.privacy_unit == "user" and self.privacy_unit != "user":
                raise ValueError(
                    f"max_examples_per_user > 1 is a user-level guarantee: declare privacy_unit: user, not {self.privacy_unit!r}"
                )
            if fixed_exact and run.neighbouring != "replace_one":
                raise ValueError(_NO_FIXED_KIND)
            return {"mechanism": run.mechanism.to_dict(), "estimate_reason": run.estimate_reason, "detail": run.source}
        if (op := m.opacus) is not None:
            from tasks.training_runs import load_opacus_file

            if fixed_exact:
                raise ValueError(
                    "replace_one: an Opacus history records sample rates, not batch sizes; declare add_remove"
                )
            base = (Path(self.manifest_path).parent if self.manifest_path else Path.cwd()).resolve()
            target = (base / op.file).resolve()
            if not target.is_relative_to(base):  # a registry names its own files: no reading outside its folder
                raise ValueError(f"file {shown(op.file)} resolves outside the manifest's folder {base}")
            run = load_opacus_file(target, sampler=sampler)
            return {"mechanism": run.mechanism.to_dict(), "estimate_reason": run.estimate_reason, "detail": run.source}
        specs: list[DpSgd | None]
        if (history := m.opacus_history) is not None:
            if fixed_exact:
                raise ValueError(
                    "replace_one: an Opacus history records sample rates, not batch sizes; declare add_remove"
                )
            specs = [None] * len(history)
            phases = [(float(s), float(q), int(t)) for s, q, t in history]
        else:
            given = [m.dpsgd] if m.dpsgd is not None else list(m.phases or [])
            specs = list(given)
            phases = [p.resolve(self.dataset_size) for p in given]
        if fixed_exact:
            parts = []
            for i, (spec, (s, _, t)) in enumerate(zip(specs, phases, strict=True)):
                if spec is None or spec.batch_size is None:
                    raise ValueError(f"sampler fixed under replace_one needs batch_size (phase {i})")
                exact = adapters.fixed_batch_mechanism(
                    noise_multiplier=s,
                    dataset_size=spec.dataset_size or self._n("fixed-size batches"),
                    batch_size=spec.batch_size,
                    steps=t,
                )
                if exact is None:
                    raise ValueError(_NO_FIXED_KIND)
                parts.append(exact)
            mech = adapters.composed(parts).to_dict()
            return {"mechanism": mech, "estimate_reason": None, "detail": "fixed-size batches without replacement"}
        mech = adapters.dpsgd_mechanism(phases).to_dict()
        detail = "Opacus accountant history" if form == "opacus_history" else "DP-SGD, q = batch_size / dataset_size"
        return {"mechanism": mech, "estimate_reason": adapters.sampler_caveat(sampler or "poisson"), "detail": detail}

    @functools.cached_property
    def _resolved(self) -> dict[str, Any]:
        """:meth:`_resolved_poisson`, with a ``cyclic`` / ``balls_in_bins`` run accounted by its own kind."""
        resolved = self._resolved_poisson
        sampler = self.sampler_value
        if sampler not in SAMPLER_KINDS:
            return resolved
        from gdpcore import mechanism_from_dict

        poisson = mechanism_from_dict(resolved["mechanism"])
        if (tf := self.mechanism.tf_privacy) is not None:
            n = tf.number_of_examples or self._n("TF-Privacy's number_of_examples")
            mech = tf_privacy_sampler_mechanism(
                poisson, sampler, dataset_size=n, batch_size=tf.batch_size, epochs=tf.epochs
            )
        else:
            mech = sampler_mechanism(poisson, sampler)
        kind = SAMPLER_KINDS[sampler]
        return {
            "mechanism": mech.to_dict(),
            "estimate_reason": None,
            "detail": f"{resolved['detail']}; sampler {sampler}: accounted as {kind} "
            "(T = ceil(N / batch_size) = ceil(1/q) batches per epoch)",
        }

    def build_mechanism(self) -> Any:
        from gdpcore import mechanism_from_dict

        return mechanism_from_dict(self.mechanism_dict())

    def spec_hash(self) -> str:
        """Hash of everything the audit's numbers and card depend on (not of the YAML layout or comments)."""
        payload = self.model_dump(mode="json", exclude={"manifest_path", "mlflow", "evidence"})
        if payload.get("tuning") is None:  # a manifest without tuning keeps the hash it had before the field existed
            payload.pop("tuning", None)
        tf = payload["mechanism"].get("tf_privacy")
        if isinstance(tf, dict) and tf.get("shuffle") is None:  # likewise without Keras's shuffle option
            tf.pop("shuffle", None)
        payload["_resolved_mechanism"] = self.mechanism_dict()
        payload["_schema"] = MANIFEST_SCHEMA_VERSION
        payload["_fprs"] = list(STANDARD_FPRS)
        payload["_deltas"] = list(STANDARD_DELTAS)
        text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:24]

    def mlflow_target(self) -> tuple[str, str]:
        return (self.mlflow.registered_model or self.name, self.mlflow.version or str(self.version))


def _loc(loc: tuple[Any, ...], prefix: str) -> str:
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + shown_key(part)
    return out


_NO_FIXED_KIND = (
    "sampler fixed under replace_one is accounted as dp_accounting's SampledWithoutReplacementDpEvent, and no "
    "registered gdpcore kind describes it in this build; declare neighbouring: add_remove to get Poisson estimates"
)

MAX_MECHANISMS = 10_000
"""Most mechanisms in one ``gdpcore`` composition (each is accounted for separately; real schedules: < 100)."""


def _count_mechanisms(d: Any, depth: int = 0) -> int:
    """Mechanisms in a gdpcore dict, counted without building them (shared sub-lists count once per use)."""
    if depth > 64 or not isinstance(d, dict):
        return 1
    inner = d.get("mechanisms")
    if isinstance(inner, list):
        total = 0
        for m in inner:
            total += _count_mechanisms(m, depth + 1)
            if total > MAX_MECHANISMS:
                break
        return max(total, 1)
    if isinstance(d.get("mechanism"), dict):
        return _count_mechanisms(d["mechanism"], depth + 1)
    return 1


def _validate(data: Any, file: Path, prefix: str) -> ModelManifest:
    if not isinstance(data, dict):
        raise ManifestError(file, prefix, f"a model version must be a mapping, got {type(data).__name__}")
    try:
        manifest = ModelManifest.model_validate({**data, "manifest_path": str(file)})
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-after")))
        msg = err["msg"].removeprefix("Value error, ")
        more = f" (and {exc.error_count() - 1} more error(s))" if exc.error_count() > 1 else ""
        raise ManifestError(file, _loc(loc, prefix), msg + more) from None
    where = _loc(("mechanism", manifest.mechanism.form), prefix)
    try:
        manifest.mechanism_dict()  # each form through its adapter (file read, DpEvent parsed, conventions applied)
    except ValueError as exc:  # includes TrainingRunFileError and UnsupportedMechanismError, both naming the problem
        field = _loc(("neighbouring",), prefix) if str(exc).startswith("neighbouring") else where
        raise ManifestError(file, field, str(exc)) from None
    if manifest.tuning is not None:
        from gdpcore.tuning import RepetitionDistribution

        try:
            RepetitionDistribution.from_dict(manifest.tuning, path="tuning")
        except ValueError as exc:  # names tuning.<field>
            raise ManifestError(file, _loc(("tuning",), prefix), str(exc)) from None
    if manifest.evidence is not None:  # the scores file must lie inside the manifest's folder
        try:
            resolve_scores_path(manifest)
        except ValueError as exc:
            raise ManifestError(file, _loc(("evidence", "scores"), prefix), str(exc)) from None
    if manifest.mechanism.form == "gdpcore":
        n = _count_mechanisms(manifest.mechanism.gdpcore)
        if n > MAX_MECHANISMS:
            raise ManifestError(file, where, f"{n:,} mechanisms in one composition (at most {MAX_MECHANISMS:,})")
    try:
        mech = manifest.build_mechanism()
    except ValueError as exc:  # gdpcore names the path inside the mechanism dict
        raise ManifestError(file, where, str(exc)) from None
    except (ArithmeticError, TypeError, MemoryError) as exc:  # e.g. a count too large for the accountant
        raise ManifestError(file, where, f"{type(exc).__name__}: {exc}") from None
    if mech.neighbouring_relation != manifest.neighbouring:
        raise ManifestError(
            file,
            _loc(("neighbouring",), prefix),
            f"the mechanism is stated for {mech.neighbouring_relation!r} but the model declares "
            f"{manifest.neighbouring!r}",
        )
    return manifest


def validate_manifest(data: Any, *, file: str | Path = "<manifest>", prefix: str = "") -> ModelManifest:
    """One model version from a mapping (e.g. built from another registry, such as MLflow's), validated exactly like a
    YAML manifest: :class:`ManifestError` names ``file`` and the field. ``file`` also anchors an ``opacus: {file:}``
    path (relative paths resolve against its folder)."""
    return _validate(data, Path(file), prefix)


def load_manifest_file(path: str | Path) -> list[ModelManifest]:
    """All model versions in one YAML file; raises :class:`ManifestError` naming file and field."""
    path = Path(path)
    try:
        data = load_yaml_file(path)
    except YamlError as exc:  # unreadable, too large, not UTF-8, malformed, alias bomb, duplicate key
        raise ManifestError(path, "", f"not valid YAML ({exc.detail})") from None
    try:
        return _validate_document(data, path)
    except RecursionError:  # e.g. thousands of nested self_composed mechanisms
        raise ManifestError(path, "mechanism", "nested too deeply") from None


def _validate_document(data: object, path: Path) -> list[ModelManifest]:
    if isinstance(data, dict) and "models" in data:
        extra = set(data) - {"models"}
        if extra:
            raise ManifestError(path, shown_key(sorted(extra, key=str)[0]), "unknown top-level key next to 'models'")
        items = data["models"]
        if not isinstance(items, list) or not items:
            raise ManifestError(path, "models", "must be a non-empty list of model versions")
        return [_validate(item, path, f"models[{i}]") for i, item in enumerate(items)]
    return [_validate(data, path, "")]
