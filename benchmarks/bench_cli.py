"""CLI benchmark: fixed costs of the ``gdp`` CLI around the accounting.

Measured in one run on a fresh lake: (1) ``gdpcore.analyze_grid`` on the spec's cells in this process, with the
settings a sweep uses (same deltas, the lake's curve FPR grid, same representations), after a warm-up on 1 % of
them, once before and once after the sweep (their mean is the reference); (2) ``gdp sweep`` of the same
spec in a subprocess (process runner, ``--workers 1`` so that both do the accounting on one core and the difference
is the pipeline's overhead: Prefect start, planning, chunk tasks, Parquet, publishing); (3) the same ``gdp sweep``
again (nothing to compute); (4) ``gdp publish``; (5) ``gdp sql``.

    python -m benchmarks.bench_cli [--cells 10000] [--phases]   # or `make bench` (run() -> a RESULTS.md section)

``--phases`` also prints where the first sweep's seconds went (``GDP_TRACE``, :mod:`tasks.trace`): one line per
phase reached, with the seconds since the sweep process was launched, from the CLI process, the flow and the pool
worker (``chunk-start`` .. ``chunk-computed`` is accounting; everything else is overhead).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

BEFORE: dict[str, Any] = {
    "commit": "42116db",
    "date": "2026-11-27",
    "cells": 10_000,
    "analyze_grid_s": 36.3,
    "sweep_s": 39.6,
    "load_average": 1.2,
}
"""The 10^4-cell sweep's "before" row: measured by this file on main at the commit named (session 14's engine, before
session 15's work on per-cell costs), in the same sitting as that session's "after" runs, on the same 2 cores: the
mean of two runs alternating with them (benchmarks/RESULTS.md, "Engine throughput, session 15"; load average 1.1-1.3
at their ends). The earlier before row, main at 6ed0073 at load 11.5 (eight jobs on the two cores), was 155.1 s and
415.5 s."""


def _spec(n_cells: int) -> str:
    # sigma x q x T with 25 x 20 x (n / 500) values: cheap-to-moderate DP-SGD cells (about 5-15 ms each)
    n_t = max(1, n_cells // 500)
    return (
        "name: bench-cli\nmechanism: subsampled_gaussian\n"
        "grid:\n  noise_multiplier: {logspace: [0.8, 4.0, 25]}\n  sampling_rate: {logspace: [0.001, 0.05, 20]}\n"
        f"  steps: {{logspace: [10, 200, {n_t}]}}\n"
        "deltas: [1.0e-5]\nfprs: [1.0e-3]\nrepresentations: [gdp]\nmax_cells: 1000000\n"
    )


def _gdp(*argv: str, trace: Path | None = None) -> float:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("PREFECT_API_URL", None)
    env.pop("GDP_TRACE", None)
    if trace is not None:
        env["GDP_TRACE"] = str(trace)
        trace.write_text(f"{time.time():.3f} 0 launched\n")
    started = time.perf_counter()
    # flows.launch: what the `gdp` script runs
    out = subprocess.run([sys.executable, "-m", "flows.launch", *argv], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - started
    if out.returncode != 0:
        raise SystemExit(f"gdp {' '.join(argv)} failed:\n{out.stderr[-3000:]}")
    return wall


def _timeline(trace: Path) -> list[str]:
    """``+seconds  process  phase`` lines, seconds since launch; processes named main / worker-N / launcher."""
    rows = [line.split(" ", 2) for line in trace.read_text().splitlines()]
    t0 = float(rows[0][0])
    names: dict[str, str] = {"0": "launcher"}
    for _, pid, label in rows:
        if pid not in names:
            names[pid] = "main" if label == "main" else f"worker-{len(names) - 1}"
    return [f"{float(ts) - t0:8.2f}  {names[pid]:<9} {label}" for ts, pid, label in rows]


def _chunk_seconds(trace: Path) -> list[float]:
    """Seconds each of the sweep's chunks computed, in the order they ended: ``chunk-start`` .. ``chunk-computed``
    of each task that computed its chunk (a ``chunk-accounted`` in between), and ``worker-warm`` ..
    ``chunk-precomputed`` of the chunk the first-chunk process computed before the flow run existed
    (``flows.pool_start.compute_first_chunk``; the task that took those rows waited, it did not compute)."""
    seconds, opened, accounted = [], {}, set()
    for line in trace.read_text().splitlines():
        ts, pid, label = line.split(" ", 2)
        if label in ("chunk-start", "worker-warm"):
            opened[pid] = float(ts)
            accounted.discard(pid)
        elif label == "chunk-accounted":
            accounted.add(pid)
        elif label in ("chunk-computed", "chunk-precomputed") and pid in opened:
            start = opened.pop(pid)
            if pid in accounted:
                seconds.append(float(ts) - start)
    return seconds


def _worker_accounting(trace: Path) -> float:
    """Seconds the sweep's processes spent computing chunks (:func:`_chunk_seconds`): the same work as
    ``analyze_grid`` in this process, measured in the same seconds as the sweep's wall (the other jobs' load changes
    both alike)."""
    return sum(_chunk_seconds(trace))


def measure(cells: int = 10_000, *, phases: bool = False) -> dict[str, Any]:
    import gdpcore
    from tasks.chunk_rows import _cell_result
    from tasks.evaluate import EvalSettings
    from tasks.spec import load_grid_spec

    with tempfile.TemporaryDirectory() as tmp:
        spec_path = Path(tmp) / "bench-cli.yaml"
        spec_path.write_text(_spec(cells))
        spec = load_grid_spec(spec_path)
        mechs = [gdpcore.mechanism_from_dict(c) for c in spec.iter_cells()]
        settings = EvalSettings.from_spec(spec)

        def direct_run(cells: list[Any]) -> float:
            # The same work a sweep's chunk does per cell (row and regrets taken at once: holding 10^4 reports'
            # curves would need ~24 GB).
            started = time.perf_counter()
            gdpcore.analyze_grid(
                cells,
                deltas=list(settings.deltas),
                alpha_min=settings.alpha_min,
                on_report=lambda i, r: _cell_result(i, r, settings),
            )
            return time.perf_counter() - started

        direct_run(mechs[:: max(1, len(mechs) // 100)])  # warm-up: first calls, lazy imports
        before = direct_run(mechs)
        store = ["--lake", f"{tmp}/lake", "--report", f"{tmp}/reports/privacy.duckdb"]
        trace = Path(tmp) / "phases.txt" if phases else None
        sweep = _gdp("sweep", str(spec_path), "--workers", "1", "--no-progress", *store, trace=trace)
        after = direct_run(mechs)  # on either side of the sweep: a drift of the machine's speed shows
        direct = (before + after) / 2
        timeline = _timeline(trace) if trace is not None else None
        accounting = _worker_accounting(trace) if trace is not None else None
        chunks = _chunk_seconds(trace) if trace is not None else None
        rerun = _gdp("sweep", str(spec_path), "--workers", "1", "--no-progress", *store)
        publish = _gdp("publish", *store)
        sql = _gdp("sql", "SELECT count(*), max(mu) FROM cells", "--report", f"{tmp}/reports/privacy.duckdb")
    overhead = sweep - direct
    result: dict[str, Any] = {
        "cells": len(mechs),
        "analyze_grid_s": round(direct, 1),
        "analyze_grid_runs_s": [round(before, 1), round(after, 1)],
        "sweep_s": round(sweep, 1),
        "overhead_s": round(overhead, 1),
        "overhead_share": round(overhead / sweep, 3),
        "rerun_nothing_to_compute_s": round(rerun, 2),
        "publish_s": round(publish, 2),
        "sql_s": round(sql, 2),
        "load_average": round(os.getloadavg()[0], 1),
    }
    if accounting is not None:  # the same-run view: the sweep's wall against its own workers' accounting
        result["worker_accounting_s"] = round(accounting, 1)
        result["overhead_vs_worker_s"] = round(sweep - accounting, 1)
        result["overhead_vs_worker_share"] = round((sweep - accounting) / sweep, 3)
    if chunks:  # the first: computed beside the command's start-up (flows.pool_start), the rest by the pool's worker
        result["chunks_s"] = [round(c, 2) for c in chunks]
    if timeline is not None:
        result["phases"] = timeline
    return result


def _rate_row(label: str, m: dict[str, Any]) -> str:
    def rate(key: str) -> str:
        return "-" if m.get(key) is None else f"{m['cells'] / m[key]:.0f} ({m[key]} s)"

    share = "-" if m.get("sweep_s") is None else f"{100 * (m['sweep_s'] - m['analyze_grid_s']) / m['sweep_s']:.0f} %"
    return f"| {label} | {rate('analyze_grid_s')} | {rate('sweep_s')} | {share} | {m.get('load_average', '-')} |"


def run() -> str:
    m = measure(10_000, phases=True)
    return "\n".join(
        [
            "## CLI fixed costs: 10,000-cell DP-SGD sweep",
            "",
            f"{m['cells']:,} cells (sigma x q x T = 25 x 20 x 20), one run, fresh lake; `gdp sweep --workers 1` against "
            "`analyze_grid` on the same cells with the same settings in one process; overhead = sweep wall - "
            f"analyze_grid wall. Load average {m['load_average']} at the end (2 shared cores).",
            "",
            "| measurement | wall s | target |",
            "|---|---|---|",
            f"| `analyze_grid`, one process | {m['analyze_grid_s']} | |",
            f"| `gdp sweep`, process runner, 1 worker | {m['sweep_s']} | |",
            f"| overhead (share of the sweep's wall) | {m['overhead_s']} ({100 * m['overhead_share']:.0f} %) | <= 10 % |",
            f"| the sweep's workers' own accounting (same run, same load) | {m['worker_accounting_s']} | |",
            f"| overhead against it (share) | {m['overhead_vs_worker_s']} "
            f"({100 * m['overhead_vs_worker_share']:.0f} %) | <= 10 % |",
            f"| `gdp sweep` again, nothing to compute | {m['rerun_nothing_to_compute_s']} | <= 3 |",
            f"| `gdp publish` (report current) | {m['publish_s']} | <= 5 |",
            f"| `gdp sql` | {m['sql_s']} | |",
            "",
            "Cells per second on one worker, before and after (the before row: main at the commit named, same cells, "
            "same machine; absolute rates move with the shared machine's load, given beside them):",
            "",
            "| code | `analyze_grid` cells/s | `gdp sweep --workers 1` cells/s | sweep overhead | load average |",
            "|---|---|---|---|---|",
            _rate_row(f"before (main {BEFORE['commit']}, {BEFORE['date']})", BEFORE),
            _rate_row("this run", m),
        ]
    )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=10_000, help="grid size (a multiple of 500)")
    ap.add_argument("--phases", action="store_true", help="also print the first sweep's phase timeline")
    args = ap.parse_args()
    out = measure(args.cells, phases=args.phases)
    lines = out.pop("phases", None)
    print(json.dumps(out, indent=1))
    if lines:
        print("\n".join(["", "sweep phases (seconds since launch, process, phase):", *lines]))
