"""Phase timestamps for finding fixed costs: ``GDP_TRACE=/path/file gdp sweep ...`` appends one line
``<unix time> <pid> <phase>`` per phase reached, from the CLI process, the flow and the chunk workers alike (the
environment reaches the workers). Unset (the default), :func:`phase` does nothing but one dictionary lookup.

``python -m benchmarks.bench_cli --phases`` prints such a timeline for the sweep it measures.
"""

from __future__ import annotations

import os
import time

__all__ = ["phase"]


def phase(label: str) -> None:
    """Record that this process reached ``label`` now (no-op unless ``GDP_TRACE`` names a file)."""
    path = os.environ.get("GDP_TRACE")
    if not path:
        return
    try:
        with open(path, "a", encoding="utf-8") as fh:  # one short append per line: lines from processes do not mix
            fh.write(f"{time.time():.3f} {os.getpid()} {label}\n")
    except OSError:  # a diagnostic must never fail the run
        pass
