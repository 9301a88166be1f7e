"""Read training-run files: an Opacus accountant saved as JSON or with ``torch.save``; a DpEvent as JSON.

* **JSON** (no torch needed): an accountant ``state_dict()`` (``{"history": [[sigma, q, steps], ...], "mechanism":
  "rdp"}``) or a bare ``history`` list, e.g. written with ``json.dump(accountant.state_dict(), f, default=...)`` or
  ``json.dump(accountant.history, f)``.
* **``.pt``** written by ``torch.save(accountant.state_dict(), path)``, or a whole checkpoint written by Opacus's
  ``PrivacyEngine.save_checkpoint`` (the accountant is its ``privacy_accountant_state_dict``; model and optimizer
  tensors are skipped unread): with torch installed it is read by
  ``torch.load(path, weights_only=True)`` with Opacus's accountant classes allow-listed as *names only* (see below);
  without torch the file is read here: a torch file is a zip holding ``<name>/data.pkl``, which is unpickled by
  :class:`_RestrictedUnpickler`. It builds builtin containers and scalars (dict, list, tuple, str, int, float, bool,
  None, ``collections.OrderedDict``) and nothing else: any other global in the pickle is refused with an error naming
  it. Tensors of a checkpoint (torch's ``_rebuild_tensor_v2`` and storage names, persistent ids) become inert markers
  whose data is never read; a marker inside the accountant's own state is an error.

Opacus's ``state_dict()`` stores ``"mechanism": self.__class__.mechanism`` - the classmethod itself, which pickles as
``getattr(opacus.accountants.rdp.RDPAccountant, "mechanism")``. Both readers resolve exactly these three names
(``RDPAccountant``, ``PRVAccountant``, ``GaussianAccountant`` in their Opacus modules) to inert placeholders and that
``getattr`` to the accountant's name (``"rdp"``, ``"prv"``, ``"gdp"``); Opacus itself is never imported.

Errors are :class:`TrainingRunFileError` (a ``ValueError``) naming the file and what is wrong.
"""

from __future__ import annotations

import io
import json
import pickle
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

from gdpcore.adapters import TrainingRun, from_opacus_history, from_opacus_state_dict

__all__ = [
    "CHECKPOINT_KEY",
    "MAX_FILE_BYTES",
    "TrainingRunFileError",
    "load_dp_event_file",
    "load_opacus_file",
    "read_opacus_state",
]

MAX_FILE_BYTES = 64 * 2**20
"""Largest accountant / event file read (an accountant history is a few hundred bytes per phase)."""

_OPACUS_CLASSES = {
    ("opacus.accountants.rdp", "RDPAccountant"): "rdp",
    ("opacus.accountants.prv", "PRVAccountant"): "prv",
    ("opacus.accountants.gdp", "GaussianAccountant"): "gdp",
}


class TrainingRunFileError(ValueError):
    """A training-run file that cannot be read; the message names the file."""


class _AccountantName:
    """Inert stand-in for an Opacus accountant class found in a pickle (never instantiated)."""

    def __init__(self, mechanism: str):
        self.mechanism = mechanism

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise pickle.UnpicklingError("an Opacus accountant object (not its state_dict) cannot be read")


_PLACEHOLDERS = {key: _AccountantName(name) for key, name in _OPACUS_CLASSES.items()}


def _safe_getattr(obj: Any, name: str) -> Any:
    """The only ``getattr`` a state_dict pickle needs: ``<Opacus accountant class>.mechanism``."""
    if isinstance(obj, _AccountantName) and name == "mechanism":
        return obj.mechanism
    raise pickle.UnpicklingError(f"refused getattr({obj!r}, {name!r}): only <Opacus accountant>.mechanism is read")


class _Opaque:
    """A tensor (or storage) of a checkpoint, skipped unread: only the accountant's plain values are read."""

    def __repr__(self) -> str:
        return "<tensor, not read>"


