"""Model registries: folders of YAML manifests saying which DP-trained model versions exist and how each was trained.

A registry is a folder of YAML files (or one YAML file). A file holds one model version (a mapping) or several
(``models: [...]``). Each model version declares::

    name: cifar10-wrn40-4            # model name (registry key together with version)
    version: 6
    privacy_unit: example            # what one "record" is
    neighbouring: add_remove         # add_remove | replace_one (gdpcore vocabulary)
    dataset_size: 50000
    delta: 1.0e-5                    # or "1/N^1.1", or {fixed: 1e-5}, or {inverse_power: 1.1}
    production: true                 # optional: the version currently in production
    claimed: {epsilon: 8, delta: 1.0e-5, accountant: RDP}   # optional: what the authors published
    sampler: poisson                 # optional: poisson | shuffle | fixed | cyclic | balls_in_bins (default poisson for DP-SGD)
    mechanism:                       # exactly one of:
      dpsgd: {noise_multiplier: 9.4, batch_size: 16384, steps: 2000}           # q = batch_size / dataset_size
      # phases: [{noise_multiplier: 1.0, sampling_rate: 0.01, steps: 500}, ...]  # heterogeneous schedule
      # opacus_history: [[1.1, 0.01, 1000], [0.9, 0.01, 500]]  # or {history: [...]} (an accountant state_dict)
      # opacus: {file: runs/accountant.pt}     # accountant.state_dict() saved with torch.save, or JSON; relative
      #                                        # to this manifest; poisson_sampling: false = shuffled batches
      # tf_privacy: {batch_size: 256, epochs: 60, noise_multiplier: 1.1, used_microbatching: false}
      #             # TF-Privacy's statement parameters (number_of_examples defaults to dataset_size,
      #             # max_examples_per_user optional): q = B / N, steps = ceil(epochs / q), as TF-Privacy counts;
      #             # shuffle: true | "batch" | false = Keras Model.fit's option (shuffle / cyclic batches)
      # dp_event: {type: SelfComposedDpEvent, count: 1000, event: {...}}   # a dp_accounting DpEvent (JSON form)
      # gdpcore: {kind: composed, mechanisms: [...]}                         # any gdpcore mechanism dict
    accounting: {discretization: 1.0e-4, alpha_min: 1.0e-10}                 # optional (default: refined step)
    mlflow: {registered_model: cifar10-wrn40-4, version: "6"}                # optional (defaults: name, version)
    evidence: {scores: evidence/v6.npz, confidence: 0.95, synthetic: false}  # optional: canary attack scores
                                                                             # (tasks.evidence_manifest, tasks.evidence)

YAML is read with :func:`tasks.safe_yaml.load_yaml_file` only (size, depth and alias-expansion limits, duplicate
keys rejected, YAML 1.2 scalars) and validated by :mod:`tasks.manifest` (the schema); scalar types are strict (``'7'`` is not a version, ``'yes'`` not a boolean). Errors are :class:`ManifestError` and name the file and the field, e.g.
``registry/bad.yaml: models[1].mechanism.dpsgd.steps: Input should be greater than 0``.

Every DP-SGD form (dpsgd, phases, opacus_history, opacus, tf_privacy) is analysed as Poisson subsampling at rate q
under add/remove adjacency (gdpcore's :class:`~gdpcore.SubsampledGaussian`; the mapping of each form is
:mod:`gdpcore.adapters`'s). ``sampler`` says how the batches were really drawn (:data:`gdpcore.adapters.SAMPLERS`):

* ``poisson`` (default for the DP-SGD forms): what is accounted; the numbers are bounds as labelled.
* ``shuffle``: a shuffled pass in fixed-size batches. The Poisson-accounted numbers are kept but every one of them is
  labelled ``estimate`` (lake row, card, HF and MLflow fields), with the reason in one sentence
  (``estimate_reason``); the audit summary lists the model.
* ``fixed``: fixed-size batches drawn without replacement. Under ``neighbouring: replace_one`` (with batch sizes
  given: dpsgd / phases with ``batch_size``, tf_privacy) this is accounted exactly as dp_accounting's
  ``SampledWithoutReplacementDpEvent`` when a kind for it is registered (else the manifest is refused, naming what is
  missing); under ``add_remove`` the Poisson numbers are labelled ``estimate``.
* ``cyclic`` / ``balls_in_bins``: accounted by their own kinds (``cyclic_gaussian``, exact, T = ceil(N / batch_size)
  batches per epoch, a short last batch allowed; ``balls_in_bins_gaussian``, q = 1/T) in whole epochs.

A library option in the form states the sampler too (Opacus ``poisson_sampling``, Keras ``shuffle`` of a tf_privacy
form: :func:`gdpcore.adapters.opacus_sampler`, :func:`gdpcore.adapters.keras_sampler`); one contradicting ``sampler``
is refused, naming both.

For ``gdpcore`` and ``dp_event`` mechanisms ``sampler`` is optional: given as shuffle / fixed, the numbers are labelled
``estimate`` the same way. ``neighbouring`` uses gdpcore's vocabulary (``add_remove`` / ``replace_one``) and must be the
relation of the mechanism (a dp_event is read under it).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tasks.manifest import (  # noqa: F401 - tasks/mlflow_registry.py imports them from here
    _POWER,
    DEFAULT_REGISTRY,
    MANIFEST_SCHEMA_VERSION,
    STANDARD_DELTAS,
    STANDARD_FPRS,
    DeltaPolicy,
    ManifestError,
    ModelManifest,
    _validate,
    is_valid_name,
    load_manifest_file,
    validate_manifest,
)

__all__ = [
    "DEFAULT_REGISTRY",
    "MANIFEST_DEADLINE",
    "MANIFEST_SCHEMA_VERSION",
    "STANDARD_DELTAS",
    "STANDARD_FPRS",
    "DeltaPolicy",
    "ManifestError",
    "ModelManifest",
    "is_valid_name",
    "iter_registry",
    "iter_registry_isolated",
    "load_manifest_file",
    "load_registry",
    "registry_files",
    "validate_manifest",
]


def registry_files(registry: str | Path) -> list[Path]:
    root = Path(registry)
    try:
        if root.is_file():
            return [root]
        if not root.is_dir():
            raise ManifestError(root, "", "registry is neither a YAML file nor a folder")
        return sorted(p for p in root.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())
    except OSError as exc:  # a name too long, a loop of links, a folder that cannot be listed
        raise ManifestError(root, "", f"the registry cannot be read: {exc.strerror or type(exc).__name__}") from None


def iter_registry(registry: str | Path) -> Iterator[tuple[Path, list[ModelManifest] | ManifestError]]:
    """(file, manifests-or-error) per file: a bad file does not stop the others."""
    for path in registry_files(registry):
        try:
            yield path, load_manifest_file(path)
        except ManifestError as exc:
            yield path, exc
        except Exception as exc:
            yield path, ManifestError(path, "", f"cannot be loaded: {type(exc).__name__}: {str(exc)[:300]}")


def _isolated_worker(loader: str, conn: Any) -> None:
    """Child side of :func:`iter_registry_isolated`: load each path sent, send back (manifests | ManifestError)."""
    import importlib

    module, name = loader.split(":")
    load = getattr(importlib.import_module(module), name)
    while True:
        path = conn.recv()
        if path is None:
            return
        try:
            result: Any = load(path)
        except ManifestError as exc:
            result = exc
        except Exception as exc:
            result = ManifestError(path, "", f"cannot be loaded: {type(exc).__name__}: {str(exc)[:300]}")
        conn.send(result)


def iter_registry_isolated(
    registry: str | Path, deadline: float, *, loader: str = "tasks.registry:load_manifest_file"
) -> Iterator[tuple[Path, list[ModelManifest] | ManifestError]]:
    """Like :func:`iter_registry`, each file loaded in a child process with ``deadline`` seconds: a file that takes
    longer (or kills its loader) fails alone - the child is killed and a fresh one loads the remaining files."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    files = registry_files(registry)
    worker: tuple[Any, Any] | None = None  # (child process, our end of the pipe) while a child runs

    def start() -> tuple[Any, Any]:
        conn, theirs = ctx.Pipe()
        child = ctx.Process(target=_isolated_worker, args=(loader, theirs), daemon=True)
        child.start()
        theirs.close()
        return child, conn

    def stop(kill: bool) -> None:
        nonlocal worker
        if worker is None:
            return
        child, conn = worker
        if kill:
            child.kill()
        else:
            try:
                conn.send(None)
            except OSError:
                child.kill()
        child.join(timeout=10)
        if child.is_alive():
            child.kill()
            child.join()
        conn.close()
        worker = None

    try:
        for path in files:
            if worker is None:
                worker = start()
            child, conn = worker
            conn.send(path)
            if conn.poll(deadline):
                try:
                    yield path, conn.recv()
                    continue
                except (EOFError, OSError):
                    child.join(timeout=5)
                    why = f"its loader died (exit code {child.exitcode})"
            else:
                why = f"loading took longer than {deadline:g} s"
            stop(kill=True)
            yield path, ManifestError(path, "", f"refused: {why}")
    finally:
        stop(kill=False)


