"""SIGKILL the flow process (`gdp sweep`) at random points - between chunks or while publishing - then re-run the same
spec: the re-run computes exactly the cells the killed run did not finish, leaves finished chunk files untouched,
and the published report holds every cell exactly once with no temporary file left anywhere."""

from __future__ import annotations

import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import gdpcore
from tasks.publish import publish_lake, query_report
from tasks.spec import load_grid_spec
from tests.robustness.conftest import (
    BIN,
    REPO,
    Proc,
    base_env,
    gdp,
    group_members,
    lake_cells,
    temporaries,
    wait_for,
    write_spec,
)

SPEC_NAME = "killed"
N_CELLS, N_CHUNKS = 16, 8


def _staging(lake: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in (lake / "staging").rglob("chunk-*.parquet")}


def _kill_point(rng: random.Random, trial: int) -> tuple[str, int, float]:
    """(what to wait for, how many, extra random delay): after k finished chunks, or once the run record is written
    (the flow is then publishing)."""
    if trial == 0:
        return "chunks", 0, rng.uniform(0.0, 1.0)  # early: planning or the first chunks
    if trial == 1:
        return "publishing", 1, rng.uniform(0.0, 0.4)
    return "chunks", rng.randint(1, N_CHUNKS - 2), rng.uniform(0.0, 0.3)


@pytest.mark.slow
@pytest.mark.parametrize("trial", range(4))
def test_sigkill_then_rerun_completes_exactly_once(tmp_path, prefect_api, trial):
    rng = random.Random(8000 + trial)
    spec = write_spec(tmp_path / "k.yaml", SPEC_NAME, [0.7, 1.0], [300, 1000, 2000, 3000], chunk=2)
    expected = sorted(gdpcore.mechanism_from_dict(c).content_hash for c in load_grid_spec(spec).iter_cells())
    assert len(expected) == N_CELLS
    lake, report = tmp_path / "lake", tmp_path / "reports" / "r.duckdb"
    env = base_env(Path(prefect_api["home"]), prefect_api["url"])
    args = [
        "sweep",
        str(spec),
        "--runner",
        "thread",
        "--workers",
        "2",
        "--lake",
        str(lake),
        "--report",
        str(report),
        "--no-progress",
    ]
    what, k, delay = _kill_point(rng, trial)
    flow = Proc([str(BIN / "gdp"), *args], tmp_path / "killed.log", env, REPO)
    try:
        if what == "chunks":
            wait_for(lambda: len(_staging(lake)) >= k or not flow.alive(), 180, f"{k} finished chunks", 0.01)
        else:
            wait_for(
                lambda: any((lake / "runs").rglob("run-*.parquet")) or not flow.alive(),
                180,
                "the run record (publishing starts)",
                0.01,
            )
        time.sleep(delay)  # the random part of the kill point, not a synchronisation
        assert flow.alive(), "the flow finished before the kill point:\n" + flow.log()[-2000:]
        flow.kill(signal.SIGKILL)
        assert flow.popen.wait(timeout=30) == -signal.SIGKILL
    finally:
        flow.stop()

    survived = _staging(lake)
    done_before = len(lake_cells(lake, SPEC_NAME))
    again = gdp(args, env)
    assert again.returncode == 0, again.stderr[-3000:]
    m = re.search(r"(\d+) cells \((\d+) computed, (\d+) already in the lake\)", again.stdout)
    assert m, again.stdout
    total, computed, reused = map(int, m.groups())
    assert (total, computed, reused) == (N_CELLS, N_CELLS - done_before, done_before)  # no finished chunk recomputed
    after = _staging(lake)
    assert {n: t for n, t in after.items() if n in survived} == survived  # finished chunk files untouched
    assert sorted(lake_cells(lake, SPEC_NAME)) == expected  # every cell in the lake exactly once
    cells = sorted(r[0] for r in query_report(report, f"SELECT cell_id FROM cells WHERE spec = '{SPEC_NAME}'")[1])
    assert cells == expected
    assert query_report(report, "SELECT count(*), count(DISTINCT cell_id) FROM epsilons")[1] == [(2 * N_CELLS, N_CELLS)]
    assert not temporaries(lake, report.parent), temporaries(lake, report.parent)
    print(
        f"trial {trial}: killed at {what} k={k} (+{delay:.2f} s) with {done_before}/{N_CELLS} cells done; "
        f"re-run computed {computed}"
    )