_OPAQUE = _Opaque()


def _opaque(*args: Any, **kwargs: Any) -> _Opaque:
    return _OPAQUE


# Names torch.save writes for tensors in a full checkpoint (PrivacyEngine.save_checkpoint: model and optimizer state
# next to "privacy_accountant_state_dict"); they become inert markers and their storages are never read.
_TENSOR_NAMES = {
    ("torch._utils", "_rebuild_tensor_v2"),
    ("torch._utils", "_rebuild_tensor"),
    ("torch._utils", "_rebuild_parameter"),
    ("torch.storage", "UntypedStorage"),
    ("torch.storage", "TypedStorage"),
}


def _is_tensor_name(module: str, name: str) -> bool:
    return (module, name) in _TENSOR_NAMES or (module == "torch" and name.endswith("Storage") and name.isidentifier())


_ALLOWED: dict[tuple[str, str], Any] = {
    ("collections", "OrderedDict"): OrderedDict,
    ("builtins", "getattr"): _safe_getattr,
    ("__builtin__", "getattr"): _safe_getattr,  # torch.save pickles with protocol 2 (Python 2 module names)
    **_PLACEHOLDERS,
}


class _RestrictedUnpickler(pickle.Unpickler):
    """Builtin containers and scalars only (plus the Opacus names above); every other global is refused."""

    def find_class(self, module: str, name: str) -> Any:
        if _is_tensor_name(module, name):
            return _opaque
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(
                f"refused to load {module}.{name}: an accountant state_dict holds only lists, tuples, numbers and "
                "strings"
            ) from None

    def persistent_load(self, pid: Any) -> Any:
        return _OPAQUE  # a tensor storage: never read


def _read_pt_without_torch(path: Path, data: bytes) -> Any:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            pkls = [n for n in zf.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
            if len(pkls) != 1:
                raise TrainingRunFileError(f"{path}: not a torch.save file (expected one data.pkl, found {len(pkls)})")
            info = zf.getinfo(pkls[0])
            if info.file_size > MAX_FILE_BYTES:
                raise TrainingRunFileError(f"{path}: data.pkl is {info.file_size:,} bytes (at most {MAX_FILE_BYTES:,})")
            payload = zf.read(pkls[0])
    except zipfile.BadZipFile:
        raise TrainingRunFileError(
            f"{path}: not a zip-format torch.save file (legacy torch files need torch installed)"
        ) from None
    try:
        return _RestrictedUnpickler(io.BytesIO(payload)).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError) as exc:
        raise TrainingRunFileError(f"{path}: {exc}") from None


def _read_pt_with_torch(path: Path, torch: Any) -> Any:
    from torch import serialization

    # torch's weights_only unpickler resolves allow-listed globals by name; the placeholders make Opacus's classes
    # (and the getattr on them) inert, exactly as the restricted reader does.
    safe = [(ph, f"{mod}.{cls}") for (mod, cls), ph in _PLACEHOLDERS.items()] + [(_safe_getattr, "builtins.getattr")]
    try:
        with serialization.safe_globals(safe):
            return torch.load(path, weights_only=True, map_location="cpu")
    except Exception as exc:  # torch raises UnpicklingError / RuntimeError with its own text
        raise TrainingRunFileError(
            f"{path}: torch.load(weights_only=True) failed: {str(exc).splitlines()[0]}"
        ) from None


CHECKPOINT_KEY = "privacy_accountant_state_dict"
"""Where Opacus's ``PrivacyEngine.save_checkpoint`` puts the accountant's state_dict in a full checkpoint."""


def _normalise(obj: Any, where: str = "state") -> Any:
    """Plain dict / list / scalars (OrderedDicts and the history's tuples become JSON-like); anything else (a tensor
    inside the accountant's state) is an error naming where it is."""
    if isinstance(obj, dict):
        return {str(k): _normalise(v, f"{where}[{k!r}]") for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_normalise(v, f"{where}[{i}]") for i, v in enumerate(obj)]
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    what = "tensor" if isinstance(obj, _Opaque) or type(obj).__name__ == "Tensor" else type(obj).__name__
    raise ValueError(f"{where} is a {what}, not a number or string")


