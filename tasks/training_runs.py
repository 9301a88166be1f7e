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

import importlib
import io
import json
import os
import pickle
import pickletools
import stat
import zipfile
import zlib
from collections import OrderedDict
from pathlib import Path
from typing import Any

from gdpcore._validation import MAX_REPR_CHARS, bounded_repr
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

MAX_NODES = 10**6
"""Most values an accountant state may hold, counting every reference to a shared value (a pickle's memo can make a
few hundred bytes refer to 2**30 list nodes); an Opacus history holds one (sigma, q, steps) entry per phase."""

MAX_DEPTH = 100
"""Deepest nesting of lists / dicts in an accountant state (it has three levels)."""

MAX_PICKLE_OPS = 2 * 10**6
"""Most pickle operations a data.pkl may hold (an accountant's has about 30; a full checkpoint's about 20 per
tensor): checked, with every length header, before anything is unpickled."""

_OPACUS_CLASSES = {
    ("opacus.accountants.rdp", "RDPAccountant"): "rdp",
    ("opacus.accountants.prv", "PRVAccountant"): "prv",
    ("opacus.accountants.gdp", "GaussianAccountant"): "gdp",
}


class TrainingRunFileError(ValueError):
    """A training-run file that cannot be read; the message names the file."""


class _Inert:
    """Base of every object the restricted readers hand to a pickle (accountant placeholders, the getattr, tensor
    markers): read-only, and a pickle's BUILD (``__setstate__``) on one is refused. They are made afresh for each
    file (:func:`_load_globals`), so nothing one pickle does can change how another file is read."""

    __slots__ = ()

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{self!r} is read-only")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{self!r} is read-only")

    def __setstate__(self, state: Any) -> None:
        raise pickle.UnpicklingError(
            f"refused to set the state of {self!r} (pickle BUILD): an accountant state_dict sets no object state"
        )


class _AccountantName(_Inert):
    """Inert stand-in for an Opacus accountant class found in a pickle (never instantiated)."""

    __slots__ = ("mechanism",)
    mechanism: str

    def __init__(self, mechanism: str):
        object.__setattr__(self, "mechanism", mechanism)

    def __repr__(self) -> str:
        return f"<Opacus {self.mechanism} accountant class>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise pickle.UnpicklingError("an Opacus accountant object (not its state_dict) cannot be read")


class _SafeGetattr(_Inert):
    """The only ``getattr`` a state_dict pickle needs: ``<Opacus accountant class>.mechanism``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<getattr>"

    def __call__(self, obj: Any, name: Any) -> Any:
        if isinstance(obj, _AccountantName) and name == "mechanism":
            return obj.mechanism
        raise pickle.UnpicklingError(
            f"refused getattr({bounded_repr(obj)}, {bounded_repr(name)}): only <Opacus accountant>.mechanism is read"
        )


class _Opaque(_Inert):
    """A tensor (or storage) of a checkpoint, skipped unread: only the accountant's plain values are read."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<tensor, not read>"


class _TensorRebuild(_Inert):
    """torch's tensor / storage names: every call gives the file's inert tensor marker."""

    __slots__ = ("marker",)
    marker: _Opaque

    def __init__(self, marker: _Opaque):
        object.__setattr__(self, "marker", marker)

    def __repr__(self) -> str:
        return "<torch tensor rebuild, not run>"

    def __call__(self, *args: Any, **kwargs: Any) -> _Opaque:
        return self.marker


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


def _load_globals() -> dict[tuple[str, str], Any]:
    """The globals one file's pickle may name, made for that file alone: fresh placeholders, getattr and tensor
    marker (read-only, BUILD refused), and ``OrderedDict`` (an immutable builtin type)."""
    safe_getattr = _SafeGetattr()
    return {
        ("collections", "OrderedDict"): OrderedDict,
        ("builtins", "getattr"): safe_getattr,
        ("__builtin__", "getattr"): safe_getattr,  # torch.save pickles with protocol 2 (Python 2 module names)
        **{key: _AccountantName(name) for key, name in _OPACUS_CLASSES.items()},
    }


class _RestrictedUnpickler(pickle.Unpickler):
    """Builtin containers and scalars only (plus the Opacus names above); every other global is refused."""

    def __init__(self, file: Any):
        super().__init__(file)
        self._globals = _load_globals()
        self._opaque = _Opaque()
        self._rebuild = _TensorRebuild(self._opaque)

    def find_class(self, module: str, name: str) -> Any:
        if _is_tensor_name(module, name):
            return self._rebuild
        try:
            return self._globals[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(
                f"refused to load {_clip(module)}.{_clip(name)}: an accountant state_dict "
                "holds only lists, tuples, numbers and strings"
            ) from None

    def persistent_load(self, pid: Any) -> Any:
        return self._opaque  # a tensor storage: never read


def _clip(text: str) -> str:
    """A name or message taken from the file (or a library's message about it), cut for an error line."""
    return text if len(text) <= MAX_REPR_CHARS else f"{text[:MAX_REPR_CHARS]}… ({len(text):,} chars)"


# Exceptions zipfile raises on a damaged or hostile archive besides BadZipFile: corrupt deflate (zlib.error), an
# encrypted member (RuntimeError), an unknown compression method (NotImplementedError), truncated data (EOFError).
_ZIP_ERRORS = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    zlib.error,
    RuntimeError,
    NotImplementedError,
    EOFError,
    OSError,
    ValueError,
    OverflowError,
)


