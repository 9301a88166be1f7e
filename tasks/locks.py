"""Lake locks: one publisher per lake at a time, one sweep per spec at a time.

A lock is an ``fcntl.flock`` on a file under ``<lake>/_locks/``. The kernel releases it when its holder exits *in any
way* (SIGKILL and OOM kill included), so a dead writer never leaves a stale lock behind: there is nothing to expire
or to break by hand. The lock file holds the holder's host, pid and start time, only so a waiting process can say
whom it waits for. (flock works on local file systems and on NFSv4 / most cluster file systems that implement it; on
a file system without locking, ``flock`` raises and the command stops with a clear error rather than run unlocked.)

A lake on object storage (``--lake s3://...``) has no ``flock``: these locks are then taken on its local mirror and
serialise the writers of one machine only; across machines the conditional writes of :mod:`tasks.object_store`
(``If-None-Match`` on immutable objects, ``If-Match`` on the members files and the report) take their place, and that
module's docstring states why no lock is needed there.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = ["LockTimeout", "lake_lock", "publish_lock", "spec_lock"]

DEFAULT_TIMEOUT = float(os.environ.get("GDP_LOCK_TIMEOUT", "1800"))


class LockTimeout(ValueError):
    """Another process held the lock for longer than the caller was willing to wait."""


def _holder(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return "unknown"
    return text[:200] or "unknown"


@contextlib.contextmanager
def lake_lock(
    path: Path, what: str, *, timeout: float | None = None, on_wait: Callable[[str], None] | None = None
) -> Iterator[None]:
    """Hold an exclusive flock on ``path`` (created if missing) for the ``with`` block; wait up to ``timeout`` s."""
    timeout = DEFAULT_TIMEOUT if timeout is None else timeout
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise ValueError(f"cannot create the lock {path} ({what}): {exc.strerror or exc}") from None
    try:
        deadline = time.monotonic() + timeout
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise ValueError(f"cannot lock {path} ({what}): {exc.strerror or exc}") from None
            if time.monotonic() > deadline:
                raise LockTimeout(f"{what}: still locked by {_holder(path)} after {timeout:g} s ({path})")
            if on_wait is not None and not told:
                on_wait(f"{what}: waiting for {_holder(path)}")
                told = True
            time.sleep(0.2)
        with contextlib.suppress(OSError):  # informative only
            os.ftruncate(fd, 0)
            os.pwrite(
                fd,
                f"host={socket.gethostname()} pid={os.getpid()} since={dt.datetime.now(dt.UTC).isoformat()}\n".encode(),
                0,
            )
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def publish_lock(lake: Path, **kw) -> contextlib.AbstractContextManager[None]:
    """One publisher per lake: snapshot build, report replacement and garbage collection never interleave."""
    return lake_lock(Path(lake) / "_locks" / "publish.lock", f"publish of {lake}", **kw)


def spec_lock(lake: Path, spec_name: str, **kw) -> contextlib.AbstractContextManager[None]:
    """One sweep per spec and lake: a second sweep waits, then finds every cell computed and computes nothing."""
    from tasks.lake import safe_join

    return lake_lock(safe_join(Path(lake) / "_locks", f"spec={spec_name}.lock"), f"sweep of spec {spec_name}", **kw)
