"""A real Dask cluster (`dask scheduler` + 2 `dask worker` processes on 127.0.0.1) and a real `prefect server`:
cluster rows equal a local run's, the workers report task runs to the server, and losing a worker mid-sweep loses and
duplicates nothing."""

from __future__ import annotations

import json
import signal
import time
import urllib.request
from pathlib import Path

import pytest

import gdpcore
from tasks.publish import query_report
from tasks.spec import load_grid_spec
from tests.robustness.conftest import BIN, REPO, Proc, base_env, gdp, lake_cells, temporaries, wait_for, write_spec

pytestmark = pytest.mark.slow

COLS = (
    "cell_id, noise_multiplier, sampling_rate, steps, mu, gdp_regret, advantage, bayes_security, status, "
    "accountant, discretization"
)


def _spec_cells(spec: Path) -> list[str]:
    return [gdpcore.mechanism_from_dict(c).content_hash for c in load_grid_spec(spec).iter_cells()]


def _api(url: str, path: str, body: dict) -> list[dict]:
    req = urllib.request.Request(
        url + path, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def _same_views(a: Path, b: Path) -> None:
    for view, select in (("cells", COLS), ("epsilons", "cell_id, delta, epsilon"), ("curves", "cell_id, fpr, fnr")):
        sql = f"SELECT {select} FROM {view} ORDER BY ALL"
        assert query_report(a, sql) == query_report(b, sql), view


def test_sweep_on_dask_cluster_equals_local_run(tmp_path, dask_cluster, prefect_api):
    # One cell per chunk: 12 tasks, so both workers get some even when one starts late on a loaded machine.
    spec = write_spec(tmp_path / "c.yaml", "cluster", [0.8, 1.2, 2.0], [50, 200], chunk=1)
    env = base_env(Path(prefect_api["home"]), prefect_api["url"])
    started = time.monotonic()
    out = gdp(
        [
            "sweep",
            str(spec),
            "--runner",
            "dask",
            "--dask-address",
            dask_cluster.address,
            "--lake",
            str(tmp_path / "lake_d"),
            "--report",
            str(tmp_path / "d.duckdb"),
            "--no-progress",
        ],
        env,
    )
    cluster_s = time.monotonic() - started
    assert out.returncode == 0, out.stderr[-3000:]
    assert "12 cells (12 computed, 0 already in the lake), 12 chunk(s) computed, 0 failed" in out.stdout
    local = gdp(
        [
            "sweep",
            str(spec),
            "--runner",
            "thread",
            "--workers",
            "2",
            "--lake",
            str(tmp_path / "lake_t"),
            "--report",
            str(tmp_path / "t.duckdb"),
            "--no-progress",
        ],
        env,
    )
    assert local.returncode == 0, local.stderr[-3000:]
    _same_views(tmp_path / "d.duckdb", tmp_path / "t.duckdb")
    assert sorted(r[0] for r in query_report(tmp_path / "d.duckdb", "SELECT cell_id FROM cells")[1]) == sorted(
        _spec_cells(spec)
    )

    # Both workers ran chunks, and reported them to the real server (no private ephemeral server per worker).
    logs = [w.log() for w in dask_cluster.workers]
    assert all("Starting temporary server" not in log for log in logs), logs
    assert all("Finished in state Completed()" in log for log in logs), "a worker ran no chunk"
    (run_id,) = [r[0] for r in query_report(tmp_path / "d.duckdb", "SELECT run_id FROM runs")[1]]

    def chunk_runs():  # task-run events reach the server asynchronously
        runs = _api(prefect_api["url"], "/task_runs/filter", {"flow_runs": {"id": {"any_": [run_id]}}})
        done = [r for r in runs if r["name"].startswith("evaluate cluster/") and r["state_type"] == "COMPLETED"]
        return done if len(done) == 12 else None

    wait_for(chunk_runs, 60, "12 completed evaluate-chunk task runs on the Prefect server", 0.5)
    runner = query_report(tmp_path / "d.duckdb", "SELECT task_runner FROM runs")[1][0][0]
    assert runner == f"dask@{dask_cluster.address}"
    print(f"cluster sweep of 12 cells: {cluster_s:.1f} s")


def test_worker_loss_mid_sweep_loses_and_duplicates_nothing(tmp_path, dask_cluster, prefect_api):
    from distributed import Client

    # 16 cells in 8 chunks of ~1 s each, so the killed worker is in the middle of one.
    spec = write_spec(tmp_path / "w.yaml", "workerloss", [0.7, 1.0], [500, 1000, 2000, 4000], chunk=2)
    lake, report = tmp_path / "lake", tmp_path / "r.duckdb"
    env = base_env(Path(prefect_api["home"]), prefect_api["url"])
    flow = Proc(
        [
            str(BIN / "gdp"),
            "sweep",
            str(spec),
            "--runner",
            "dask",
            "--dask-address",
            dask_cluster.address,
            "--lake",
            str(lake),
            "--report",
            str(report),
            "--no-progress",
        ],
        tmp_path / "flow.log",
        env,
        REPO,
    )
    try:
        with Client(dask_cluster.address, timeout=30) as client:

            def busy_worker():
                if not flow.alive():
                    pytest.fail("sweep ended before a worker could be killed:\n" + flow.log()[-3000:])
                processing = client.processing()
                names = {a: w["name"] for a, w in client.scheduler_info(n_workers=-1)["workers"].items()}
                done = lake_cells(lake, "workerloss")
                busy = [names[a] for a, tasks in processing.items() if tasks]
                return busy[0] if done and busy else None

            victim_name = wait_for(busy_worker, 180, "a worker busy with a chunk after the first chunk landed", 0.05)
            victim = next(w for w in dask_cluster.workers if w.name == victim_name)
            cells_before = len(lake_cells(lake, "workerloss"))
            victim.kill(signal.SIGKILL)
            wait_for(lambda: dask_cluster.n_workers() == 1, 60, "the scheduler to notice the dead worker")
        rc = flow.popen.wait(timeout=300)
        assert rc == 0, flow.log()[-4000:]
    finally:
        flow.stop()
    expected = _spec_cells(spec)
    assert cells_before < len(expected)  # the kill really happened mid-sweep
    got = lake_cells(lake, "workerloss")
    assert sorted(got) == sorted(expected)  # every cell, exactly once
    cells = [r[0] for r in query_report(report, "SELECT cell_id FROM cells WHERE spec = 'workerloss'")[1]]
    assert sorted(cells) == sorted(expected)
    assert query_report(report, "SELECT count(*) FROM cells WHERE status <> 'ok'")[1] == [(0,)]
    assert not temporaries(lake, report.parent)
