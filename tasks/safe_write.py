"""Atomic, no-follow writes: the one way gdp-audit writes a file or a folder (cards, plots, lake Parquet files,
snapshots, reports, exports).

A card or report folder may be shared, and someone may plant a symbolic link in it (``card.md -> ~/.bashrc``): a
plain ``open(path, "w")`` follows it and overwrites the target. Here every write

* walks from the output ``root`` to the target's folder one component at a time with ``O_NOFOLLOW`` (a component
  inside ``root`` that is a symbolic link is refused, naming it; ``root`` itself is the caller's choice and may be
  one), creating missing folders on the way, and keeps that folder open;
* refuses a target that is a symbolic link;
* writes a fresh hidden temporary in that folder (``O_CREAT | O_EXCL | O_NOFOLLOW``, named as
  :func:`tasks.safe_write.tmp_path` names it, so a crashed writer's leftover is found by the lake's clean-up), fsyncs it,
  renames it over the target inside the folder it walked (``os.replace`` with ``dir_fd``: a rename replaces a name,
  never what a link points at) and fsyncs the folder.

:func:`atomic_write` / :func:`atomic_write_text` hand the writer an open file; :func:`atomic_output` is for writers
that create their output by name (DuckDB databases, ``EXPORT DATABASE`` folders, snapshot folders): it yields the
temporary's path and checks, before the rename, that the temporary is no link and its folder is still the one
walked. A refusal is an :class:`UnsafePathError` (a ``ValueError``: one line, exit 2 in the CLI), and nothing is
left behind.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import stat
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

__all__ = ["UnsafePathError", "atomic_output", "atomic_write", "atomic_write_text"]

_DIR = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class UnsafePathError(ValueError):
    """A write refused because the target, or a folder between the output root and it, is a symbolic link."""


def _open_folder(folder: Path, root: Path) -> int:
    """A descriptor of ``folder``, opened from ``root`` one component at a time without following links (missing
    folders are created); UnsafePathError naming the first component that is a link, or ``folder`` outside ``root``."""
    folder, root = Path(os.path.abspath(folder)), Path(os.path.abspath(root))
    if not folder.is_relative_to(root):
        raise UnsafePathError(f"refusing to write in {folder}: it is outside the output folder {root}")
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root, _DIR)
    here = root
    try:
        for part in folder.relative_to(root).parts:
            here = here / part
            try:
                nfd = os.open(part, _DIR | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, dir_fd=fd)
                nfd = os.open(part, _DIR | os.O_NOFOLLOW, dir_fd=fd)
            except OSError:  # ELOOP (a link) or ENOTDIR (a file, or a link to one)
                if stat.S_ISLNK(os.lstat(part, dir_fd=fd).st_mode):
                    raise UnsafePathError(f"refusing to write under {here}: it is a symbolic link") from None
                raise
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def _refuse_link(path: Path, name: str, dir_fd: int, *, file: bool = False) -> None:
    """Refuse a symbolic link, a device, a FIFO or a socket at ``name`` (replacing ``/dev/zero`` with a report is
    never what a user meant); with ``file``, also a folder (anything that is not a regular file)."""
    try:
        mode = os.lstat(name, dir_fd=dir_fd).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISLNK(mode):
        raise UnsafePathError(f"refusing to write {path}: it is a symbolic link (it would redirect the write)")
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        raise UnsafePathError(f"refusing to replace {path}: it is a device, FIFO or socket, not a file")
    if file and not stat.S_ISREG(mode):
        raise UnsafePathError(
            f"refusing to replace {path}: it is not a regular file (a device, FIFO, socket or folder)"
        )


HOST_TAG = re.sub(r"[^A-Za-z0-9]", "", socket.gethostname())[:32] or "host"
"""This host's name as it appears in temporaries' names (letters and digits, at most 32)."""


def tmp_path(path: Path) -> Path:
    """The hidden temporary a writer of ``path`` uses: ``.<name>.tmp-<host>-<pid>-<random>`` in the same folder.

    Host and pid let a clean-up (:func:`tasks.lake.remove_stale_temporaries`) tell a crashed writer's leftovers from a
    live writer's work in progress."""
    return path.with_name(f".{path.name}.tmp-{HOST_TAG}-{os.getpid()}-{uuid.uuid4().hex[:12]}")


