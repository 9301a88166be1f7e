"""A process-pool worker computes chunk after chunk without keeping them: its RSS after chunk k stays within a fixed
bound of its RSS after chunk 2 (benchmarks/RESULTS.md, "Scale": at 10^5 cells the workers' peak RSS grew with the
chunks they computed).

The worker reports its own ``VmRSS`` right after each chunk (``worker-rss`` lines of ``GDP_TRACE``, written by
:func:`tasks.evaluate.evaluate_chunk` once the chunk's rows are encoded and its memory released), so the numbers are
the worker's, at the same point of every chunk, with no polling race.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CHUNKS, CHUNK_SIZE = 14, 50
SPEC = (
    "name: worker-memory\nmechanism: subsampled_gaussian\n"
    "grid:\n  noise_multiplier: [0.9, 2.0]\n  sampling_rate: {logspace: [0.001, 0.05, 10]}\n"
    "  steps: {linspace: [10, 214, 35]}\n"
    f"deltas: [1.0e-5]\nfprs: [1.0e-3]\nrepresentations: [gdp]\nchunk_size: {CHUNK_SIZE}\n"
)

BOUND_KIB = 16 * 1024
"""RSS after chunk k (k > 2) <= RSS after chunk 2 + 16 MiB. Chunk 1 and 2 warm the worker (first imports, engine and
Arrow caches); after that a worker that keeps nothing per chunk stays flat: measured within a few MiB over 10+
chunks of 200-2000 cells (benchmarks/RESULTS.md, "Scale"). The growth measured at 10^5 cells, ~37 KiB per computed
cell (74 MiB per 2000-cell chunk), would add ~1.8 MiB per 50-cell chunk here, 21 MiB over the 12 chunks after chunk
2: above the bound, so per-chunk retention of that order fails this test."""


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PREFECT_HOME=str(tmp_path / "prefect-home"))
    for var in ("PYTHONWARNINGS", "PREFECT_API_URL", "PREFECT_LOGGING_LEVEL"):
        env.pop(var, None)
    return env


def _worker_rss(trace: Path) -> dict[int, list[int]]:
    """Per worker pid, its ``worker-rss`` readings (KiB) in chunk order."""
    out: dict[int, list[int]] = {}
    for line in trace.read_text().splitlines():
        _, pid, label = line.split(" ", 2)
        if label.startswith("worker-rss kib="):
            out.setdefault(int(pid), []).append(int(label.split("=", 1)[1]))
    return out


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="the worker reads its RSS from /proc (Linux)")
@pytest.mark.subprocess  # a `gdp sweep` process with its Prefect server and pool worker
def test_worker_rss_stays_flat_chunk_after_chunk(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    trace = tmp_path / "trace.txt"
    argv = ["sweep", str(spec), "--runner", "process", "--workers", "1", "--no-progress"]
    out = subprocess.run(
        [sys.executable, "-m", "flows.cli", *argv, "--lake", str(tmp_path / "lake"), "--report", str(tmp_path / "r")],
        capture_output=True, text=True, env=_env(tmp_path) | {"GDP_TRACE": str(trace)}, cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    cells = CHUNKS * CHUNK_SIZE
    assert f"{cells} cells ({cells} computed, 0 already in the lake), {CHUNKS} chunk(s) computed, 0 failed" in (
        out.stdout
    ), out.stdout
    readings = _worker_rss(trace)
    assert len(readings) == 1, readings  # one pool worker ran every chunk
    (rss,) = readings.values()
    # the early worker may precompute chunk 1 before the flow run exists: its task then reports like any other
    assert len(rss) == CHUNKS, rss
    after_2 = rss[1]
    assert all(0 < r <= after_2 + BOUND_KIB for r in rss[2:]), [r // 1024 for r in rss]