def _accountant_part(obj: Any) -> Any:
    """A full Opacus checkpoint's accountant state (``privacy_accountant_state_dict``), or ``obj`` itself."""
    if isinstance(obj, dict) and CHECKPOINT_KEY in obj:
        return obj[CHECKPOINT_KEY]
    return obj


def read_opacus_state(path: str | Path, *, use_torch: bool | None = None) -> Any:
    """The state_dict (or history list) an Opacus accountant file holds, as plain Python values.

    ``use_torch``: None (default) uses torch for ``.pt`` files when it is installed; False always uses the
    restricted reader; True requires torch."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise TrainingRunFileError(f"{path}: no such file") from None
    if size > MAX_FILE_BYTES:
        raise TrainingRunFileError(f"{path}: {size:,} bytes (at most {MAX_FILE_BYTES:,})")
    data = path.read_bytes()
    if path.suffix.lower() == ".json":
        try:
            return _accountant_part(json.loads(data.decode("utf-8")))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise TrainingRunFileError(f"{path}: not valid JSON ({exc})") from None
    if path.suffix.lower() not in (".pt", ".pth"):
        raise TrainingRunFileError(f"{path}: expected a .json or .pt (torch.save) accountant file")
    torch: Any = None
    if use_torch is not False:
        try:
            import torch  # type: ignore[no-redef]  # optional extra, imported only for .pt files (None when absent)
        except ImportError:
            if use_torch:
                raise TrainingRunFileError(
                    f"{path}: torch is not installed (pip install 'gdp-audit[opacus]')"
                ) from None
    obj = _read_pt_with_torch(path, torch) if torch is not None else _read_pt_without_torch(path, data)
    try:
        return _normalise(_accountant_part(obj))
    except ValueError as exc:
        raise TrainingRunFileError(f"{path}: {exc}") from None


def load_opacus_file(
    path: str | Path, *, poisson_sampling: bool = True, sampler: str | None = None, use_torch: bool | None = None
) -> TrainingRun:
    """An Opacus accountant file (state_dict or history; JSON or ``.pt``) as a :class:`~gdpcore.adapters.TrainingRun`."""
    state = read_opacus_state(path, use_torch=use_torch)
    try:
        if isinstance(state, dict):
            return from_opacus_state_dict(state, poisson_sampling=poisson_sampling, sampler=sampler)
        return from_opacus_history(state, poisson_sampling=poisson_sampling, sampler=sampler)
    except ValueError as exc:
        raise TrainingRunFileError(f"{path}: {exc}") from None


def load_dp_event_file(path: str | Path) -> Any:
    """A dp_accounting DpEvent from a JSON file (the form :mod:`gdpcore.events` reads)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TrainingRunFileError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TrainingRunFileError(f"{path}: cannot be read ({exc})") from None
    if len(text) > MAX_FILE_BYTES:
        raise TrainingRunFileError(f"{path}: larger than {MAX_FILE_BYTES:,} bytes")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TrainingRunFileError(f"{path}: not valid JSON ({exc})") from None
    return dp_event_from_data(data, where=str(path))


def dp_event_from_data(data: Any, *, where: str) -> Any:
    """A DpEvent from its JSON dict via :func:`gdpcore.events.dp_event_from_dict`."""
    try:
        from gdpcore import events
    except ImportError:
        raise TrainingRunFileError(f"{where}: reading DpEvents needs gdpcore.events (not in this build)") from None
    try:
        return events.dp_event_from_dict(data)
    except (ValueError, TypeError, KeyError) as exc:
        raise TrainingRunFileError(f"{where}: {exc}") from None
