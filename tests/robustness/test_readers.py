"""Readers vs publisher: a child process republishes the report in a loop, alternating between two member sets of one
spec, while `gdp sql` processes and in-process readers query it; every read sees one complete, consistent report.
And `gdp sql` refuses the statements that write which tests/pipeline/test_flows.py::test_sql_is_read_only does not
already cover (notably EXPLAIN ANALYZE, which *executes* the statement it explains)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import gdpcore
from flows.cli import main
from tasks.evaluate import Chunk, EvalSettings, compute_chunk_table
from tasks.lake import atomic_write_parquet, chunk_path, write_members
from tasks.publish import publish_lake, query_report
from tasks.spec import GridSpec
from tests.robustness.conftest import BIN, REPO, Proc, base_env, temporaries

CHECK = (
    "SELECT (SELECT count(*) FROM cells) AS c, (SELECT count(DISTINCT cell_id) FROM cells) AS d, "
    "(SELECT count(*) FROM epsilons) AS e, (SELECT string_agg(cell_id, ',' ORDER BY cell_id) FROM cells) AS ids, "
    "(SELECT row_counts::VARCHAR FROM report_info) AS rc, (SELECT snapshot FROM report_info) AS snap"
)


def _lake(tmp_path: Path) -> tuple[Path, GridSpec, list[str]]:
    """A lake with 12 computed Gaussian cells of spec 'rv' (no Prefect: the chunk task's own functions)."""
    spec = GridSpec.model_validate(
        {
            "name": "rv",
            "mechanism": "gaussian",
            "grid": {"noise_multiplier": [0.5 + 0.25 * i for i in range(12)]},
            "deltas": [1e-5, 1e-6],
        }
    )
    settings = EvalSettings.from_spec(spec)
    mechs = [gdpcore.mechanism_from_dict(c) for c in spec.iter_cells()]
    lake = tmp_path / "lake"
    for part in (mechs[:6], mechs[6:]):
        chunk = Chunk("rv", "gaussian", tuple(m.to_json() for m in part), settings)
        atomic_write_parquet(compute_chunk_table(chunk, "run-rv"), chunk_path(lake, "rv", "gaussian", chunk.key), {})
    return lake, spec, [m.content_hash for m in mechs]


PUBLISHER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from tasks.lake import write_members
    from tasks.publish import publish_lake
    lake, report, spec_hash, eval_key, rounds = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
    ids, stop = sys.argv[6].split(","), Path(sys.argv[7])
    i = 0
    # At least `rounds` publishes, then on until the readers have seen enough (the stop file): however fast a publish
    # is on this machine, the `gdp sql` processes (a few seconds each) race several of them.
    while i < rounds or (not stop.exists() and i < 100 * rounds):
        write_members(lake, "rv", spec_hash, ids[:8] if i % 2 else ids, eval_key)  # 12 cells, then 8, then 12 ...
        publish_lake(lake, report)
        print(i, flush=True)
        i += 1
    print("done", i, flush=True)
    """
)


def _consistent(row: dict, all_ids: list[str]) -> int:
    c = row["c"]
    assert c in (8, 12), row
    assert row["d"] == c and row["e"] == 2 * c, row  # one row per cell, two epsilons each
    assert row["ids"] == ",".join(sorted(all_ids if c == 12 else all_ids[:8])), row  # exactly one member set
    assert json.loads(row["rc"])["cells"] == c, row  # report_info describes the snapshot the views read
    return c


@pytest.mark.slow
@pytest.mark.subprocess  # reader processes beside a publisher
def test_readers_always_see_a_complete_report_while_publishing(tmp_path):
    lake, spec, ids = _lake(tmp_path)
    report = tmp_path / "reports" / "r.duckdb"
    settings = EvalSettings.from_spec(spec)
    write_members(lake, "rv", spec.spec_hash, ids, settings.eval_key)
    publish_lake(lake, report)
    rounds = 16
    stop = tmp_path / "stop-publishing"
    pub = Proc(
        [
            sys.executable,
            "-c",
            PUBLISHER,
            str(lake),
            str(report),
            spec.spec_hash,
            settings.eval_key,
            str(rounds),
            ",".join(ids),
            str(stop),
        ],
        tmp_path / "publisher.log",
        base_env(tmp_path / "ph"),
    )
    seen: list[tuple[str, int]] = []
    errors: list[BaseException] = []

    def in_process_reader() -> None:
        try:
            while pub.alive():
                cols, rows = query_report(report, CHECK)
                row = dict(zip(cols, rows[0], strict=True))
                seen.append((row["snap"], _consistent(row, ids)))
        except BaseException as exc:
            errors.append(exc)

    # Two overlapping in-process readers: each must still see new publishes (no shared, stale DuckDB instance).
    readers = [threading.Thread(target=in_process_reader) for _ in range(2)]
    cli_reads = 0
    started = time.monotonic()
    try:
        for t in readers:
            t.start()
        while pub.alive() and time.monotonic() - started < 120:
            out = subprocess.run(
                [str(BIN / "gdp"), "sql", CHECK, "--report", str(report), "--format", "json"],
                cwd=REPO,
                env=base_env(tmp_path / "ph"),
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert out.returncode == 0, out.stderr
            row = json.loads(out.stdout)[0]
            row["rc"] = row["rc"] if isinstance(row["rc"], str) else json.dumps(row["rc"])
            _consistent(row, ids)
            cli_reads += 1
            if cli_reads >= 2 and len(seen) >= 20 and {c for _, c in seen} == {8, 12}:
                stop.touch()  # enough reads of both versions: the publisher ends after its current round
        assert pub.popen.wait(timeout=120) == 0, pub.log()[-3000:]
    finally:
        pub.stop()
        for t in readers:
            t.join(timeout=60)
    assert not errors, errors[0]
    last = pub.log().split()
    assert last[-2] == "done" and int(last[-1]) >= rounds  # every publish round finished
    assert cli_reads >= 2 and len(seen) >= 20, (cli_reads, len(seen))
    assert {c for _, c in seen} == {8, 12}  # the readers really raced both versions of the report (and saw them)
    assert not temporaries(report.parent)
    print(
        f"{last[-1]} publishes in {time.monotonic() - started:.1f} s; {len(seen)} in-process reads over "
        f"{len({s for s, _ in seen})} snapshots, {cli_reads} `gdp sql` reads: all consistent"
    )


WRITES = [
    "EXPLAIN ANALYZE COPY (SELECT 1) TO '{target}'",
    "explain analyse COPY (SELECT 1) TO '{target}'",
    "/* c */ EXPLAIN /* d */ ANALYZE COPY (SELECT 1) TO '{target}'",
    "EXPLAIN ANALYZE EXPORT DATABASE '{target}'",
    "EXPLAIN ANALYZE CREATE TABLE t AS SELECT 1",
    "EXPLAIN (ANALYZE) COPY (SELECT 1) TO '{target}'",
    "SET enable_external_access = true",
    "PRAGMA enable_profiling",
    "CALL pragma_version()",
    "CHECKPOINT",
    "INSTALL httpfs",
    "LOAD httpfs",
    "EXPORT DATABASE '{target}'",
    "DETACH r",
    "USE memory",
    "CREATE SECRET s (TYPE s3, KEY_ID 'x', SECRET 'y')",
    "SELECT 1; COPY (SELECT 1) TO '{target}'",
]


@pytest.fixture(scope="module")
def small_report(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("ro")
    lake, spec, ids = _lake(tmp)
    write_members(lake, "rv", spec.spec_hash, ids, EvalSettings.from_spec(spec).eval_key)
    report = tmp / "reports" / "r.duckdb"
    publish_lake(lake, report)
    return report


@pytest.mark.parametrize("sql", WRITES)
def test_gdp_sql_refuses_statements_that_write(small_report, tmp_path, capsys, sql):
    target = tmp_path / "stolen.csv"
    before = small_report.read_bytes()
    assert main(["sql", sql.format(target=target), "--report", str(small_report)]) == 2
    assert "error" in capsys.readouterr().err
    assert not target.exists() and small_report.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "sql",
    [
        "EXPLAIN SELECT * FROM cells",
        "EXPLAIN ANALYZE SELECT count(*) FROM cells",
        "  select count(*) from cells;  ",
        "WITH a AS (SELECT 1 AS x) SELECT x FROM a",
        "DESCRIBE cells",
        "SUMMARIZE cells",
        "FROM cells LIMIT 1",
    ],
)
@pytest.mark.subprocess  # `gdp sql` runs the query in a child process
def test_gdp_sql_still_answers_read_only_queries(small_report, capsys, sql):
    assert main(["sql", sql, "--report", str(small_report), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)
