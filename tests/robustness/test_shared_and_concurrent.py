"""Shared reports are data, concurrent writers are serialised, faults heal.

4 a crafted report cannot read other files or write a card outside ``--out``; ``gdp sql`` has time and memory
limits; 5 one publisher per lake and one sweep per spec, with a dead holder's lock released at once; 6 a truncated
chunk is quarantined and recomputed, and the snapshot id sees it; 7 the Prefect server watchdog acts from the first
second; 10 an empty registry is an error unless intended; 11 unwritable folders fail fast, naming the folder.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gdpcore
from flows.cli import main
from tasks.evaluate import EvalSettings, build_plan
from tasks.lake import write_members
from tasks.locks import LockTimeout, lake_lock, publish_lock, spec_lock
from tasks.publish import publish_lake, query_report
from tasks.snapshots import snapshot_id as _snapshot_id
from tests.robustness.conftest import wait_for
from tests.robustness.test_readers import _lake


@pytest.fixture
def lake_and_report(tmp_path):
    lake, spec, ids = _lake(tmp_path)
    write_members(lake, "rv", spec.spec_hash, ids, EvalSettings.from_spec(spec).eval_key)
    report = tmp_path / "reports" / "r.duckdb"
    publish_lake(lake, report)
    return lake, report, spec, ids


def _craft(report: Path, crafted: Path, statements: list[str]) -> Path:
    """A copy of ``report`` with extra statements run on it (what someone sharing a report file could do). Keep it in
    the report's folder: the views name the lake relative to it (a report travels together with its lake)."""
    import duckdb

    shutil.copy(report, crafted)
    con = duckdb.connect(str(crafted))
    try:
        for st in statements:
            con.execute(st)
    finally:
        con.close()
    return crafted


# -- 4: a report is data, not code ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "source",
    ["read_text('/proc/self/environ')", "read_csv('/etc/passwd')", "read_text('{repo}/README.md')", "glob('/*')"],
)
def test_a_crafted_view_cannot_read_other_files(lake_and_report, tmp_path, source):
    _, report, _, _ = lake_and_report
    source = source.format(repo=Path(__file__).resolve().parents[2])
    crafted = _craft(report, report.parent / "crafted.duckdb", [f"CREATE VIEW leak AS SELECT * FROM {source}"])
    with pytest.raises(ValueError, match="Permission Error"):
        query_report(crafted, "SELECT * FROM leak")
    assert query_report(crafted, "SELECT count(*) FROM cells")[1] == [(12,)]  # the lake's own views still work


@pytest.mark.subprocess  # `gdp sql` runs the query in a child process
def test_gdp_sql_cannot_read_local_files(lake_and_report, capsys):
    _, report, _, _ = lake_and_report
    for sql in ("SELECT * FROM read_csv('/etc/passwd')", "SELECT * FROM read_text('/proc/self/environ')"):
        assert main(["sql", sql, "--report", str(report)]) == 2
        err = capsys.readouterr().err
        assert "Permission Error" in err and "root:" not in err


@pytest.mark.parametrize("fmt", ["duckdb", "parquet"])
@pytest.mark.parametrize("source", ["read_text('{secret}')", "read_csv('{secret}')", "read_text('/proc/self/environ')"])
def test_gdp_export_of_a_crafted_report_reads_no_other_file(lake_and_report, tmp_path, capsys, source, fmt):
    """`gdp export` opens the report confined like `gdp sql`: a view naming a file outside the report's lake fails,
    exit 2 with one line, and nothing is written (the export is not created, no temporary is left)."""
    _, report, _, _ = lake_and_report
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET-h3\n")
    source = source.format(secret=secret)
    crafted = _craft(report, report.parent / "crafted.duckdb", [f"CREATE VIEW leak AS SELECT * FROM {source}"])
    out = tmp_path / "exports" / "out.duckdb"
    before = sorted(p for p in tmp_path.rglob("*") if p != secret)
    assert main(["export", str(out), "--report", str(crafted), "--format", fmt]) == 2
    captured = capsys.readouterr()
    assert "Permission Error" in captured.err and "'leak'" in captured.err
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err
    assert "TOPSECRET" not in captured.out + captured.err and "PATH=" not in captured.err
    assert not out.exists()
    assert sorted(p for p in tmp_path.rglob("*") if p != secret and p != out.parent) == before
    assert not any(out.parent.iterdir())  # no temporary of the export left behind


def test_gdp_export_is_confined_like_gdp_sql(lake_and_report, tmp_path):
    """The legitimate export still reads the report's lake and writes the self-contained file."""
    _, report, _, _ = lake_and_report
    out = tmp_path / "exports" / "ok.duckdb"
    assert main(["export", str(out), "--report", str(report)]) == 0
    assert query_report(out, "SELECT count(*) FROM cells")[1] == [(12,)]