def _check_opcodes(payload: bytes) -> None:
    """Every opcode of the pickle parsed (not run) first: a length header declaring more bytes than remain (BINBYTES8
    / BYTEARRAY8 of 2**60 bytes, which the unpickler would allocate before reading), an unknown opcode or a missing
    STOP is refused here, and so is a pickle of more than :data:`MAX_PICKLE_OPS` operations."""
    for n, _ in enumerate(pickletools.genops(payload)):
        if n >= MAX_PICKLE_OPS:
            raise ValueError(f"more than {MAX_PICKLE_OPS:,} operations (an accountant state_dict has a few dozen)")


def _read_pt_without_torch(path: Path, data: bytes) -> Any:
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except _ZIP_ERRORS:
        raise TrainingRunFileError(
            f"{path}: not a zip-format torch.save file (legacy torch files need torch installed)"
        ) from None
    with zf:
        pkls = [n for n in zf.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
        if len(pkls) != 1:
            raise TrainingRunFileError(f"{path}: not a torch.save file (expected one data.pkl, found {len(pkls)})")
        info = zf.getinfo(pkls[0])
        member = f"{path}: {_clip(pkls[0])}"
        if info.file_size > MAX_FILE_BYTES:
            raise TrainingRunFileError(f"{member} is {info.file_size:,} bytes (at most {MAX_FILE_BYTES:,})")
        if info.flag_bits & 0x1:
            raise TrainingRunFileError(f"{member} is encrypted (torch.save never encrypts)")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise TrainingRunFileError(
                f"{member} uses zip compression method {info.compress_type} (torch.save stores members uncompressed)"
            )
        try:
            payload = zf.read(pkls[0])
        except _ZIP_ERRORS as exc:
            raise TrainingRunFileError(f"{member} cannot be read from the zip: {_clip(str(exc))}") from None
    try:
        _check_opcodes(payload)
    except ValueError as exc:
        raise TrainingRunFileError(f"{path}: data.pkl is not a valid pickle: {_clip(str(exc))}") from None
    try:
        return _RestrictedUnpickler(io.BytesIO(payload)).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError) as exc:
        raise TrainingRunFileError(f"{path}: {_clip(str(exc) or type(exc).__name__)}") from None
    except (MemoryError, OverflowError):
        # the payload is at most MAX_FILE_BYTES and the memo shares references, so only a length header declaring
        # more than the file holds (BINBYTES8 / BYTEARRAY8 of 2**60 bytes) asks for this much memory
        raise TrainingRunFileError(
            f"{path}: data.pkl declares an object far larger than the file ({len(payload):,} bytes): corrupt or hostile"
        ) from None
    except RecursionError:
        raise TrainingRunFileError(f"{path}: data.pkl is nested too deeply to read") from None


def _read_pt_with_torch(path: Path, torch: Any) -> Any:
    from torch import serialization

    # torch's weights_only unpickler resolves allow-listed globals by name; the placeholders make Opacus's classes
    # (and the getattr on them) inert, exactly as the restricted reader does.
    allowed = _load_globals()  # this file's own placeholders and getattr
    safe: list[Any] = [(obj, f"{mod}.{cls}") for (mod, cls), obj in allowed.items() if mod.startswith("opacus.")]
    safe.append((allowed[("builtins", "getattr")], "builtins.getattr"))
    try:
        with serialization.safe_globals(safe):
            return torch.load(path, weights_only=True, map_location="cpu")
    except Exception as exc:  # torch raises UnpicklingError / RuntimeError with its own text
        raise TrainingRunFileError(
            f"{path}: torch.load(weights_only=True) failed: {_clip((str(exc) or type(exc).__name__).splitlines()[0])}"
        ) from None


CHECKPOINT_KEY = "privacy_accountant_state_dict"
"""Where Opacus's ``PrivacyEngine.save_checkpoint`` puts the accountant's state_dict in a full checkpoint."""


_SCALARS = (type(None), bool, int, float, str)


class _Refused(Exception):
    """A value refused by :func:`_normalise`; the keys leading to it are collected on the way out (only then)."""

    def __init__(self, problem: str, *, here: bool = False):
        super().__init__(problem)
        self.problem = problem
        self.here = here  # about the container being walked (its keys), not one of its values
        self.path: list[Any] = []  # innermost key first

    def where(self, outermost: int | None = None) -> str:
        keys = self.path[::-1][:outermost]
        text = "state" + "".join(f"[{k}]" if type(k) is int else f"[{bounded_repr(k)}]" for k in keys)
        return text + ("..." if outermost is not None and len(self.path) > outermost else "")


