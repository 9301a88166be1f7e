"""Early pool workers (flows.pool_start): a worker spawned before Prefect is imported computes one of the chunks the
flow will submit; the chunk's task returns those rows stamped with its own run id.

Truth: the rows a chunk task returns are :func:`tasks.evaluate.compute_chunk_table` of that chunk (the definition of
a chunk's rows), whatever was precomputed; a precomputed table is only ever used for the chunk with the same content
key, and every row in the lake carries the id of the run that recorded it (the ``runs`` table).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[2]
_VOLATILE = {"computed_at", "run_id"}


def _rows(table):
    cols = [c for c in table.column_names if c not in _VOLATILE]
    return table.select(cols).to_pylist()


def _chunks(tiny_spec, tmp_path):
    from tasks.plan import build_plan
    from tasks.spec import load_grid_spec

    return build_plan(load_grid_spec(tiny_spec()), tmp_path / "lake", workers=1).chunks


def test_precomputed_rows_are_the_chunks_own_and_carry_the_task_run_id(tiny_spec, tmp_path):
    from tasks import chunk_rows, evaluate
    from tasks.lake import STAGING_SCHEMA, table_from_ipc

    first, second = _chunks(tiny_spec, tmp_path)[:2]
    evaluate.precompute_chunk(first)
    got = table_from_ipc(evaluate.evaluate_chunk.fn(first).data, STAGING_SCHEMA)
    truth = evaluate.compute_chunk_table(first, "run")
    assert _rows(got) == _rows(truth)
    assert set(got.column("run_id").to_pylist()) == {evaluate.current_run_id()}  # stamped, never the empty id
    assert chunk_rows._EARLY == {}  # read once

    # a worker that precomputed another chunk computes the one it receives, and drops what it precomputed
    evaluate.precompute_chunk(first)
    got = table_from_ipc(evaluate.evaluate_chunk.fn(second).data, STAGING_SCHEMA)
    assert set(got.column("chunk_key").to_pylist()) == {second.key}
    assert _rows(got) == _rows(evaluate.compute_chunk_table(second, "run"))
    assert chunk_rows._EARLY == {}


def test_precompute_is_keyed_by_content_not_position(tiny_spec, tmp_path):
    from tasks import chunk_rows, evaluate

    first = _chunks(tiny_spec, tmp_path)[0]
    other_settings = dataclasses.replace(first.settings, deltas=(1e-7,))
    same_cells_other_settings = dataclasses.replace(first, settings=other_settings)
    assert same_cells_other_settings.key != first.key
    evaluate.precompute_chunk(first)
    assert chunk_rows.early_table(same_cells_other_settings, "run") is None
    assert chunk_rows._EARLY == {}


@pytest.mark.subprocess  # a sleeping process stands for the first-chunk process that is told to stop
def test_rows_from_the_first_chunk_process_are_used_only_for_that_chunk(tiny_spec, tmp_path):
    """The pool worker's side of the pipe from the first-chunk process (flows.pool_start.compute_first_chunk): the
    rows are used for that chunk, stamped with the task's run id; a first task for another chunk stops that process
    (its work would be wasted) and computes its own; a process that ended without rows leaves the task to compute."""
    import multiprocessing
    import signal
    import threading

    from tasks import chunk_rows

    first, second = _chunks(tiny_spec, tmp_path)[:2]
    truth = chunk_rows.compute_chunk_table(first, "")

    recv, send = multiprocessing.Pipe(duplex=False)
    chunk_rows.expect_early_rows(recv)
    sender = threading.Thread(target=lambda: (send.send((first.key, 0)), send.send((truth, 1.5))))
    sender.start()
    table, seconds = chunk_rows.early_table(first, "the-run")
    sender.join()
    assert _rows(table) == _rows(truth) and seconds == 1.5
    assert set(table.column("run_id").to_pylist()) == {"the-run"}
    assert chunk_rows._EARLY_PIPES == [] and chunk_rows.early_table(first, "again") is None  # read once

    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        recv, send = multiprocessing.Pipe(duplex=False)
        chunk_rows.expect_early_rows(recv)
        send.send((first.key, sleeper.pid))
        assert chunk_rows.early_table(second, "the-run") is None  # another chunk: not waited for
        assert sleeper.wait(timeout=10) == -signal.SIGTERM  # and its computing process stopped
    finally:
        sleeper.kill()

    recv, send = multiprocessing.Pipe(duplex=False)
    chunk_rows.expect_early_rows(recv)
    send.send((first.key, 0))
    send.close()  # the process ended before its rows: the task computes them
    assert chunk_rows.early_table(first, "the-run") is None and chunk_rows._EARLY_PIPES == []


def _phases(path: Path) -> list[tuple[int, str]]:
    return [(int(pid), label) for _, pid, label in (line.split(" ", 2) for line in path.read_text().splitlines())]


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="the sweep's trace names processes by pid (Linux)")
@pytest.mark.subprocess  # a `gdp sweep` process with its Prefect server and a pool worker
@pytest.mark.parametrize("entry", ["flows.launch", "flows.cli"])  # the `gdp` script's entry point; the CLI module
def test_sweep_chunks_run_on_the_early_worker_and_rows_carry_the_run(tiny_spec, tmp_path, entry):
    spec = tiny_spec()
    trace = tmp_path / "trace.txt"
    env = dict(os.environ, PYTHONPATH=str(ROOT), PREFECT_HOME=str(tmp_path / "prefect-home"), GDP_TRACE=str(trace))
    for var in ("PYTHONWARNINGS", "PREFECT_API_URL", "PREFECT_LOGGING_LEVEL"):
        env.pop(var, None)
    lake, report = tmp_path / "lake", tmp_path / "r.duckdb"
    argv = ["sweep", str(spec), "--workers", "1", "--lake", str(lake), "--report", str(report), "--no-progress"]
    out = subprocess.run(
        [sys.executable, "-m", entry, *argv], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "8 cells (8 computed, 0 already in the lake), 2 chunk(s) computed, 0 failed" in out.stdout, out.stdout
    # nothing the command created outlives it unreleased (multiprocessing's tracker reports leaked semaphores)
    assert "leaked" not in out.stderr and "Traceback" not in out.stderr, out.stderr[-3000:]

    phases = _phases(trace)
    main = next(pid for pid, label in phases if label == "main")
    warm = [pid for pid, label in phases if label == "worker-warm"]
    assert len(warm) == 1 and warm[0] != main  # one first-chunk process, spawned by the CLI
    first = warm[0]
    starts = [pid for pid, label in phases if label == "chunk-start"]
    # the pool's worker, another process, ran both chunk tasks; the first-chunk process computed the first chunk
    # (and only it) before the pool's worker started its first task
    assert len(starts) == 2 and len(set(starts)) == 1 and starts[0] not in (main, first), phases
    first_labels = [label for pid, label in phases if pid == first]
    assert first_labels.count("chunk-precomputed") == 1 and "chunk-start" not in first_labels, first_labels
    assert phases.index((first, "chunk-precomputed")) < phases.index((starts[0], "chunk-start")), phases
    # a short first chunk: the pool's worker was spawned once it was computed, before the flow's first submission
    # (a long one: at that submission, so that its imports do not compete with the chunk for the cores)
    spawned = next(i for i, (pid, label) in enumerate(phases) if pid == starts[0] and label.startswith("worker-init"))
    assert phases.index((first, "chunk-precomputed")) < spawned < phases.index((main, "submitted")), phases
    worker_labels = [label for pid, label in phases if pid == starts[0]]
    assert "chunk-accounted" in worker_labels and worker_labels.count("chunk-accounted") == 1, worker_labels
    # the worker imported Prefect once it was allowed to (the first chunk computed, or the flow's start-up over)
    assert worker_labels.index("worker-may-import") < worker_labels.index("worker-ready"), worker_labels
    # a chunk was sent to the first-chunk process: the server was launched after this process imported Prefect,
    # not beside that import (both would compete with the chunk for the cores)
    main_labels = [label for pid, label in phases if pid == main]
    launched = next(i for i, label in enumerate(main_labels) if label.startswith("api-server-launched"))
    assert main_labels.index("prefect-imported") < launched, main_labels
    if entry == "flows.launch":  # spawned before the CLI's imports: the first-chunk process is up before `main`
        up = next(i for i, (pid, _) in enumerate(phases) if pid == first)
        assert up < phases.index((main, "main")), phases
    assert main_labels.index("members") < main_labels.index("chunk-written"), main_labels  # while chunks compute

    # every staging row carries the id of the run the runs table recorded (the precomputed chunk's included)
    staging = [pq.read_table(p) for p in sorted((lake / "staging").rglob("chunk-*.parquet"))]
    assert sum(t.num_rows for t in staging) == 8
    runs = pq.read_table(sorted((lake / "runs").rglob("*.parquet"))[0]).column("run_id").to_pylist()
    assert {r for t in staging for r in t.column("run_id").to_pylist()} == set(runs) and "" not in runs


def test_the_pool_worker_imports_once_the_start_up_is_over(monkeypatch):
    """A first-chunk process that was sent a chunk makes the command boot its server after its own Prefect import;
    the flow's end of start-up (or that chunk computed) is what lets the pool's worker import Prefect."""
    import multiprocessing

    from flows import pool_start

    go, go_out = multiprocessing.get_context("spawn").Pipe(duplex=False)
    pool = pool_start.Pool(executor=None, queue=None, workers=1, chunk_sender=None, go=go)
    monkeypatch.setattr(pool_start, "_spawned", [pool])
    monkeypatch.setattr(pool_start, "_start_up_signal", [go_out])
    assert not pool_start.first_chunk_computing()  # no chunk sent (none planned, or not yet)
    pool.chunk_sent = True
    assert pool_start.first_chunk_computing()
    assert not go.poll(0)  # the worker would still wait (start_worker polls this end)
    pool_start.start_up_over()
    assert go.poll(0) and pool_start._start_up_signal == []
    assert not pool_start.first_chunk_computing()  # told: the chunk is computed (or the start-up over)
    pool_start.start_up_over()  # once is enough; again is a no-op
    monkeypatch.setattr(pool_start, "_spawned", [])
    assert not pool_start.first_chunk_computing()  # the flow took the pool: the command's start-up is behind it


def _children_of_this_test(tmp_path: Path, within: float = 5.0) -> list[str]:
    """Command lines of the processes whose environment names this test's folder (the command and anything it
    spawned) still alive ``within`` seconds after the command returned (the orphan watchdog takes up to a second to
    notice its parent is gone and exit)."""
    import time

    deadline = time.monotonic() + within
    while True:
        mine = []
        for d in os.listdir("/proc"):
            try:
                with open(f"/proc/{d}/environ", "rb") as f:
                    if str(tmp_path).encode() not in f.read():
                        continue
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    mine.append(f.read().replace(b"\0", b" ").decode(errors="replace")[:200])
            except OSError:
                continue
        if not mine or time.monotonic() > deadline:
            return mine
        time.sleep(0.2)


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="process checks read /proc (Linux)")
@pytest.mark.subprocess  # `gdp sweep` processes
def test_workers_spawned_at_launch_stop_when_the_command_needs_none(tiny_spec, tmp_path):
    """Nothing to compute, or a spec the command rejects: the pool spawned at launch is gone when the command
    returns, and the command's own answer is unchanged (exit code, one line)."""
    spec = tiny_spec()
    env = dict(os.environ, PYTHONPATH=str(ROOT), PREFECT_HOME=str(tmp_path / "prefect-home"))
    for var in ("PYTHONWARNINGS", "PREFECT_API_URL", "PREFECT_LOGGING_LEVEL", "GDP_TRACE"):
        env.pop(var, None)
    store = ["--lake", str(tmp_path / "lake"), "--report", str(tmp_path / "r.duckdb"), "--workers", "1"]

    def gdp(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "flows.launch", *argv, *store, "--no-progress"],
                              capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)  # fmt: skip

    assert gdp("sweep", str(spec)).returncode == 0
    again = gdp("sweep", str(spec))
    assert again.returncode == 0 and "nothing to compute" in again.stdout, again.stdout + again.stderr
    assert _children_of_this_test(tmp_path) == []
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nmechanism: gaussian\ngrid: {noise_multiplier: [-1.0]}\n")
    rejected = gdp("sweep", str(bad))
    assert rejected.returncode == 2 and rejected.stderr.startswith("gdp sweep: error: "), rejected.stderr
    assert "Traceback" not in rejected.stderr
    assert _children_of_this_test(tmp_path) == []
