"""Progress for long runs: rich's progress bar on a terminal (cells done / total, rate, ETA), one plain line per 10 %
in logs and pipes, and the same fraction mirrored to a Prefect progress artifact."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO, cast
from uuid import UUID

__all__ = ["ProgressBar"]


class ProgressBar:
    def __init__(
        self,
        total: int,
        *,
        label: str = "cells",
        stream: TextIO | None = None,
        enabled: bool = True,
        artifact_key: str | None = None,
    ) -> None:
        self.total = max(0, total)
        self.done = 0
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = enabled and self.total > 0
        self.started = time.monotonic()
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._last_pct = -1
        self._artifact: UUID | None = None
        self._rich: Any = None
        if artifact_key and self.total > 0:
            from prefect.artifacts import create_progress_artifact

            # Called from synchronous code: Prefect's sync_compatible returns the id, not a coroutine.
            self._artifact = cast(
                UUID, create_progress_artifact(progress=0.0, key=artifact_key, description=f"{label} done of {total}")
            )
        if self.enabled and self._tty:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._rich = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[rate]}"),
                TimeRemainingColumn(),
                console=Console(file=self.stream),
                transient=False,
            )
            self._task = self._rich.add_task(label, total=self.total, rate="")
            self._rich.start()

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = self.done / elapsed
        remaining = (self.total - self.done) / rate if rate > 0 else float("nan")
        eta = "--:--" if remaining != remaining else time.strftime("%H:%M:%S", time.gmtime(remaining))
        width = 30
        filled = int(width * self.done / self.total) if self.total else width
        bar = "#" * filled + "." * (width - filled)
        return f"[{bar}] {self.done}/{self.total} {self.label}  {rate:.1f} {self.label}/s  ETA {eta}"

    def update(self, n: int) -> None:
        self.done = min(self.total, self.done + n)
        if self._artifact is not None:
            from prefect.artifacts import update_progress_artifact

            update_progress_artifact(artifact_id=self._artifact, progress=100.0 * self.done / self.total)
        if not self.enabled:
            return
        if self._rich is not None:
            rate = self.done / max(time.monotonic() - self.started, 1e-9)
            self._rich.update(self._task, completed=self.done, rate=f"{rate:.1f} {self.label}/s")
            if self.done >= self.total:
                self.close()
            return
        pct = int(10 * self.done / self.total)  # logs / pipes: one line per 10 %
        if pct != self._last_pct:
            self._last_pct = pct
            self.stream.write(self.line() + "\n")
            self.stream.flush()

    def close(self) -> None:
        if self._rich is not None:
            self._rich.stop()
            self._rich = None
