"""flows.chunks.collect_chunks, the one chunk-collection loop of grid and calibration sweeps: the chunk tasks return
rows, the flow writes each chunk's file and counts a chunk only once that file is in the lake with one row per cell.

The failure these tests pin (found on a Dask cluster whose workers could not see the lake): chunk tasks reported
files the flow never saw, and the sweep printed "60 computed, 0 failed" and published a report with 0 cells. Here a
chunk whose file is not where the flow reads it, whose task claims a file instead of returning rows, or whose rows
are short, is a failure, and the sweep raises (exit code != 0) instead of reporting success."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import pyarrow as pa
import pytest
from prefect import flow, task

from flows.chunks import collect_chunks
from flows.progress import ProgressBar
from flows.runners import make_task_runner
from tasks.lake import atomic_write_parquet, table_from_ipc, table_to_ipc

pytestmark = pytest.mark.usefixtures("prefect_server")

CALLS: dict[str, int] = {}
SCHEMA = pa.schema([pa.field("cell", pa.int64(), nullable=False)])


@dataclasses.dataclass(frozen=True)
class _Chunk:
    key: str
    size: int

    @property
    def short_key(self) -> str:
        return self.key


def _own(chunk: _Chunk) -> str:
    return f"chunk-{chunk.key}.parquet"


@task(name="fake-chunk")
def _fake_chunk(chunk: _Chunk) -> object:
    """Rows for every cell, except: 'bad' raises, 'claims' returns a manifest naming a file (what chunk tasks did
    before the flow wrote the lake), 'short' returns one row fewer than its cells."""
    CALLS[chunk.key] = CALLS.get(chunk.key, 0) + 1
    if chunk.key == "bad":
        raise RuntimeError("boom")
    if chunk.key == "claims":
        return {"path": _own(chunk)}
    n = chunk.size - (chunk.key == "short")
    return table_to_ipc(pa.Table.from_pydict({"cell": list(range(n))}, schema=SCHEMA))


def _writer(lake: Path, sink: Path):
    """Writes a chunk's rows to its own file in ``lake`` - except 'elsewhere', which lands in ``sink`` (a lake path
    that resolves differently for the writer: the flow then finds nothing where it reads)."""

    def write(chunk: _Chunk, result: object) -> dict[str, str]:
        table = table_from_ipc(result, SCHEMA)
        root = sink if chunk.key == "elsewhere" else lake
        atomic_write_parquet(table, root / _own(chunk), {})
        return {"path": _own(chunk)}

    return write


def test_a_chunk_counts_only_once_its_file_is_in_the_lake(tmp_path):
    CALLS.clear()
    lake, sink = tmp_path / "lake", tmp_path / "sink"
    ok = [_Chunk("ok1", 1), _Chunk("ok2", 2)]
    broken = [_Chunk("elsewhere", 3), _Chunk("claims", 4), _Chunk("short", 5), _Chunk("bad", 6)]
    chunks = ok + broken
    stream = io.StringIO()
    bar = ProgressBar(sum(c.size for c in chunks), stream=stream)

    @flow(task_runner=make_task_runner("thread", max_workers=2))
    def run() -> tuple[list[dict[str, str]], list[str]]:
        return collect_chunks(
            _fake_chunk,
            chunks,
            str(lake),
            write=_writer(lake, sink),
            expected_path=_own,
            path_of=lambda m: m["path"],
            bar=bar,
        )

    manifests, failures = run()
    assert sorted(m["path"] for m in manifests) == sorted(_own(c) for c in ok)
    why = {f.split(":", 1)[0]: f for f in failures}
    assert set(why) == {f"chunk {c.key}" for c in broken}, failures
    assert "is not in the lake after the write" in why["chunk elsewhere"]
    assert "must be Arrow IPC bytes, got dict" in why["chunk claims"]
    assert "has 4 rows for 5 cells" in why["chunk short"]
    assert "boom" in why["chunk bad"]
    assert (sink / _own(broken[0])).is_file()  # the write happened - where the flow does not read
    assert CALLS == {c.key: 1 for c in chunks}  # each task ran once: nothing is recomputed behind the count
    assert bar.done == bar.total == 21 and "21/21 cells" in stream.getvalue()


def test_a_sweep_whose_chunk_files_are_not_in_the_lake_fails_loudly(tiny_spec, tmp_path, monkeypatch, capsys):
    """End to end through `gdp sweep`: every chunk file lands outside the lake (as when workers wrote to a disk the
    flow does not read). The command raises - the process exits with code 1 - and never prints a success line."""
    import tasks.evaluate
    from flows.cli import main

    sink = tmp_path / "elsewhere"

    def misplaced(table, path, provenance):  # the real writer, into another root
        return atomic_write_parquet(table, sink / Path(path).name, provenance)

    monkeypatch.setattr(tasks.evaluate, "atomic_write_parquet", misplaced)
    lake, report = tmp_path / "lake", tmp_path / "r.duckdb"
    args = ["sweep", str(tiny_spec()), "--runner", "thread", "--workers", "2", "--no-progress"]
    with pytest.raises(RuntimeError, match=r"2 of 2 chunks failed: chunk \w+: its file .* is not in the lake"):
        main([*args, "--lake", str(lake), "--report", str(report)])
    out = capsys.readouterr().out
    assert "0 failed" not in out and "computed" not in out, out
    assert len(list(sink.glob("chunk-*.parquet"))) == 2  # both chunks were computed and written elsewhere
    assert not list(lake.rglob("chunk-*.parquet"))


class _Rows:
    """A result the test can hold a weak reference to (bytes cannot be weakly referenced)."""

    def __init__(self, n: int):
        self.data = table_to_ipc(pa.Table.from_pydict({"cell": list(range(n))}, schema=SCHEMA))


@task(name="rows-chunk")
def _rows_chunk(chunk: _Chunk) -> _Rows:
    return _Rows(chunk.size)


def _alive_at_write(tmp_path: Path) -> list[int]:
    """Run six chunks through collect_chunks (thread runner, one worker: each task's result is in this process) and
    return, at each write, how many earlier chunks' results are still alive."""
    import gc
    import weakref

    chunks = [_Chunk(f"c{i}", 3) for i in range(6)]
    refs: list[weakref.ref] = []
    alive_at_write: list[int] = []

    def write(chunk: _Chunk, result: _Rows) -> dict[str, str]:
        gc.collect()
        alive_at_write.append(sum(r() is not None for r in refs))
        refs.append(weakref.ref(result))
        atomic_write_parquet(table_from_ipc(result.data, SCHEMA), tmp_path / _own(chunk), {})
        return {"path": _own(chunk)}

    @flow(task_runner=make_task_runner("thread", max_workers=1))
    def run() -> tuple[list[dict[str, str]], list[str]]:
        return collect_chunks(
            _rows_chunk,
            chunks,
            str(tmp_path),
            write=write,
            expected_path=_own,
            path_of=lambda m: m["path"],
            bar=ProgressBar(18, enabled=False),
        )

    manifests, failures = run()
    assert not failures and len(manifests) == 6
    return alive_at_write


def test_the_flow_releases_each_result_once_it_is_written(tmp_path):
    """Bounded memory: when a chunk's rows are written, no earlier chunk's result is still alive in the flow
    process (the futures that held them are gone), so a sweep holds the rows of unwritten chunks only."""
    assert _alive_at_write(tmp_path) == [0] * 6


_WITHOUT_HEARTBEATS = """
import json, sys
from pathlib import Path
from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings
from prefect.testing.utilities import prefect_test_harness
from tests.pipeline.test_collect_chunks import _alive_at_write
with prefect_test_harness(server_startup_timeout=120):
    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        print(json.dumps(_alive_at_write(Path(sys.argv[1]))))
"""


@pytest.mark.subprocess  # a fresh process: Prefect's events client not yet started, as in a `gdp` command
@pytest.mark.prefect
def test_without_heartbeats_the_flow_still_releases_each_result(tmp_path):
    """The same, in a fresh process whose flow run has no heartbeats (what ``gdp`` runs against its temporary
    server, flows.runners.flow_run_settings): the first task run's result was kept alive for the whole run by
    Prefect's events client, which the first task had started, until collect_chunks started it from the flow."""
    import json
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(root))
    env.pop("PREFECT_API_URL", None)
    out = subprocess.run(
        [sys.executable, "-c", _WITHOUT_HEARTBEATS, str(tmp_path)],
        capture_output=True, text=True, env=env, cwd=root, timeout=240,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [0] * 6


@pytest.mark.slow  # one calibration sweep of two cells
def test_calibration_sweep_progress_reaches_every_cell(write_spec, tmp_path, capsys):
    """The calibration sweep collects its chunks with the same loop: its bar reaches every cell."""
    from flows.calibration_sweep import calibration_sweep

    spec = write_spec(
        "name: calp\ngrid: {sampling_rate: [0.02, 1.0], steps: [10]}\ntarget: {advantage: 0.1}\nchunk_size: 1\n"
    )
    run = calibration_sweep.with_options(task_runner=make_task_runner("thread", max_workers=2))
    summary = run(spec_path=str(spec), lake=str(tmp_path / "lake"), report=str(tmp_path / "r.duckdb"), progress=True)
    assert (summary.cells, summary.cells_computed, summary.chunks_failed) == (2, 2, 0)
    assert "2/2 cells" in capsys.readouterr().err
    assert len(list((tmp_path / "lake" / "calibrations").rglob("chunk-*.parquet"))) == 2


def test_work_that_can_wait_runs_only_when_no_finished_chunk_waits(tmp_path):
    """``when_idle`` (a sweep compacts each chunk for the report there) never delays writing another finished chunk:
    while the first write takes a second, every other chunk finishes, so it is skipped for those that still had a
    chunk waiting behind them, runs for the last one collected, and never for a chunk that failed."""
    import time

    CALLS.clear()
    lake = tmp_path / "lake"
    chunks = [_Chunk(f"ok{i}", 1) for i in range(4)] + [_Chunk("short", 2)]
    written: list[str] = []
    idle: list[str] = []
    write = _writer(lake, tmp_path / "sink")

    def slow_write(chunk: _Chunk, result: object) -> dict[str, str]:
        if not written:
            time.sleep(1.0)  # the other tasks finish meanwhile: they wait in the queue
        written.append(chunk.key)
        return write(chunk, result)

    @flow(task_runner=make_task_runner("thread", max_workers=5))
    def run() -> tuple[list[dict[str, str]], list[str]]:
        return collect_chunks(
            _fake_chunk,
            chunks,
            str(lake),
            write=slow_write,
            expected_path=_own,
            path_of=lambda m: m["path"],
            bar=ProgressBar(6, stream=io.StringIO()),
            when_idle=lambda m: idle.append(m["path"]),
        )

    manifests, failures = run()
    assert len(manifests) == 4 and len(failures) == 1
    persisted = {m["path"] for m in manifests}
    assert set(idle) <= persisted and _own(_Chunk("short", 2)) not in idle
    assert _own(_Chunk(written[0], 1)) not in idle  # four finished chunks were waiting behind the first
    last_ok = [k for k in written if k != "short"][-1]
    if written[-1] != "short":  # the last chunk collected had nothing behind it
        assert idle[-1] == _own(_Chunk(last_ok, 1))