def _temporary_name(path: Path) -> str:
    return tmp_path(path).name


def _remove(name: str, dir_fd: int) -> None:
    """Remove the temporary ``name`` (a file or a folder tree) of the folder ``dir_fd``, if it is still there."""
    try:
        st = os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        sub = os.open(name, _DIR | os.O_NOFOLLOW, dir_fd=dir_fd)
        try:
            for entry in os.listdir(sub):
                _remove(entry, sub)
        finally:
            os.close(sub)
        os.rmdir(name, dir_fd=dir_fd)
    else:
        os.unlink(name, dir_fd=dir_fd)


def atomic_write(path: str | Path, write: Callable[[BinaryIO], object], *, root: str | Path | None = None) -> Path:
    """Write ``path`` atomically without following links: ``write(f)`` fills a fresh temporary opened beside it,
    which then replaces ``path``. ``root`` (default: ``path``'s folder) is the output folder the caller chose: no
    component between it and ``path`` may be a symbolic link. Returns ``path``."""
    path = Path(path)
    fd = _open_folder(path.parent, Path(root) if root is not None else path.parent)
    try:
        _refuse_link(path, path.name, fd, file=True)
        tmp = _temporary_name(path)
        try:
            with os.fdopen(os.open(tmp, _NEW_FILE, 0o666, dir_fd=fd), "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
            _refuse_link(path, path.name, fd, file=True)
            os.replace(tmp, path.name, src_dir_fd=fd, dst_dir_fd=fd)
            os.fsync(fd)
        except BaseException:
            _remove(tmp, fd)
            raise
    finally:
        os.close(fd)
    return path


def atomic_write_text(path: str | Path, text: str, *, root: str | Path | None = None) -> Path:
    """:func:`atomic_write` of ``text`` in UTF-8 (newlines as given)."""
    data = text.encode("utf-8")
    return atomic_write(path, lambda f: f.write(data), root=root)


def _fsync_tree(name: str, dir_fd: int) -> None:
    """fsync the file or folder tree ``name`` of the folder ``dir_fd`` (links are not followed)."""
    st = os.lstat(name, dir_fd=dir_fd)
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(f"refusing to publish {name}: the writer left a symbolic link")
    fd = os.open(name, (_DIR if stat.S_ISDIR(st.st_mode) else os.O_RDONLY) | os.O_NOFOLLOW, dir_fd=dir_fd)
    try:
        if stat.S_ISDIR(st.st_mode):
            for entry in os.listdir(fd):
                _fsync_tree(entry, fd)
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_output(path: str | Path, *, root: str | Path | None = None) -> Iterator[Path]:
    """For a writer that creates its output by name (a DuckDB database, an ``EXPORT DATABASE`` or snapshot folder):
    yield a fresh temporary path beside ``path`` (nothing exists there yet); once the block has created it, it is
    fsynced and renamed over ``path`` as in :func:`atomic_write`. The temporary is refused if it is a link or its
    folder is no longer the one walked; on any error it is removed. Side files the writer made next to it (a
    ``.wal``) are the writer's to remove."""
    path = Path(path)
    fd = _open_folder(path.parent, Path(root) if root is not None else path.parent)
    try:
        _refuse_link(path, path.name, fd)
        tmp = _temporary_name(path)
        try:
            yield path.parent / tmp
            here, walked = os.stat(path.parent), os.fstat(fd)
            if (here.st_dev, here.st_ino) != (walked.st_dev, walked.st_ino):
                raise UnsafePathError(f"refusing to write {path}: its folder was replaced while it was written")
            _fsync_tree(tmp, fd)
            _refuse_link(path, path.name, fd)
            os.replace(tmp, path.name, src_dir_fd=fd, dst_dir_fd=fd)
            os.fsync(fd)
        finally:
            _remove(tmp, fd)
    finally:
        os.close(fd)