def test_gdp_sql_settings_are_confined_and_locked(lake_and_report):
    _, report, _, _ = lake_and_report
    sql = (
        "SELECT current_setting('enable_external_access'), current_setting('lock_configuration'), "
        "current_setting('threads'), current_setting('autoinstall_known_extensions')"
    )
    assert query_report(report, sql, threads=1)[1] == [(False, True, 1, False)]


@pytest.mark.subprocess  # `gdp sql` runs the query in a child process
def test_gdp_sql_time_limit(lake_and_report, capsys):
    _, report, _, _ = lake_and_report
    slow = "SELECT sum(hash(a.range * b.range)) FROM range(200000) a, range(200000) b"
    started = time.perf_counter()
    assert main(["sql", slow, "--report", str(report), "--timeout", "0.5"]) == 2
    assert time.perf_counter() - started < 10
    assert "interrupted after the 0.5 s time limit" in capsys.readouterr().err


@pytest.mark.subprocess  # `gdp sql` runs the query in a child process
def test_gdp_sql_memory_limit(lake_and_report, capsys):
    _, report, _, _ = lake_and_report
    big = "SELECT list(range || repeat('x', 100)) FROM range(2000000)"
    assert main(["sql", big, "--report", str(report), "--memory-limit", "20MB", "--format", "csv"]) == 2
    assert "memory" in capsys.readouterr().err.lower()
    assert main(["sql", "SELECT 1", "--report", str(report), "--memory-limit", "lots"]) == 2
    assert "--memory-limit must look like" in capsys.readouterr().err


def test_gdp_card_of_a_crafted_report_writes_nothing_outside_out(lake_and_report, tmp_path, capsys):
    """report_info.lake points at a crafted lake whose audit row names the model '../../evil'."""
    _, report, _, _ = lake_and_report
    evil_lake = tmp_path / "evil-lake"
    row_path = evil_lake / "registry" / "audits" / "model=x" / "version=1" / "audit-k.parquet"
    row_path.parent.mkdir(parents=True)
    pq.write_table(pa.table({"model": ["../../evil"], "version": [1], "audit_key": ["k"]}), row_path)
    crafted = _craft(
        report,
        tmp_path / "crafted.duckdb",
        [
            "DROP VIEW model_privacy",
            "CREATE TABLE model_privacy AS SELECT 'x' AS model, 1 AS version, 'k' AS audit_key",
            f"UPDATE report_info SET lake = '{evil_lake}'",
        ],
    )
    out = tmp_path / "a" / "b" / "out"
    before = sorted(p for p in tmp_path.rglob("*"))
    assert main(["card", "x:1", "--out", str(out), "--report", str(crafted)]) == 2
    assert "not a model version: '../../evil'" in capsys.readouterr().err
    assert sorted(p for p in tmp_path.rglob("*")) == before