def _normalise(obj: Any) -> Any:
    """Plain dict / list / scalars (OrderedDicts and the history's tuples become JSON-like); anything else (a tensor
    inside the accountant's state) is an error naming where it is. Bounded: at most :data:`MAX_NODES` values (every
    reference to a shared value counted: a memo bomb is refused, not expanded), nested at most :data:`MAX_DEPTH`
    deep; a container holding itself is refused."""
    budget = [MAX_NODES]
    on_path: set[int] = set()

    def walk(obj: Any, depth: int) -> Any:
        if type(obj) in _SCALARS:
            return obj
        if not isinstance(obj, dict | list | tuple):
            what = "tensor" if isinstance(obj, _Opaque) or type(obj).__name__ == "Tensor" else type(obj).__name__
            raise _Refused(f"is a {what}, not a number or string")
        if depth >= MAX_DEPTH:
            raise _Refused(f"is nested more than {MAX_DEPTH} levels deep: refused")
        if id(obj) in on_path:
            raise _Refused("contains itself: refused")
        budget[0] -= len(obj) + 1
        if budget[0] < 0:
            raise _Refused(
                f"holds more than {MAX_NODES:,} values (every reference to a shared value counted): refused, an "
                "accountant state holds a few per training phase"
            )
        on_path.add(id(obj))
        key: Any = None
        try:
            if isinstance(obj, dict):
                out: dict[str, Any] = {}
                for key, v in obj.items():
                    if type(key) not in _SCALARS:
                        raise _Refused(f"has a key that is a {type(key).__name__}, not a string", here=True)
                    out[key if type(key) is str else _key_text(key)] = v if type(v) in _SCALARS else walk(v, depth + 1)
                return out
            items = []
            for key in range(len(obj)):  # key: named in an error about this item
                v = obj[key]
                items.append(v if type(v) in _SCALARS else walk(v, depth + 1))
            return items
        except _Refused as exc:
            if exc.here:
                exc.here = False
            else:
                exc.path.append(key)
            raise
        finally:
            on_path.discard(id(obj))

    try:
        return walk(obj, 0)
    except _Refused as exc:
        raise ValueError(f"{exc.where(outermost=6)} {exc.problem}") from None


def _key_text(key: Any) -> str:
    try:
        return str(key)
    except ValueError:  # an int key too long to print
        raise _Refused(f"has a key that is {bounded_repr(key)}", here=True) from None


def _accountant_part(obj: Any) -> Any:
    """A full Opacus checkpoint's accountant state (``privacy_accountant_state_dict``), or ``obj`` itself."""
    if isinstance(obj, dict) and CHECKPOINT_KEY in obj:
        return obj[CHECKPOINT_KEY]
    return obj


def _read_bounded(path: Path) -> bytes:
    """The bytes of the regular file ``path``, at most :data:`MAX_FILE_BYTES` (one more is read to tell): a device,
    FIFO or folder (``/dev/zero``, a pipe that never ends) is refused before any read, and a file growing while it
    is read cannot make the read unbounded."""
    try:
        with open(path, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise TrainingRunFileError(f"{path}: not a regular file")
            data = fh.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise TrainingRunFileError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise TrainingRunFileError(f"{path}: is a folder, not a file") from None
    # other OSErrors (permissions, a name too long) reach the command's one-line handler, which names the option
    if len(data) > MAX_FILE_BYTES:
        raise TrainingRunFileError(f"{path}: larger than {MAX_FILE_BYTES:,} bytes")
    return data


def read_opacus_state(path: str | Path, *, use_torch: bool | None = None) -> Any:
    """The state_dict (or history list) an Opacus accountant file holds, as plain Python values.

    ``use_torch``: None (default) reads every zip-format ``.pt`` file (all torch >= 1.6 writes) with the restricted
    reader, installed torch or not: one reader, with the same opcode pre-scan, node and depth limits and the same
    one-line errors everywhere; torch (``torch.load(weights_only=True)``) is used only for a legacy non-zip file
    when it is installed. False always uses the restricted reader; True requires torch."""
    path = Path(path)
    data = _read_bounded(path)
    if path.suffix.lower() == ".json":
        try:
            obj = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise TrainingRunFileError(f"{path}: not valid JSON ({_clip(str(exc))})") from None
        except RecursionError:
            raise TrainingRunFileError(
                f"{path}: JSON nested too deeply (an accountant state has three levels)"
            ) from None
        try:
            return _normalise(_accountant_part(obj))
        except ValueError as exc:
            raise TrainingRunFileError(f"{path}: {exc}") from None
    if path.suffix.lower() not in (".pt", ".pth"):
        raise TrainingRunFileError(f"{path}: expected a .json or .pt (torch.save) accountant file")
    torch: Any = None
    if use_torch or (use_torch is None and not zipfile.is_zipfile(io.BytesIO(data))):
        try:
            torch = importlib.import_module("torch")
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
        text = _read_bounded(path).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TrainingRunFileError(f"{path}: not UTF-8 text ({_clip(str(exc))})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TrainingRunFileError(f"{path}: not valid JSON ({_clip(str(exc))})") from None
    except RecursionError:
        raise TrainingRunFileError(f"{path}: JSON nested too deeply") from None
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
