"""flows.chunks.collect_chunks, the one chunk-collection loop of grid and calibration sweeps: the progress bar counts
every chunk, a failed task is a failure, and a manifest naming another file (or a vanished one) is recomputed."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import pytest
from prefect import flow, task

from flows.chunks import collect_chunks
from flows.progress import ProgressBar
from flows.runners import make_task_runner

pytestmark = pytest.mark.usefixtures("prefect_server")

CALLS: dict[str, int] = {}


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
def _fake_chunk(chunk: _Chunk, lake: str) -> dict[str, str]:
    """'ok' writes its own file; 'other' names another chunk's file on its first call; 'gone' names its own file
    without writing it on its first call; 'bad' raises."""
    CALLS[chunk.key] = CALLS.get(chunk.key, 0) + 1
    if chunk.key == "bad":
        raise RuntimeError("boom")
    first = CALLS[chunk.key] == 1
    if chunk.key == "other" and first:
        return {"path": _own(_Chunk("ok", 1))}
    if not (chunk.key == "gone" and first):
        (Path(lake) / _own(chunk)).write_bytes(b"x")
    return {"path": _own(chunk)}


def test_every_chunk_is_counted_checked_and_stale_ones_recomputed(tmp_path):
    CALLS.clear()
    chunks = [_Chunk("ok", 1), _Chunk("other", 2), _Chunk("gone", 3), _Chunk("bad", 4)]
    stream = io.StringIO()
    bar = ProgressBar(sum(c.size for c in chunks), stream=stream)

    @flow(task_runner=make_task_runner("thread", max_workers=2))
    def run() -> tuple[list[dict[str, str]], list[str]]:
        return collect_chunks(
            _fake_chunk, chunks, str(tmp_path), expected_path=_own, path_of=lambda m: m["path"], bar=bar
        )

    manifests, failures = run()
    assert sorted(m["path"] for m in manifests) == sorted(_own(c) for c in chunks[:3])
    assert len(failures) == 1 and failures[0].startswith("chunk bad:") and "boom" in failures[0]
    assert CALLS == {"ok": 1, "other": 2, "gone": 2, "bad": 1}  # the stale two recomputed once, nothing else
    assert bar.done == bar.total == 10 and "10/10 cells" in stream.getvalue()


@pytest.mark.slow  # one calibration sweep of two cells
def test_calibration_sweep_progress_reaches_every_cell(write_spec, tmp_path, capsys):
    """The calibration sweep collects its chunks with the same loop: its bar reaches every cell, computed or
    recomputed."""
    from flows.calibration_sweep import calibration_sweep

    spec = write_spec(
        "name: calp\ngrid: {sampling_rate: [0.02, 1.0], steps: [10]}\ntarget: {advantage: 0.1}\nchunk_size: 1\n"
    )
    run = calibration_sweep.with_options(task_runner=make_task_runner("thread", max_workers=2))
    summary = run(spec_path=str(spec), lake=str(tmp_path / "lake"), report=str(tmp_path / "r.duckdb"), progress=True)
    assert (summary.cells, summary.cells_computed, summary.chunks_failed) == (2, 2, 0)
    assert "2/2 cells" in capsys.readouterr().err