# -- 5: concurrent writers ------------------------------------------------------------------------------------------------
HOLD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from tasks.locks import publish_lock
    with publish_lock(Path(sys.argv[1])):
        print("locked", flush=True)
        time.sleep(600)
    """
)


@pytest.mark.subprocess  # a lock-holder process, SIGKILLed
def test_a_killed_lock_holder_releases_the_lock_at_once(tmp_path):
    lake = tmp_path / "lake"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(lake)], stdout=subprocess.PIPE, env=env, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(LockTimeout, match=rf"publish of {lake}: still locked by host=.* pid={holder.pid} "):
            with publish_lock(lake, timeout=0.5):
                pass
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
        started = time.perf_counter()
        with publish_lock(lake, timeout=5):  # no stale lock to break: the kernel released it with the holder
            assert time.perf_counter() - started < 1.0
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()


def test_spec_locks_are_per_spec(tmp_path):
    lake = tmp_path / "lake"
    waits = []
    with spec_lock(lake, "a"):
        with spec_lock(lake, "b", timeout=0.5):  # another spec: no wait
            pass
        with pytest.raises(LockTimeout, match="sweep of spec a: still locked"):
            with spec_lock(lake, "a", timeout=0.5, on_wait=waits.append):
                pass
    assert waits and waits[0].startswith("sweep of spec a: waiting for host=")
    with pytest.raises(ValueError, match="refusing"):
        with spec_lock(lake, "../x"):
            pass


def test_lock_on_an_unwritable_lake_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ValueError, match="cannot create the lock"):
        with lake_lock(blocker / "lake" / "_locks" / "x.lock", "test"):
            pass


# -- 6: a corrupt chunk heals ---------------------------------------------------------------------------------------------
def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_truncated_chunk_is_quarantined_and_replanned(lake_and_report):
    lake, report, spec, ids = lake_and_report
    assert build_plan(spec, lake).cells_present == 12
    chunks = sorted((lake / "staging").rglob("chunk-*.parquet"))
    rows = pq.read_table(chunks[0], columns=["cell_id"]).column("cell_id").to_pylist()
    _truncate(chunks[0])
    plan = build_plan(spec, lake)
    assert plan.cells_present == 12 - len(rows) and sorted(c for ch in plan.chunks for c in ch.mechanisms) == sorted(
        gdpcore.mechanism_from_dict(c).to_json()
        for c in spec.iter_cells()
        if gdpcore.mechanism_from_dict(c).content_hash in rows
    )
    assert not chunks[0].exists()
    moved = list((lake / "_quarantine").rglob("chunk-*.parquet"))
    assert [p.name for p in moved] == [chunks[0].name]
    assert "unreadable staging chunk" in moved[0].with_name(moved[0].name + ".reason").read_text()


def test_publish_quarantines_a_truncated_chunk_instead_of_failing(lake_and_report):
    """The probe: publishing reused the old snapshot (its id hashed names only), then any later publish failed."""
    lake, report, _, _ = lake_and_report
    before = _snapshot_id(lake)
    chunk = sorted((lake / "staging").rglob("chunk-*.parquet"))[0]
    n_bad = pq.read_metadata(chunk).num_rows
    _truncate(chunk)
    assert _snapshot_id(lake) != before  # size and mtime are part of the id now
    res = publish_lake(lake, report)
    assert not res.reused_snapshot and res.counts["cells"] == 12 - n_bad
    assert not chunk.exists() and len(list((lake / "_quarantine").rglob("chunk-*.parquet"))) == 1
    assert query_report(report, "SELECT count(*) FROM cells")[1] == [(12 - n_bad,)]


def test_truncated_audit_row_is_quarantined_at_publish(lake_and_report):
    lake, report, _, _ = lake_and_report
    bad = lake / "registry" / "audits" / "model=m" / "version=1" / "audit-k.parquet"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"PAR1 truncated")
    publish_lake(lake, report)
    assert not bad.exists() and list((lake / "_quarantine").rglob("audit-k.parquet"))


# -- 7: the Prefect server watchdog acts from the first second ------------------------------------------------------------
PARENT = textwrap.dedent(
    """
    import subprocess, sys, time
    from flows.runners import start_orphan_watchdog
    start_orphan_watchdog()
    # what Prefect does at start-up: spawn `python -m uvicorn ...`, then wait (up to 60 s) for it to answer
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "uvicorn", "--fake"])
    print(child.pid, flush=True)
    time.sleep(300)
    """
)


@pytest.mark.subprocess  # a `gdp` process and its server
def test_server_started_during_startup_dies_with_a_sigkilled_parent(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT], stdout=subprocess.PIPE, env=env, text=True, start_new_session=True
    )
    server = None
    try:
        server = int(parent.stdout.readline())
        time.sleep(0.6)  # well inside Prefect's ~10 s start-up: no server pid was ever reported back
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        wait_for(lambda: not _alive(server), 20, "the orphaned 'uvicorn' child to be stopped by the watchdog")
    finally:
        for pid in (server,):
            if pid and _alive(pid):
                os.kill(pid, signal.SIGKILL)
        parent.kill()
        parent.wait()
        parent.stdout.close()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# -- 10, 11: empty registries and unwritable folders ----------------------------------------------------------------------
def test_empty_registry_is_refused_before_anything_runs(tmp_path, capsys):
    empty = tmp_path / "registry"
    empty.mkdir()
    lake = tmp_path / "lake"
    started = time.perf_counter()
    assert main(["audit", str(empty), "--lake", str(lake), "--report", str(tmp_path / "r.duckdb")]) == 2
    assert time.perf_counter() - started < 5
    assert "has no .yaml/.yml file (not mounted?); nothing was written" in capsys.readouterr().err
    assert not lake.exists()


def test_unwritable_lake_and_prefect_home_fail_fast(tmp_path, capsys, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    started = time.perf_counter()
    assert main(["publish", "--lake", str(blocker / "lake"), "--report", str(tmp_path / "r.duckdb")]) == 2
    # publish reads a lake: one that does not exist (here: under a file) is refused by name before anything is written
    assert f"--lake '{blocker / 'lake'}': no such lake folder" in capsys.readouterr().err
    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\nmechanism: gaussian\ngrid: {noise_multiplier: [1.0]}\n")
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setenv("PREFECT_HOME", str(blocker / "prefect"))
    args = ["sweep", str(spec), "--lake", str(tmp_path / "lake"), "--report", str(tmp_path / "r.duckdb")]
    assert main(args) == 2
    assert "PREFECT_HOME folder" in capsys.readouterr().err
    assert time.perf_counter() - started < 5


def test_full_disk_is_not_retried():
    import errno

    from tasks.evaluate import transient_io_error

    class State:
        def __init__(self, exc):
            self.exc = exc

        def result(self):
            raise self.exc

    assert not transient_io_error(None, None, State(OSError(errno.ENOSPC, "No space left on device")))
    assert not transient_io_error(None, None, State(OSError(errno.EROFS, "Read-only file system")))
    assert transient_io_error(None, None, State(OSError(errno.EIO, "I/O error")))


def test_a_damaged_audit_row_is_quarantined_and_recomputed(tmp_path):
    from flows.privacy_audit import _read_or_quarantine
    from tasks.audit import read_audit

    lake = tmp_path / "lake"
    bad = lake / "registry" / "audits" / "model=m" / "version=1" / "audit-k.parquet"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"PAR1 truncated")
    assert _read_or_quarantine(lake, bad, read_audit) is None  # None: the flow recomputes this model version
    assert not bad.exists() and len(list((lake / "_quarantine").rglob("audit-k.parquet"))) == 1
    assert _read_or_quarantine(lake, bad, read_audit) is None


def test_a_failed_publish_leaves_no_report_temporaries(lake_and_report, monkeypatch):
    """The probe: a publish that failed (full disk) left `.privacy.duckdb.tmp-*` and `.wal` behind."""
    import errno

    import tasks.publish as publish
    from tests.robustness.conftest import temporaries

    lake, report, _, _ = lake_and_report
    before = report.read_bytes()
    real = publish._fill_report

    def full_disk(tmp, *a, **kw):
        real(tmp, *a, **kw)
        Path(str(tmp) + ".wal").write_bytes(b"x")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(publish, "_fill_report", full_disk)
    with pytest.raises(OSError, match="No space"):
        publish_lake(lake, report)
    assert not temporaries(lake, report.parent) and report.read_bytes() == before


def test_chunks_of_specs_sharing_cells_are_written_to_each_specs_own_file(tmp_path):
    """Found by fault injection: two specs sharing cells have chunks of equal content; a Prefect cache hit keyed
    without the spec returned the first spec's file, so the second spec's cells were never written. Chunk tasks are
    not cached (the lake is the cache) and the flow writes each spec's own file from the rows the task returned."""
    from prefect.cache_policies import NO_CACHE

    from tasks.calibrate import CalibrationChunk, calibrate_chunk, chunk_file
    from tasks.evaluate import Chunk, ChunkResult, evaluate_chunk, write_chunk

    settings = EvalSettings((1e-5,), (0.1,), ("gdp",), None, 1e-10, "test")
    mechs = (gdpcore.Gaussian(noise_multiplier=1.0).to_json(),)
    a, b = Chunk("a", "gaussian", mechs, settings), Chunk("b", "gaussian", mechs, settings)
    assert a.key == b.key  # same content: same file name, in each spec's own folder
    assert evaluate_chunk.cache_policy is NO_CACHE and calibrate_chunk.cache_policy is NO_CACHE
    result = evaluate_chunk.fn(a)
    assert isinstance(result, ChunkResult)
    paths = {write_chunk(tmp_path, c, result).path for c in (a, b)}
    assert paths == {f"staging/spec={s}/mechanism=gaussian/chunk-{a.key}.parquet" for s in "ab"}
    assert all((tmp_path / p).is_file() for p in paths)
    ca = CalibrationChunk(spec_name="a", cells=((0.01, 10),), target=(("target_mu", 1.0),), code_version="t")
    cb = CalibrationChunk(spec_name="b", cells=((0.01, 10),), target=(("target_mu", 1.0),), code_version="t")
    assert ca.key == cb.key and chunk_file(tmp_path, "a", ca.key) != chunk_file(tmp_path, "b", cb.key)


@pytest.mark.subprocess  # a pool-worker process
def test_a_pool_worker_whose_flow_died_during_its_start_up_exits(tmp_path):
    """Found by fault injection: a worker reaching its initializer after the flow was SIGKILLed took init for its
    parent and waited forever."""
    code = "from flows.runners import exit_with_parent; import os; exit_with_parent(os.getppid() + 999999); print('x')"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout == ""  # exited in the initializer, before printing


def test_a_symlink_inside_the_reports_lake_is_refused(lake_and_report, tmp_path):
    """DuckDB's allow-list compares paths: a link in a crafted lake must not open the file it points at."""
    lake, report, _, _ = lake_and_report
    snap = next(p for p in (lake / "curated").iterdir() if p.is_dir())
    (snap / "leak.txt").symlink_to("/proc/self/environ")
    crafted = _craft(
        report, report.parent / "crafted.duckdb", [f"CREATE VIEW leak AS SELECT * FROM read_text('{snap}/leak.txt')"]
    )
    with pytest.raises(ValueError, match=r"leak\.txt is a symbolic link"):
        query_report(crafted, "SELECT * FROM leak")
