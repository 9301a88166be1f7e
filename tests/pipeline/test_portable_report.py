"""The report travels: a report copied with its lake to another folder answers queries, an exported file
answers them on its own, the oldest duckdb the pin allows opens both, and every column is documented once
(tasks.schema -> column comments in the file and the schema section of PIPELINE.md)."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import duckdb
import pytest

from tasks.publish import STORAGE_VERSION, export_report, publish_lake, query_report
from tasks.schema import COLUMN_DOCS, VIEW_ORDER, schema_markdown

ROOT = Path(__file__).resolve().parents[2]

# The tiny spec's plain-Gaussian cells (sampling_rate 1.0): T compositions of a sigma-Gaussian are exactly
# (sqrt(T)/sigma)-GDP (Dong, Roth & Su 2019, Cor. 3.3); the report's mu is an upper bound within 1e-6 relative.
EXACT_MU = {(s, t): math.sqrt(t) / s for s in (0.8, 1.5) for t in (10, 100)}
QUERY = "SELECT noise_multiplier, steps, mu FROM cells WHERE sampling_rate = 1.0 ORDER BY noise_multiplier, steps"


def _check_mu(rows) -> None:
    assert len(rows) == 4
    for sigma, steps, mu in rows:
        assert mu == pytest.approx(EXACT_MU[(sigma, int(steps))], rel=1e-6)
        assert mu >= EXACT_MU[(sigma, int(steps))] * (1 - 1e-12)


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """A tiny sweep published under root/ (lake in root/lake, report in root/reports)."""
    from flows.grid_sweep import grid_sweep
    from flows.runners import make_task_runner
    from tests.pipeline.conftest import TINY_SPEC

    root = tmp_path_factory.mktemp("portable") / "site"
    root.mkdir()
    spec = root / "tiny.yaml"
    spec.write_text(TINY_SPEC.format(name="tiny", steps=100))
    report = root / "reports" / "privacy.duckdb"
    flow = grid_sweep.with_options(task_runner=make_task_runner("thread", max_workers=2))
    flow(spec_path=str(spec), lake=str(root / "lake"), report=str(report), workers=2, progress=False)
    return root


@pytest.mark.usefixtures("prefect_server")
def test_report_copied_with_its_lake_answers_queries(published, tmp_path, monkeypatch):
    moved = tmp_path / "elsewhere" / "copy"
    shutil.copytree(published, moved)
    # the original is gone: any absolute path into it would now fail ("No files found")
    hidden = published.with_name(published.name + "-hidden")
    published.rename(hidden)
    try:
        monkeypatch.chdir(tmp_path)  # neither the report's folder nor the lake's
        _, rows = query_report(moved / "reports" / "privacy.duckdb", QUERY)
        _check_mu(rows)
        _, info = query_report(moved / "reports" / "privacy.duckdb", "SELECT lake, storage_version FROM report_info")
        assert info == [("../lake", STORAGE_VERSION)]
        # any duckdb client: set file_search_path to the report's folder
        con = duckdb.connect()
        con.execute(f"ATTACH '{moved / 'reports' / 'privacy.duckdb'}' AS r (READ_ONLY)")
        con.execute(f"SET file_search_path = '{moved / 'reports'}'")
        _check_mu(con.execute(QUERY.replace("FROM cells", "FROM r.cells")).fetchall())
        con.close()
    finally:
        hidden.rename(published)


@pytest.mark.usefixtures("prefect_server")
def test_exported_file_alone_answers_queries(published, tmp_path, monkeypatch):
    out = tmp_path / "export" / "privacy-export.duckdb"
    counts = export_report(published / "reports" / "privacy.duckdb", out)
    assert counts["cells"] == 8 and counts["report_info"] == 1
    with pytest.raises(ValueError, match="already exists"):
        export_report(published / "reports" / "privacy.duckdb", out)
    alone = tmp_path / "alone" / "x.duckdb"
    alone.parent.mkdir()
    shutil.move(out, alone)
    hidden = published.with_name(published.name + "-hidden")
    published.rename(hidden)  # no lake anywhere
    try:
        monkeypatch.chdir(tmp_path)
        con = duckdb.connect(str(alone), read_only=True)
        _check_mu(con.execute(QUERY).fetchall())
        assert con.execute("SELECT count(*) FROM curves").fetchone()[0] == counts["curves"] > 0
        assert con.execute("SELECT lake FROM report_info").fetchone()[0] is None
        comments = dict(
            con.execute("SELECT column_name, comment FROM duckdb_columns() WHERE table_name = 'cells'").fetchall()
        )
        assert comments == COLUMN_DOCS["cells"]
        con.close()
        _, rows = query_report(alone, QUERY)  # gdp sql reads an export too
        _check_mu(rows)
    finally:
        hidden.rename(published)


@pytest.mark.usefixtures("prefect_server")
def test_parquet_export_imports_into_a_fresh_database(published, tmp_path):
    out = tmp_path / "bundle"
    export_report(published / "reports" / "privacy.duckdb", out, fmt="parquet")
    assert (out / "schema.sql").exists() and (out / "cells.parquet").exists()
    con = duckdb.connect()
    con.execute(f"IMPORT DATABASE '{out}'")
    _check_mu(con.execute(QUERY).fetchall())
    con.close()


def test_export_refuses_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        export_report(tmp_path / "none.duckdb", tmp_path / "x.duckdb")
    report = tmp_path / "r.duckdb"
    publish_lake(tmp_path / "lake", report)
    with pytest.raises(ValueError, match="format must be one of duckdb, parquet, got 'csv'"):
        export_report(report, tmp_path / "x", fmt="csv")
    assert not (tmp_path / "x").exists()


def test_every_column_is_documented_once(tmp_path):
    """Views of a published (empty) report == tasks.schema, column for column, as comments; PIPELINE.md renders it."""
    report = tmp_path / "reports" / "r.duckdb"
    publish_lake(tmp_path / "lake", report)
    con = duckdb.connect(str(report), read_only=True)
    con.execute(f"SET file_search_path = '{report.parent}'")
    names = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
    assert names | {"report_info"} == set(VIEW_ORDER)
    for view in VIEW_ORDER:
        got = con.execute(
            "SELECT column_name, comment FROM duckdb_columns() WHERE table_name = ? ORDER BY column_index", [view]
        ).fetchall()
        assert [c for c, _ in got] == list(COLUMN_DOCS[view]), view
        assert dict(got) == COLUMN_DOCS[view], view
        assert all(doc for _, doc in got)
    view_comments = con.execute("SELECT view_name, comment FROM duckdb_views() WHERE NOT internal").fetchall()
    assert all(c for _, c in view_comments)
    con.close()
    text = (ROOT / "PIPELINE.md").read_text(encoding="utf-8")
    section = re.search(r"<!-- schema:begin[^>]*-->\n(.*?)<!-- schema:end -->", text, re.DOTALL)
    assert section, "PIPELINE.md has no generated schema section"
    assert section.group(1) == schema_markdown(), "regenerate with: python -m tasks.schema"


def _duckdb_pin() -> tuple[str, str]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pin = next(d for d in deps if d.startswith("duckdb"))
    m = re.fullmatch(r"duckdb>=([\d.]+),<([\d.]+)", pin)
    assert m, pin
    return m.group(1), m.group(2)


def test_storage_version_matches_the_oldest_allowed_duckdb():
    oldest, _ = _duckdb_pin()
    assert STORAGE_VERSION == f"v{oldest}"


_OLD_CLIENT = """
import json, sys, duckdb
report, export = sys.argv[1], sys.argv[2]
con = duckdb.connect()
con.execute(f"ATTACH '{report}' AS r (READ_ONLY)")
con.execute("SET file_search_path = '" + report.rsplit('/', 1)[0] + "'")
a = con.execute("SELECT noise_multiplier, steps, mu FROM r.cells WHERE sampling_rate = 1.0 ORDER BY 1, 2").fetchall()
b = duckdb.connect(export, read_only=True).execute(
    "SELECT noise_multiplier, steps, mu FROM cells WHERE sampling_rate = 1.0 ORDER BY 1, 2").fetchall()
print(json.dumps({"version": duckdb.__version__, "report": a, "export": b}))
"""


@pytest.mark.slow  # creates a venv and installs the oldest allowed duckdb from the package index (~10 s)
@pytest.mark.usefixtures("prefect_server")
def test_oldest_allowed_duckdb_reads_report_and_export(published, tmp_path):
    """The newest allowed duckdb is the one installed here (pip resolves the newest in the range); the oldest is
    installed into a temporary venv - one test covers both ends without a second CI job."""
    oldest, _ = _duckdb_pin()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    subprocess.run(
        [str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", f"duckdb=={oldest}"],
        check=True,
        timeout=300,
    )
    moved = tmp_path / "moved"
    shutil.copytree(published, moved)
    export = tmp_path / "export.duckdb"
    export_report(moved / "reports" / "privacy.duckdb", export)
    out = subprocess.run(
        [str(py), "-c", _OLD_CLIENT, (moved / "reports" / "privacy.duckdb").as_posix(), export.as_posix()],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    got = json.loads(out.stdout)
    assert got["version"] == oldest
    _check_mu(got["report"])
    _check_mu(got["export"])
