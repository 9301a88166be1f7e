"""A real Dask cluster (`dask scheduler` + 2 `dask worker` processes on 127.0.0.1) and a real `prefect server`:
cluster rows equal a local run's, the workers report task runs to the server, and losing a worker mid-sweep loses and
duplicates nothing - also when the workers cannot see the lake's folder at all."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

import gdpcore
from tasks.publish import query_report
from tasks.spec import load_grid_spec
from tests.robustness.conftest import (
    BIN,
    REPO,
    DaskCluster,
    Proc,
    base_env,
    gdp,
    lake_cells,
    temporaries,
    wait_for,
    write_spec,
)

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


def _busy_worker(client, flow: Proc, lake: Path, spec: str) -> str | None:
    """The name of a worker busy with a chunk once the first chunk of ``spec`` is in the lake, else None. A worker
    the scheduler lists as processing but no longer (or not yet) among its workers - the two calls are not one
    snapshot, and a loaded scheduler stalls between them - is not a candidate."""
    if not flow.alive():
        pytest.fail("sweep ended before a worker could be killed:\n" + flow.log()[-3000:])
    processing = client.processing()
    names = {a: w["name"] for a, w in client.scheduler_info(n_workers=-1)["workers"].items()}
    busy = [names[a] for a, tasks in processing.items() if tasks and a in names]
    return busy[0] if lake_cells(lake, spec) and busy else None


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
            victim_name = wait_for(
                lambda: _busy_worker(client, flow, lake, "workerloss"),
                180,
                "a worker busy with a chunk after the first chunk landed",
                0.05,
            )
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


def _hiding_prefix(hidden: Path) -> list[str]:
    """A command prefix that runs a worker in its own user + mount namespace with an empty tmpfs mounted over
    ``hidden`` (``unshare``, util-linux): the worker's view of the filesystem has no ``hidden`` folder contents at all.
    ``[]`` when this kernel refuses unprivileged namespaces (the probe must see ``hidden``'s files vanish)."""
    prefix = [
        "unshare",
        "--user",
        "--map-root-user",
        "--mount",
        "--",
        "sh",
        "-c",
        'mount -t tmpfs gdp-hidden "$0" && exec "$@"',
        str(hidden),
    ]
    try:
        probe = subprocess.run([*prefix, "ls", "-A", str(hidden)], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return prefix if probe.returncode == 0 and probe.stdout.strip() == "" else []


def test_workers_that_cannot_see_the_lake_lose_and_duplicate_nothing(tmp_path, prefect_api):
    """The sweep of a cluster whose workers share no disk with the flow: every cell once in the report, after one
    worker is SIGKILLed mid-sweep, and a resume that computes nothing.

    How the workers are kept from the lake: the flow runs in ``flow/`` with a *relative* ``--lake lake`` and
    ``--report reports/r.duckdb`` (resolved against the flow's working directory only), and every ``dask worker`` is
    started with its own working directory and HOME under ``dask/home-<name>``, inside its own user + mount namespace
    (``unshare --user --map-root-user --mount``) with an empty tmpfs mounted over ``flow/``: neither the relative nor
    the absolute path of the lake (nor the spec) exists for a worker, which the test checks on every worker through
    ``Client.run`` before the sweep. (On a kernel without unprivileged namespaces only the working-directory
    separation applies; the test says which in its output.) Before the flow wrote the lake, this setup published a
    report without the cells the workers computed."""
    import duckdb
    from distributed import Client

    flow_dir, root = tmp_path / "flow", tmp_path / "dask"
    flow_dir.mkdir()
    root.mkdir()
    spec = write_spec(flow_dir / "w.yaml", "noshare", [0.7, 1.0], [500, 1000, 2000, 4000], chunk=2)
    prefix = _hiding_prefix(flow_dir)
    env = base_env(Path(prefect_api["home"]), prefect_api["url"])
    worker_env = {**env, "PREFECT_LOGGING_LEVEL": "INFO"}

    def home(name: str) -> Path:
        (root / f"home-{name}").mkdir(exist_ok=True)
        return root / f"home-{name}"

    cluster = DaskCluster(root, worker_env, worker_prefix=prefix, worker_home=home)
    args = ["sweep", str(spec), "--runner", "dask", "--dask-address", cluster.address, "--lake", "lake"]
    args += ["--report", "reports/r.duckdb", "--no-progress"]
    lake, report = flow_dir / "lake", flow_dir / "reports" / "r.duckdb"
    flow = None
    try:
        cluster.wait_workers(2)
        with Client(cluster.address, timeout=30) as client:
            assert not any(client.run(os.path.exists, "w.yaml").values())  # the flow's relative paths
            assert set(client.run(os.getcwd).values()) == {str(home(w.name)) for w in cluster.workers}
            if prefix:  # nor the absolute ones
                assert not any(client.run(os.path.exists, str(spec)).values())
            flow = Proc([str(BIN / "gdp"), *args], tmp_path / "flow.log", env, flow_dir)

            victim_name = wait_for(
                lambda: _busy_worker(client, flow, lake, "noshare"),
                180,
                "a worker busy with a chunk after the first chunk landed",
                0.05,
            )
            cells_before = len(lake_cells(lake, "noshare"))
            next(w for w in cluster.workers if w.name == victim_name).kill(signal.SIGKILL)
            wait_for(lambda: cluster.n_workers() == 1, 60, "the scheduler to notice the dead worker")
        rc = flow.popen.wait(timeout=300)
        assert rc == 0, flow.log()[-4000:]
        again = subprocess.run(
            [str(BIN / "gdp"), *args], env=env, cwd=flow_dir, capture_output=True, text=True, timeout=240
        )
        assert again.returncode == 0, again.stderr[-3000:]
        assert "16 cells (0 computed, 16 already in the lake)" in again.stdout, again.stdout
        survivor = next(w for w in cluster.workers if w.name != victim_name)
        assert "Finished in state Completed()" in survivor.log()  # the chunks ran on the workers
    finally:
        if flow is not None:
            flow.stop()
        cluster.stop()
    expected = sorted(_spec_cells(spec))
    assert cells_before < len(expected)  # the kill really happened mid-sweep
    assert sorted(lake_cells(lake, "noshare")) == expected  # every cell in the lake, exactly once
    con = duckdb.connect(str(report), read_only=True)
    try:
        con.execute(f"SET file_search_path = '{report.parent}'")
        got = con.execute("SELECT cell_id, status FROM cells WHERE spec = 'noshare' ORDER BY cell_id").fetchall()
    finally:
        con.close()
    assert [c for c, _ in got] == expected and {s for _, s in got} == {"ok"}
    assert not any((root / f"home-{w.name}" / "lake").exists() for w in cluster.workers)  # no worker wrote a lake
    assert not temporaries(lake, report.parent)
    print(f"workers hidden from the lake by {'a mount namespace and ' if prefix else ''}their own working directory")