@pytest.mark.subprocess  # a writer process, SIGKILLed
def test_leftovers_of_a_killed_writer_are_never_read_and_are_removed(tmp_path):
    """What SIGKILL leaves mid-write (a `.name.tmp-<uuid>` next to each atomic target) is never read by a publish (the
    report's counts come only from complete files) and is removed by the cleanup a sweep runs before publishing."""
    from tasks.evaluate import Chunk, EvalSettings, compute_chunk_table
    from tasks.lake import atomic_write_parquet, chunk_path, remove_spec_temporaries, write_members
    from tasks.spec import GridSpec

    spec = GridSpec.model_validate(
        {"name": "left", "mechanism": "gaussian", "grid": {"noise_multiplier": [1.0, 2.0]}, "deltas": [1e-5]}
    )
    settings = EvalSettings.from_spec(spec)
    mechs = tuple(gdpcore.mechanism_from_dict(c).to_json() for c in spec.iter_cells())
    chunk = Chunk("left", "gaussian", mechs, settings)
    lake, report = tmp_path / "lake", tmp_path / "reports" / "r.duckdb"
    table = compute_chunk_table(chunk, "run-1")
    path = chunk_path(lake, "left", "gaussian", chunk.key)
    atomic_write_parquet(table, path, {})
    write_members(
        lake,
        "left",
        spec.spec_hash,
        [gdpcore.mechanism_from_dict(c).content_hash for c in spec.iter_cells()],
        settings.eval_key,
    )
    publish_lake(lake, report)
    # leftovers of writers killed half-way (a chunk, the members file, a run record, a report): their names carry
    # the host and the pid of a writer that is gone; a live writer's temporary (pid alive) must survive
    from tasks.lake import _HOST_TAG

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        half = pq.ParquetFile(path).read().slice(0, 1)

        def tmp(p: Path, pid: int, n: int) -> Path:
            return p.with_name(f".{p.name}.tmp-{_HOST_TAG}-{pid}-{n:04x}")

        leftovers = [
            tmp(path, dead.pid, 1),
            tmp(lake / "members" / "spec=left" / "members.parquet", dead.pid, 2),
            tmp(lake / "runs" / "spec=left" / "run-x.parquet", dead.pid, 3),
            tmp(report, dead.pid, 4),
            tmp(report, dead.pid, 5).with_name(tmp(report, dead.pid, 5).name + ".wal"),
        ]
        in_flight = [tmp(path, live.pid, 6), tmp(report, live.pid, 7)]
        for p in leftovers + in_flight:
            p.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(half, p)
        res = publish_lake(lake, report)
        assert res.counts["cells"] == 2 and res.counts["epsilons"] == 2
        assert temporaries(lake, report.parent) == sorted(in_flight)  # the dead writers' went with the publish
        assert remove_spec_temporaries(lake, "left", report) == 0
        assert temporaries(lake, report.parent) == sorted(in_flight)
    finally:
        live.kill()
        live.wait()
    assert remove_spec_temporaries(lake, "left", report) == 2  # their writer is gone now
    assert not temporaries(lake, report.parent), temporaries(lake, report.parent)


@pytest.mark.slow
@pytest.mark.parametrize("runner", ["process", "thread"])
@pytest.mark.subprocess  # a `gdp` process and its ephemeral server
def test_sigkilled_flow_leaves_no_orphan_processes(tmp_path, runner):
    """Without PREFECT_API_URL the CLI starts an ephemeral Prefect server (and, for --runner process, a pool of
    workers). SIGKILL runs no atexit hook: a watchdog stops the server and the pool workers exit with their parent,
    so nothing of the killed run's process group survives."""
    spec = write_spec(tmp_path / "o.yaml", "orphans", [0.7, 1.0], [300, 1000, 2000, 3000], chunk=2)
    lake = tmp_path / "lake"
    env = base_env(tmp_path / "prefect-home")  # no PREFECT_API_URL: the ephemeral server
    flow = Proc(
        [
            str(BIN / "gdp"),
            "sweep",
            str(spec),
            "--runner",
            runner,
            "--workers",
            "2",
            "--lake",
            str(lake),
            "--report",
            str(tmp_path / "r.duckdb"),
            "--no-progress",
        ],
        tmp_path / "flow.log",
        env,
        REPO,
    )
    try:
        wait_for(lambda: _staging(lake) or not flow.alive(), 240, "the first finished chunk", 0.05)
        assert flow.alive(), flow.log()[-2000:]
        helpers = [p for p in group_members(flow.pid) if p != flow.pid]
        assert len(helpers) >= (4 if runner == "process" else 2), helpers  # server + watchdog (+ pool workers)
        flow.kill(signal.SIGKILL)
        assert flow.popen.wait(timeout=30) == -signal.SIGKILL
        wait_for(lambda: not group_members(flow.pid), 30, "the killed run's server and workers to exit", 0.2)
    finally:
        flow.stop()