def _deadline_from_env(name: str, default: float) -> float:
    text = os.environ.get(name)
    if text is None or not text.strip():
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        from tasks.safe_yaml import shown

        raise ValueError(f"{name} must be a positive number of seconds, got {shown(text)}")
    return value


MANIFEST_DEADLINE = _deadline_from_env("GDP_MANIFEST_DEADLINE", 30.0)
"""Seconds one manifest file may take to load and validate when loaded in isolation (``gdp audit``)."""


def load_registry(
    registry: str | Path, *, deadline: float | None = None
) -> tuple[list[ModelManifest], list[ManifestError]]:
    """Valid manifests and the errors of invalid files; duplicate (name, version) pairs are errors too.

    With ``deadline`` (seconds), each file is loaded in a child process and fails alone if it takes longer."""
    good: list[ModelManifest] = []
    errors: list[ManifestError] = []
    seen: dict[str, str] = {}
    results = iter_registry(registry) if deadline is None else iter_registry_isolated(registry, deadline)
    for path, result in results:
        if isinstance(result, ManifestError):
            errors.append(result)
            continue
        for m in result:
            if m.key in seen:
                errors.append(ManifestError(path, "name/version", f"{m.key} is already declared in {seen[m.key]}"))
                continue
            seen[m.key] = str(path)
            good.append(m)
    return good, errors
