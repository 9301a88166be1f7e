"""Scale benchmark: DP-SGD regret maps of 10^3 .. 10^5 cells end to end, measured beside the cost model's prediction.

One run per (cells, workers) point on a fresh lake: ``gdp sweep`` (process runner) with ``GDP_TRACE``, then
``gdp sql`` over every row of ``cells`` and of ``curves``. Per point it records the wall, cells/s, the peak RSS
(``VmHWM``) of the flow process and of each pool worker, the lake's size, the publish time (trace phases
``run-recorded`` .. ``published``), the Arrow IPC bytes each cell sends from its worker to the flow, the load average,
and the wall the cost model (:func:`predict`, PIPELINE.md "Scale") predicts for it.

The model's inputs are measured in the same run, so it stays valid when the engine gets faster:

* ``c``: seconds per cell of the chunk task's own work (:func:`tasks.evaluate.compute_chunk_table`) on a sample of
  whole (sigma, q) groups of that point's grid (:func:`sample_groups`), in this process, under the load of the
  moment; with N > 1 workers also ``c_par``, the same sample computed by N processes at once (:func:`concurrent_c`);
* ``plan``: seconds per cell of :func:`tasks.plan.build_plan` on that grid (enumeration and content hashes);
* the calibration sweeps (200 cells in chunks of 10, one per number of workers measured): the fixed start (launch to
  the workers warm and to the tasks' submission, minus planning), the per-task overhead (a worker's gap between two
  chunk tasks) and the tail; publishing ``publish0 + r * rows`` from the calibration lake and a 25x copy of it
  (:func:`publish_terms`). Those are the model's calibration; every measured point is a prediction.

    python -m benchmarks.bench_scale [--points 1000x1,1000x2,10000x1,10000x2,100000x2]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_POINTS = ((1000, 1), (1000, 2), (10_000, 1), (10_000, 2), (100_000, 2))


def _spec(n_cells: int, name: str = "bench-scale", chunk_size: int | None = None, n_sigma: int = 25) -> str:
    """sigma x q x T = 25 x 20 x (n / 500): the DP-SGD map of bench_cli, with T linear in [10, 209] so that every
    rounded step count is distinct up to 10^5 cells (200 values)."""
    n_t = max(1, n_cells // (20 * n_sigma))
    steps = f"{{linspace: [10, 209, {n_t}]}}" if n_t > 1 else "[10]"
    return (
        f"name: {name}\nmechanism: subsampled_gaussian\n"
        f"grid:\n  noise_multiplier: {{logspace: [0.8, 4.0, {n_sigma}]}}\n"
        "  sampling_rate: {logspace: [0.001, 0.05, 20]}\n"
        f"  steps: {steps}\n"
        "deltas: [1.0e-5]\nfprs: [1.0e-3]\nrepresentations: [gdp]\nmax_cells: 1000000\n"
        + (f"chunk_size: {chunk_size}\n" if chunk_size else "")
    )


# -- measured inputs ---------------------------------------------------------------------------------------------------
def measure_inputs(spec_path: Path, lake: Path, *, workers: int = 1, sample_cells: int = 500) -> dict[str, float]:
    """Per-cell compute ``c`` (a sample of whole (sigma, q) groups through the chunk task's own code), per-cell
    planning, and the Arrow IPC bytes a cell's rows take between worker and flow.

    The sample: at least 20 whole groups and at least ``sample_cells`` cells, drawn uniformly (a seeded
    ``random.sample``) from the plan's groups. Groups are not equally costly (small q and small sigma need finer
    steps), and the plan orders them by their JSON text, so an evenly strided pick lands on a few values of one axis:
    the 10^4-cell grid's every-50th group saw 2 of its 20 sampling rates and overstated ``c`` by 26 %.

    ``c_par_s_per_cell`` (``workers`` > 1): the same sample computed by ``workers`` spawned processes at once, after
    a barrier, the way the pool's workers compute on one machine: what they cost each other (shared caches, memory
    bandwidth, the host's scheduling of the virtual cores) is in it. On a cluster of separate machines ``c`` applies.
    """
    import dataclasses

    from tasks.evaluate import ChunkResult, compute_chunk_table, write_chunk
    from tasks.lake import table_to_ipc, write_members
    from tasks.plan import build_plan
    from tasks.publish import prepare_piece
    from tasks.spec import load_grid_spec

    spec = load_grid_spec(spec_path, force=True)
    started = time.perf_counter()
    plan = build_plan(spec, lake, workers=1)
    plan_s = time.perf_counter() - started
    n = len(plan.cell_ids)
    picked, spare = sample_groups([m for c in plan.chunks for m in c.mechanisms], sample_cells)
    warm = dataclasses.replace(plan.chunks[0], mechanisms=(spare,))
    compute_chunk_table(warm, "bench")  # first call: imports and caches, not per-cell work
    sample = dataclasses.replace(plan.chunks[0], mechanisms=tuple(m for group in picked for m in group))
    started, cpu0 = time.perf_counter(), time.process_time()
    table = compute_chunk_table(sample, "bench")
    c = (time.perf_counter() - started) / sample.size
    c_cpu = (time.process_time() - cpu0) / sample.size
    ipc = table_to_ipc(table)
    inputs_lake = (lake.parent / "inputs-lake").resolve()
    ids = table.column("cell_id").to_pylist()
    write_members(inputs_lake, sample.spec_name, "bench", ids, sample.settings.eval_key)
    # What the flow does with each chunk's rows: decode, check, write the Parquet file, compact it for the report.
    started = time.perf_counter()
    manifest = write_chunk(inputs_lake, sample, ChunkResult(ipc, 0.0))
    prepare_piece(inputs_lake, manifest.path)
    write = (time.perf_counter() - started) / sample.size
    out = {
        "cells": n,
        "c_s_per_cell": c,
        "c_cpu_s_per_cell": c_cpu,
        "plan_s_per_cell": plan_s / n,
        "ipc_bytes_per_cell": len(ipc) / sample.size,
        "write_s_per_cell": write,
        "sample_cells": sample.size,
        "sample_groups": len(picked),
    }
    if workers > 1:
        out["c_par_s_per_cell"] = concurrent_c(sample, warm, workers)
    return out


def sample_groups(mechanisms: list[str], sample_cells: int, seed: int = 0) -> tuple[list[list[str]], str]:
    """Whole (sigma, q) groups of a plan's cells (``tasks.plan._sharing_key``): at least 20 groups and at least
    ``sample_cells`` cells (and every sigma once, below); and one cell of a group outside the sample (the warm-up).

    On a (noise_multiplier x sampling_rate) grid the groups form a Latin design: the i-th sigma (in increasing
    order) with the ((i * stride + pass) mod #q)-th q, ``stride`` coprime to #q, one pass after another until the
    sample is large enough: every sigma and every q appears about equally often. Groups differ in cost several-fold
    (small q and small sigma need finer steps), so a design matters: on the 10^4-cell grid (25 sigma x 20 q x 20 T)
    the whole grid computed in one process took 3.83 CPU-ms per cell; four uniform draws of 25 groups gave 3.35-4.13,
    the Latin design 4.04. Other grids: a uniform draw with ``seed``."""
    import random

    from tasks.plan import _sharing_key

    by_group: dict[str, list[str]] = {}
    for m in mechanisms:
        by_group.setdefault(_sharing_key(m)[0], []).append(m)
    keys = list(by_group)
    size = max(1, len(mechanisms) // len(keys))
    want = min(len(keys), max(20, math.ceil(sample_cells / size)))
    axes = {k: json.loads(by_group[k][0]) for k in keys}
    if all("noise_multiplier" in a and "sampling_rate" in a for a in axes.values()):
        at = {(a["noise_multiplier"], a["sampling_rate"]): k for k, a in axes.items()}
        sigmas, qs = sorted({s for s, _ in at}), sorted({q for _, q in at})
        want = min(len(keys), max(want, len(sigmas)))  # at least one whole pass: every sigma
        stride = next(d for d in range(max(1, round(0.382 * len(qs))), len(qs) + 1) if math.gcd(d, len(qs)) == 1)
        picked: list[str] = []
        for turn in range(len(qs)):
            for i, sig in enumerate(sigmas):
                k = at.get((sig, qs[(i * stride + turn) % len(qs)]))
                if k is not None and k not in picked and len(picked) < want:
                    picked.append(k)
    else:
        picked = random.Random(seed).sample(keys, want)
    spare = [k for k in keys if k not in set(picked)] or keys
    return [by_group[k] for k in picked], by_group[spare[0]][0]


def _timed_chunk(chunk: Any, warm: Any, barrier: Any) -> float:
    from tasks.evaluate import compute_chunk_table

    compute_chunk_table(warm, "bench")
    barrier.wait()
    started = time.perf_counter()
    compute_chunk_table(chunk, "bench")
    return time.perf_counter() - started


def concurrent_c(chunk: Any, warm: Any, workers: int) -> float:
    """Seconds per cell when ``workers`` spawned processes compute ``chunk`` at the same time (mean over them)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager, ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        barrier = manager.Barrier(workers)
        walls = [f.result() for f in [pool.submit(_timed_chunk, chunk, warm, barrier) for _ in range(workers)]]
    return statistics.mean(walls) / chunk.size


# -- one sweep, watched --------------------------------------------------------------------------------------------------
@dataclass
class _Watch:
    """Polls the sweep's process tree: the last ``VmHWM`` (peak RSS) seen of every descendant, by role."""

    root: int
    peaks: dict[int, tuple[str, int]] = field(default_factory=dict)
    cpu: dict[int, float] = field(default_factory=dict)  # user + system seconds, last seen
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.is_set():
            self.sample()
            time.sleep(0.2)

    def sample(self) -> None:
        children: dict[int, list[int]] = {}
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    with open(f"/proc/{d}/stat", "rb") as f:
                        ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
                except (OSError, ValueError, IndexError):
                    continue
                children.setdefault(ppid, []).append(int(d))
        todo = [self.root]
        while todo:
            pid = todo.pop()
            todo += children.get(pid, [])
            hwm = _vm_hwm(pid)
            if hwm is not None:
                self.peaks[pid] = (_role(pid, self.root), hwm)
                self.cpu[pid] = _cpu_seconds(pid) or self.cpu.get(pid, 0.0)


def _cpu_seconds(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _vm_hwm(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _role(pid: int, root: int) -> str:
    if pid == root:
        return "flow"
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read()
    except OSError:
        return "other"
    if b"uvicorn" in cmd:
        return "server"
    if b"resource_tracker" in cmd:
        return "other"
    if b"spawn_main" in cmd:
        return "worker"
    return "other"


def _env(trace: Path | None) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for var in ("PREFECT_API_URL", "GDP_TRACE"):
        env.pop(var, None)
    if trace is not None:
        env["GDP_TRACE"] = str(trace)
    return env


def sweep(spec_path: Path, workers: int, lake: Path, report: Path, trace: Path) -> dict[str, Any]:
    """``gdp sweep`` in a subprocess: wall, peak RSS by role, and the trace's phases."""
    trace.write_text(f"{time.time():.3f} 0 launched\n")
    argv = ["sweep", str(spec_path), "--workers", str(workers), "--no-progress", "--force"]
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "flows.launch", *argv, "--lake", str(lake), "--report", str(report)],  # as `gdp`
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(trace),
    )
    watch = _Watch(proc.pid)
    thread = threading.Thread(target=watch.run, daemon=True)
    thread.start()
    out, err = proc.communicate()
    wall = time.perf_counter() - started
    watch.stop.set()
    thread.join()
    if proc.returncode != 0:
        raise SystemExit(f"gdp sweep failed ({proc.returncode}):\n{err[-3000:]}")
    rss: dict[str, Any] = {"flow": 0, "workers": [], "server": 0}
    cpu = {"flow": 0.0, "workers": 0.0, "server": 0.0, "other": 0.0}
    for pid, (role, _) in watch.peaks.items():
        cpu["workers" if role == "worker" else role] += watch.cpu.get(pid, 0.0)
    for role, hwm in watch.peaks.values():
        if role == "worker":
            rss["workers"].append(hwm)
        elif role in ("flow", "server"):
            rss[role] = max(rss[role], hwm)
    return {"wall_s": wall, "rss": rss, "cpu": cpu, "phases": _phases(trace), "stdout": out}


def _phases(trace: Path) -> list[tuple[float, int, str]]:
    rows = []
    for line in trace.read_text().splitlines():
        ts, pid, label = line.split(" ", 2)
        rows.append((float(ts), int(pid), label))
    t0 = rows[0][0]
    return [(ts - t0, pid, label) for ts, pid, label in rows]


def phase_stats(phases: list[tuple[float, int, str]]) -> dict[str, float]:
    """Seconds from launch to the first chunk, per-task gap in the workers, publish, and the last chunk to exit."""

    def first(label: str) -> float:
        return next(t for t, _, lab in phases if lab.split(" ")[0] == label)

    def last(label: str) -> float:
        return [t for t, _, lab in phases if lab.split(" ")[0] == label][-1]

    gaps: list[float] = []
    by_pid: dict[int, list[tuple[float, str]]] = {}
    for t, pid, lab in phases:
        if lab in ("chunk-start", "chunk-computed"):
            by_pid.setdefault(pid, []).append((t, lab))
    for events in by_pid.values():
        gaps += [
            b[0] - a[0]
            for a, b in zip(events, events[1:], strict=False)
            if (a[1], b[1]) == ("chunk-computed", "chunk-start")
        ]
    computing = sum(
        b[0] - a[0] for ev in by_pid.values() for a, b in zip(ev, ev[1:], strict=False) if a[1] == "chunk-start"
    )
    return {
        "first_chunk_s": first("chunk-start"),
        "task_gap_s": statistics.median(gaps) if gaps else 0.0,
        "publish_s": first("published") - first("run-recorded"),
        "last_chunk_to_exit_s": phases[-1][0] - last("chunk-computed"),
        "worker_compute_s": computing,
        "plan_flow_s": first("planned") - first("flow-body"),
    }


def _du(path: Path) -> int:
    """Bytes of the files under ``path``, each file once (as ``du``): a snapshot hard-links its pieces."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for f in path.rglob("*"):
        if f.is_file():
            st = f.stat()
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total


def sql_all_rows(report: Path) -> tuple[float, str]:
    """``gdp sql`` over every row of ``cells`` and ``curves`` (the largest view)."""
    query = (
        "SELECT (SELECT count(*) FROM cells) AS cells, (SELECT count(DISTINCT cell_id) FROM cells) AS distinct_ids, "
        "(SELECT max(mu) FROM cells) AS max_mu, (SELECT count(*) FROM curves) AS curve_points, "
        "(SELECT avg(fnr) FROM curves) AS mean_fnr"
    )
    started = time.perf_counter()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "flows.cli",
            "sql",
            query,
            "--report",
            str(report),
            "--format",
            "json",
            "--timeout",
            "600",
        ],
        capture_output=True,
        text=True,
        env=_env(None),
    )
    wall = time.perf_counter() - started
    if out.returncode != 0:
        raise SystemExit(f"gdp sql failed:\n{out.stderr[-2000:]}")
    return wall, out.stdout.strip()


# -- the cost model ----------------------------------------------------------------------------------------------------
def auto_chunk(n: int, workers: int) -> int:
    from tasks.plan import auto_chunk_size

    return auto_chunk_size(n, workers)


def predict(n: int, workers: int, cal: dict[str, float], inputs: dict[str, float]) -> dict[str, float]:
    """The wall of a ``gdp sweep`` of ``n`` new cells on ``workers`` workers (PIPELINE.md, "Scale").

    Chunk size ``k`` (auto), ``m = ceil(n / k)`` chunks handed to N workers in ``ceil(m / N)`` waves, each chunk
    costing ``k * c`` (``c``: one worker alone; with N > 1 workers on one machine, ``c_par``, measured with N at
    once). The early workers start at ``warm`` (launch -> a worker has its imports; the CLI's plan, ``plan * n``,
    comes first); a one-worker pool computes the first chunk before its task arrives; the tasks are submitted at ``submit`` (the API
    server, the flow run, the CLI's and the flow's plans). Every task costs ``gap`` on its worker; the flow writes
    each chunk while the next compute, so only the last write (``write * k``) is on the critical path; then the
    report is published (``publish0 + r * n``) and the command exits (``tail``)::

        first = max(warm + plan * n + k * c, submit + 2 * plan * n) + gap      (N = 1)
        first = max(warm + plan * n, submit + 2 * plan * n) + k * c + gap      (N > 1)
        wall  = first + (waves - 1) * (k * c + gap) + write * k + publish0 + r * n + tail
    """
    k = auto_chunk(n, workers)
    m = math.ceil(n / k)
    waves = math.ceil(m / workers)
    c = inputs["c_par_s_per_cell"] if workers > 1 and "c_par_s_per_cell" in inputs else inputs["c_s_per_cell"]
    plan = inputs["plan_s_per_cell"]
    start = start_terms(cal, workers)
    if workers == 1:  # the one-worker pool computes the first chunk while the server boots (flows.runners)
        first = max(start["warm_s"] + plan * n + k * c, start["submit_s"] + 2 * plan * n) + start["task_gap_s"]
    else:  # several workers wait for their tasks
        first = max(start["warm_s"] + plan * n, start["submit_s"] + 2 * plan * n) + k * c + start["task_gap_s"]
    compute = first + (waves - 1) * (k * c + start["task_gap_s"])
    publish = cal["publish0_s"] + cal["publish_s_per_row"] * n
    wall = compute + inputs["write_s_per_cell"] * k + publish + start["tail_s"]
    return {"wall_s": wall, "compute_s": compute, "publish_s": publish, "chunks": m, "chunk_size": k}


def _fresh(tmp: Path, tag: str) -> tuple[Path, Path, Path]:
    base = tmp / tag
    base.mkdir()
    return base / "lake", base / "reports" / "privacy.duckdb", base / "phases.txt"


def calibrate(tmp: Path, workers: int = 1) -> dict[str, Any]:
    """The calibration sweep: 200 cells in chunks of 10 on ``workers`` workers (20 tasks): when the workers are
    warm, when the tasks are submitted (both less the planning this small grid needed), the per-task gap, the
    publish of a small lake and the tail (last chunk to exit, publishing excluded). The start depends on the number
    of workers (N workers import while the server boots: on 2 cores, two importing workers slow the boot), so each
    N of the measured points gets its own calibration sweep; per-cell compute and publishing are measured apart."""
    spec = tmp / f"calibration-{workers}.yaml"
    spec.write_text(_spec(200, name=f"bench-scale-cal{workers}", chunk_size=10, n_sigma=5))
    lake, report, trace = _fresh(tmp, f"cal{workers}")
    inputs = measure_inputs(spec, lake)
    run = sweep(spec, workers, lake, report, trace)
    st = phase_stats(run["phases"])
    n, plan = inputs["cells"], inputs["plan_s_per_cell"]
    warm = max(t for t, _, lab in run["phases"] if lab == "worker-warm")  # the last worker ready
    submit = next(t for t, _, lab in run["phases"] if lab == "submitted")
    return {
        "cells": n,
        "workers": workers,
        "stats": st,
        "inputs": inputs,
        "wall_s": run["wall_s"],
        "warm_s": warm - plan * n,
        "submit_s": submit - 2 * plan * n,
        "task_gap_s": st["task_gap_s"],
        "publish_small_s": st["publish_s"],
        "tail_s": st["last_chunk_to_exit_s"] - st["publish_s"],
    }


def publish_terms(lake: Path, tmp: Path, copies: int = 25) -> dict[str, float]:
    """Publish seconds as ``publish0 + r * rows``, measured on the calibration lake and on a lake holding its cells
    ``copies`` times in the same spec (each copy's ``cell_id`` suffixed: publishing reads, deduplicates and writes
    rows, whatever their values). Both publishes in this process (:func:`tasks.publish.publish_lake`), each from a
    fresh lake into a fresh report, with every staging file's piece built first as a sweep leaves them (it compacts
    each chunk as soon as the chunk is in the lake, :func:`tasks.snapshots.piece_for`: the last chunk's is in the
    model's write term). Two small sweeps' publish phases (200 and 1,000 rows) differ by less than their
    jitter (1-2 s on a busy machine), which made ``r`` from them wrong several-fold; copies under other spec names
    multiply the partitions instead (332 us/row against ~120 measured at 10^5 rows)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tasks.publish import publish_lake
    from tasks.snapshots import piece_for

    times, rows = [], []
    for n_copies in (1, copies):  # fresh lakes: a lake already published would reuse its snapshot
        copy = tmp / "publish-rate" / f"lake{n_copies}"
        for sub in ("staging", "members"):
            for src in (lake / sub).rglob("*.parquet"):
                table = pq.read_table(src, partitioning=None)
                dest = copy / src.relative_to(lake)
                dest.parent.mkdir(parents=True, exist_ok=True)
                ids = table.column("cell_id").to_pylist()
                parts = []
                for k in range(n_copies):
                    part = table.set_column(
                        table.schema.get_field_index("cell_id"), "cell_id", pa.array([f"{i}-{k}" for i in ids])
                    )
                    if "grid_index" in table.column_names:
                        g = table.column("grid_index").to_numpy() + k * 10**9
                        part = part.set_column(table.schema.get_field_index("grid_index"), "grid_index", pa.array(g))
                    parts.append(part)
                pq.write_table(pa.concat_tables(parts), dest)
        for staging_file in sorted((copy / "staging").rglob("chunk-*.parquet")):
            piece_for(copy.resolve(), staging_file.resolve())
        started = time.perf_counter()
        result = publish_lake(copy, tmp / "publish-rate" / f"report{n_copies}.duckdb")
        times.append(time.perf_counter() - started)
        rows.append(result.counts["cells"])
    rate = max(0.0, (times[1] - times[0]) / (rows[1] - rows[0]))
    return {"publish0_s": times[0] - rate * rows[0], "publish_s_per_row": rate, "publish_rows": rows[1]}


def start_terms(cal: dict[str, Any], workers: int) -> dict[str, float]:
    """The start terms (warm, submit, task gap, tail) calibrated with ``workers`` workers, else with one."""
    return cal.get("by_workers", {}).get(str(workers), cal)


def measure(points: tuple[tuple[int, int], ...] = DEFAULT_POINTS, cal: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every point of ``points``; ``cal``: a calibration from an earlier run (JSON, publish terms included)."""
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp_name:
        tmp = Path(tmp_name)
        if cal is None:
            cal = calibrate(tmp)
            print(json.dumps({k: v for k, v in cal.items() if k != "stats"}, default=str), flush=True)
            cal["by_workers"] = {"1": {k: v for k, v in cal.items() if k != "inputs"}}
            cal.update(publish_terms(tmp / "cal1" / "lake", tmp))
            for w in sorted({w for _, w in points} - {1}):
                cal["by_workers"][str(w)] = calibrate(tmp, w)
                print(json.dumps({k: v for k, v in cal["by_workers"][str(w)].items() if k != "stats"}), flush=True)
        for n, workers in points:
            spec = tmp / f"scale-{n}.yaml"
            spec.write_text(_spec(n))
            lake, report, trace = _fresh(tmp, f"p{n}x{workers}")
            inputs = measure_inputs(spec, lake, workers=workers)
            load_before = os.getloadavg()[0]
            run = sweep(spec, workers, lake, report, trace)
            st = phase_stats(run["phases"])
            sql_s, sql_out = sql_all_rows(report)
            pred = predict(n, workers, cal, inputs)
            staging, curated = _du(lake / "staging"), _du(lake / "curated")
            results.append(
                {
                    "cells": n,
                    "workers": workers,
                    "wall_s": run["wall_s"],
                    "cells_per_s": n / run["wall_s"],
                    "rss": run["rss"],
                    "cpu": run["cpu"],
                    "stats": st,
                    "inputs": inputs,
                    "predicted": pred,
                    "staging_bytes": staging,
                    "curated_bytes": curated,
                    "lake_bytes": _du(lake),
                    "sql_s": sql_s,
                    "sql": sql_out,
                    "load_before": load_before,
                    "load_after": os.getloadavg()[0],
                }
            )
            print(json.dumps(_brief(results[-1])), flush=True)
    return {"calibration": cal, "points": results}


def _brief(r: dict[str, Any]) -> dict[str, Any]:
    return {
        "cells": r["cells"],
        "workers": r["workers"],
        "wall_s": round(r["wall_s"], 1),
        "predicted_s": round(r["predicted"]["wall_s"], 1),
        "c_ms": round(1000 * r["inputs"]["c_s_per_cell"], 2),
        "publish_s": round(r["stats"]["publish_s"], 2),
        "lake_MB": round(r["lake_bytes"] / 1e6, 1),
        "rss_flow_MiB": r["rss"]["flow"] >> 20,
        "rss_workers_MiB": [w >> 20 for w in r["rss"]["workers"]],
        "sql_s": round(r["sql_s"], 2),
        "load": (round(r["load_before"], 1), round(r["load_after"], 1)),
    }


def run() -> str:
    m = measure()
    return render(m)


def render(m: dict[str, Any]) -> str:
    lines = [
        "## Scale: DP-SGD regret maps of 10^3 - 10^5 cells, measured and modelled",
        "",
        "`python -m benchmarks.bench_scale`: one `gdp sweep` (process runner) per point on a fresh lake, then `gdp sql` "
        'over every row of `cells` and `curves`. Predicted = the cost model of PIPELINE.md ("Scale", '
        "`bench_scale.predict`) with per-cell compute `c` (one worker; `c_par`, N processes at once, for N > 1) and "
        "planning measured in the same run on a Latin sample of that point's (sigma, q) groups, just before its sweep; "
        "start, per-task gap and tail calibrated on a 200-cell sweep in chunks of 10 per number of workers, publishing "
        "on that lake and a 25x copy of its cells. No measured point enters the model.",
        "",
        "| cells | workers | chunks x size | c ms/cell | wall s | predicted s | error | cells/s | publish s | "
        "lake MB | IPC B/cell | peak RSS flow / workers MiB | `gdp sql` all rows s | load before / after |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in m["points"]:
        p = r["predicted"]
        err = (p["wall_s"] - r["wall_s"]) / r["wall_s"]
        lines.append(
            f"| {r['cells']:,} | {r['workers']} | {p['chunks']} x {p['chunk_size']} | "
            f"{1000 * r['inputs']['c_s_per_cell']:.2f} | {r['wall_s']:.1f} | {p['wall_s']:.1f} | "
            f"{100 * err:+.0f} % | {r['cells'] / r['wall_s']:.0f} | "
            f"{r['stats']['publish_s']:.2f} | {r['lake_bytes'] / 1e6:.1f} | {r['inputs']['ipc_bytes_per_cell']:.0f} | "
            f"{r['rss']['flow'] >> 20} / {', '.join(str(w >> 20) for w in r['rss']['workers'])} | {r['sql_s']:.1f} | "
            f"{r['load_before']:.1f} / {r['load_after']:.1f} |"
        )
    with_cpu = [r for r in m["points"] if "cpu" in r and "c_cpu_s_per_cell" in r["inputs"]]
    if with_cpu:  # the compute term in CPU seconds: what the load of other jobs does not change
        lines += [
            "",
            "| cells | workers | workers' CPU s | predicted n x c (CPU) | error | flow CPU s | server CPU s |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in with_cpu:
            pred = r["cells"] * r["inputs"]["c_cpu_s_per_cell"]
            got = r["cpu"]["workers"]
            lines.append(
                f"| {r['cells']:,} | {r['workers']} | {got:.1f} | {pred:.1f} | {100 * (pred - got) / got:+.0f} % | "
                f"{r['cpu']['flow']:.1f} | {r['cpu']['server']:.1f} |"
            )
    c = m["calibration"]
    lines += [
        "",
        f"Calibration ({c['cells']} cells in chunks of 10, one worker, {c['wall_s']:.1f} s): a worker warm at "
        f"{c['warm_s']:.2f} s, tasks submitted at {c['submit_s']:.2f} s (planning excluded), per-task gap "
        f"{c['task_gap_s']:.3f} s, tail {c['tail_s']:.2f} s (last chunk to exit, publishing excluded), publish "
        f"{c['publish0_s']:.2f} s + {1e6 * c['publish_s_per_row']:.1f} us/row (measured on the calibration lake and "
        f"on a {c.get('publish_rows', 0):,}-row copy of it).",
    ]
    for w, cw in sorted(c.get("by_workers", {}).items()):
        if w != "1":
            lines[-1] += (
                f" With {w} workers ({cw['wall_s']:.1f} s): warm at {cw['warm_s']:.2f} s, submitted at "
                f"{cw['submit_s']:.2f} s, gap {cw['task_gap_s']:.3f} s, tail {cw['tail_s']:.2f} s."
            )
    return "\n".join(lines)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", default=",".join(f"{n}x{w}" for n, w in DEFAULT_POINTS), help="CELLSxWORKERS,...")
    ap.add_argument("--json", help="also write the raw measurements here")
    ap.add_argument("--calibration", help="a calibration (JSON) from an earlier run instead of a new one")
    args = ap.parse_args()
    pts = tuple((int(a), int(b)) for a, b in (p.split("x") for p in args.points.split(",")))
    result = measure(pts, json.loads(Path(args.calibration).read_text()) if args.calibration else None)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=str))
    print(render(result))
