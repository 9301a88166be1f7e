"""End-to-end flows on a tiny grid (thread runner, Prefect test server): lake rows equal gdpcore's numbers, re-runs
compute nothing, one edited grid value recomputes one chunk, publishing is atomic, the report is read-only."""

from __future__ import annotations

import json
import math
from pathlib import Path

import duckdb
import numpy as np
import pytest

import gdpcore
from flows.cli import main
from flows.runners import make_task_runner
from gdpcore.engine import DEFAULT_GRID_TOLERANCE
from tasks.evaluate import CURVE_FPRS
from tasks.grid_table import analyze_grid_table
from tasks.publish import query_report

pytestmark = pytest.mark.usefixtures("prefect_server")

DELTAS = [1e-5, 1e-6]
FPRS = [1e-3, 0.1]


def _sweep(spec: Path, lake: Path, report: Path, runner: str = "thread", **kw):
    from flows.grid_sweep import grid_sweep

    flow = grid_sweep.with_options(task_runner=make_task_runner(runner, max_workers=2, **kw))
    return flow(spec_path=str(spec), lake=str(lake), report=str(report), workers=2)


def _rows(report: Path, sql: str) -> list[dict]:
    cols, rows = query_report(report, sql)
    return [dict(zip(cols, r, strict=True)) for r in rows]


def _staging(lake: Path) -> dict[str, float]:
    return {p.name: p.stat().st_mtime_ns for p in (lake / "staging").rglob("*.parquet")}


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """One sweep of the tiny spec shared by the read-only assertions below."""
    from tests.pipeline.conftest import TINY_SPEC

    root = tmp_path_factory.mktemp("swept")
    spec = root / "tiny.yaml"
    spec.write_text(TINY_SPEC.format(name="tiny", steps=100))
    lake, report = root / "lake", root / "reports" / "privacy.duckdb"
    summary = _sweep(spec, lake, report)
    return spec, lake, report, summary


def test_views_match_gdpcore(swept):
    _, lake, report, summary = swept
    assert summary.cells == 8 and summary.cells_computed == 8 and summary.chunks_computed == 2
    cells = _rows(report, "SELECT * FROM cells WHERE spec = 'tiny' ORDER BY grid_index")
    assert len(cells) == 8 and {c["status"] for c in cells} == {"ok"}
    assert len({c["cell_id"] for c in cells}) == 8
    n_curve = len(set(CURVE_FPRS) | set(FPRS))
    counts = _rows(
        report,
        "SELECT (SELECT count(*) FROM epsilons) e, (SELECT count(*) FROM curves) c, (SELECT count(*) FROM regrets) r",
    )[0]
    assert counts == {"e": 8 * len(DELTAS), "c": 8 * n_curve, "r": 8}

    mechs = [
        gdpcore.SubsampledGaussian(noise_multiplier=s, sampling_rate=q, steps=t)
        for s in (0.8, 1.5)
        for q in (0.02, 1.0)
        for t in (10, 100)
    ]
    assert [c["cell_id"] for c in cells] == [m.content_hash for m in mechs]
    # 1. identical to gdpcore.analyze_grid on the same cells (the code path the chunk task wraps)
    direct = analyze_grid_table(mechs, deltas=DELTAS, fprs=sorted(set(CURVE_FPRS) | set(FPRS))).to_pylist()
    for c, d in zip(cells, direct, strict=True):
        for k in ("mu", "gdp_regret", "advantage", "bayes_security"):
            assert c[k] == d[k], k
        eps = _rows(report, f"SELECT delta, epsilon FROM epsilons WHERE cell_id = '{c['cell_id']}' ORDER BY delta DESC")
        assert [e["delta"] for e in eps] == DELTAS and [e["epsilon"] for e in eps] == d["epsilon"]
    # 2. independent: the per-point report (refined to 0.1%), and the closed form for plain Gaussians. The sweep's
    # numbers are upper bounds certified to the grid tolerance (1%): each lies between the reference's proven lower
    # end and its upper end + 1%.
    tol = DEFAULT_GRID_TOLERANCE
    for c, m in zip(cells, mechs, strict=True):
        ref = gdpcore.analyze(m)
        if m.sampling_rate == 1.0:
            assert c["mu"] == pytest.approx(math.sqrt(m.steps) / m.noise_multiplier, rel=1e-12)
            assert c["mu_bound"] == "exact"
        else:
            assert ref.mu_lower <= c["mu"] <= ref.mu * (1 + tol)
            assert ref.advantage_lower <= c["advantage"] <= ref.advantage * (1 + tol)
        curve = _rows(report, f"SELECT fpr, fnr FROM curves WHERE cell_id = '{c['cell_id']}' ORDER BY fpr")
        fpr = np.array([p["fpr"] for p in curve])
        fnr = np.array([p["fnr"] for p in curve])
        # Lower bounds on the FNR: never above the reference's upper bound, and short of its lower bound by at most
        # the grid tolerance's share of the advantage (the largest gap between the two curves' profiles).
        assert np.all(fnr <= ref.fnr(fpr, side="optimistic") + 1e-12)
        assert np.all(fnr >= ref.fnr(fpr) - tol * ref.advantage - 1e-12)
        eps = _rows(report, f"SELECT delta, epsilon FROM epsilons WHERE cell_id = '{c['cell_id']}'")
        for e in eps:
            if m.sampling_rate == 1.0:
                assert e["epsilon"] == pytest.approx(float(ref.epsilon(e["delta"])), rel=1e-9)
                continue
            lower = float(ref.epsilon(e["delta"], side="optimistic"))
            assert lower <= e["epsilon"] <= float(ref.epsilon(e["delta"])) * (1 + tol)
        regret = _rows(report, f"SELECT representation, regret FROM regrets WHERE cell_id = '{c['cell_id']}'")
        assert regret == [{"representation": "gdp", "regret": c["gdp_regret"]}]
    # provenance on every row
    assert {c["gdpcore_version"] for c in cells} == {gdpcore.__version__}
    assert {c["run_id"] for c in cells} == {summary.run_id}
    assert all(c["accountant"] for c in cells)
    runs = _rows(report, "SELECT * FROM runs")
    assert len(runs) == 1 and runs[0]["cells_computed"] == 8


def test_report_views_resolve_from_any_directory(swept, tmp_path, monkeypatch):
    """Views name the lake relative to the report's folder: any client sets file_search_path to it."""
    _, _, report, _ = swept
    monkeypatch.chdir(tmp_path)
    con = duckdb.connect(str(report), read_only=True)
    try:
        con.execute(f"SET file_search_path = '{report.parent}'")
        assert con.execute("SELECT count(*) FROM cells").fetchone()[0] == 8
    finally:
        con.close()


def test_sql_is_read_only(swept, capsys):
    _, lake, report, _ = swept
    before = report.read_bytes()
    target = report.parent / "stolen.csv"
    for sql in (
        "DROP VIEW cells",
        "CREATE TABLE t AS SELECT 1",
        f"COPY (SELECT 1) TO '{target}'",
        "INSERT INTO report_info VALUES (NULL)",
        "ATTACH ':memory:' AS m",
        "SELECT 1; DROP VIEW cells",
    ):
        assert main(["sql", sql, "--report", str(report)]) == 2, sql
        assert "error" in capsys.readouterr().err
    assert report.read_bytes() == before and not target.exists()
    assert (
        main(
            [
                "sql",
                "SELECT cell_id, mu FROM cells ORDER BY mu DESC LIMIT 2",
                "--report",
                str(report),
                "--format",
                "json",
            ]
        )
        == 0
    )
    rows = json.loads(capsys.readouterr().out)
    assert isinstance(rows, list) and len(rows) == 2 and set(rows[0]) == {"cell_id", "mu"}
    assert main(["sql", "SELECT count(*) AS n FROM cells", "--report", str(report), "--format", "csv"]) == 0
    assert capsys.readouterr().out == "n\n8\n"


@pytest.mark.slow
def test_rerun_computes_nothing_and_edit_recomputes_one_chunk(tiny_spec, tmp_path):
    lake, report = tmp_path / "lake", tmp_path / "r.duckdb"
    first = _sweep(tiny_spec(), lake, report)
    assert first.cells_computed == 8
    files = _staging(lake)
    counts = _rows(
        report,
        "SELECT (SELECT count(*) FROM cells) c, (SELECT count(*) FROM epsilons) e, "
        "(SELECT count(*) FROM curves) k, (SELECT count(*) FROM regrets) r",
    )[0]

    again = _sweep(tiny_spec(), lake, report)
    assert (again.cells_computed, again.chunks_computed, again.cells_reused) == (0, 0, 8)
    assert _staging(lake) == files  # nothing rewritten
    assert (
        _rows(
            report,
            "SELECT (SELECT count(*) FROM cells) c, (SELECT count(*) FROM epsilons) e, "
            "(SELECT count(*) FROM curves) k, (SELECT count(*) FROM regrets) r",
        )[0]
        == counts
    )

    edited = _sweep(tiny_spec(steps=200), lake, report)  # one grid value changed: 100 -> 200
    assert (edited.cells_computed, edited.chunks_computed) == (4, 1)
    now = _staging(lake)
    assert {k: v for k, v in now.items() if k in files} == files and len(now) == len(files) + 1
    cells = _rows(report, "SELECT steps, count(*) n FROM cells GROUP BY steps ORDER BY steps")
    assert cells == [{"steps": 10, "n": 4}, {"steps": 200, "n": 4}]  # the old value's cells left the report
    assert _rows(report, "SELECT count(*) n FROM epsilons")[0]["n"] == counts["e"]
    assert len(_rows(report, "SELECT * FROM runs")) == 3


def test_publish_is_atomic_for_open_readers(tiny_spec, tmp_path):
    lake, report = tmp_path / "lake", tmp_path / "reports" / "r.duckdb"
    _sweep(tiny_spec(), lake, report)
    reader = duckdb.connect(str(report), read_only=True)
    reader.execute(f"SET file_search_path = '{report.parent}'")  # views name the lake relative to the report
    try:
        old = reader.execute("SELECT list_sort(list(steps)) FROM cells").fetchone()[0]
        _sweep(tiny_spec(steps=300), lake, report)  # republishes while the reader holds the old file open
        assert reader.execute("SELECT list_sort(list(steps)) FROM cells").fetchone()[0] == old  # old snapshot intact
    finally:
        reader.close()
    assert sorted(set(r["steps"] for r in _rows(report, "SELECT steps FROM cells"))) == [10, 300]
    assert sorted(p.name for p in report.parent.iterdir()) == ["r.duckdb"]  # no temporaries left behind


def test_invalid_spec_fails_flow_and_writes_nothing(write_spec, tmp_path):
    from flows.grid_sweep import grid_sweep

    bad = write_spec("name: x\nmechanism: gaussian\ngrid: {noise_multiplier: [1.0, -2.0]}\n", "bad.yaml")
    lake = tmp_path / "lake"
    with pytest.raises(ValueError, match=r"grid\.noise_multiplier\[1\] = -2\.0"):
        grid_sweep.with_options(task_runner=make_task_runner("thread", max_workers=1))(
            spec_path=str(bad), lake=str(lake), report=str(tmp_path / "r.duckdb")
        )
    assert not lake.exists() and not (tmp_path / "r.duckdb").exists()


def test_regret_map_writes_plots(tiny_spec, tmp_path):
    from flows.regret_map import regret_map

    report = tmp_path / "reports" / "privacy.duckdb"
    result = regret_map.with_options(task_runner=make_task_runner("thread", max_workers=2))(
        spec_path=str(tiny_spec()),
        lake=str(tmp_path / "lake"),
        report=str(report),
        x="sampling_rate",
        y="noise_multiplier",
    )
    assert set(result.heatmaps) == {"gdp_regret", "mu"}
    for path in [*result.heatmaps.values(), result.curve]:
        p = Path(path)
        assert p.parent.parent.parent == report.parent / "plots" or p.parent == report.parent / "plots" / "tiny"
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000
    worst = _rows(report, "SELECT cell_id FROM cells ORDER BY gdp_regret DESC LIMIT 1")[0]["cell_id"]
    assert result.worst_cell == worst

    # `gdp plot heatmap` of another slice gets its own file: the regret map's PNG is not overwritten
    regret_png = Path(result.heatmaps["gdp_regret"])
    before = regret_png.read_bytes()
    argv = ["plot", "heatmap", "--spec", "tiny", "--x", "sampling_rate", "--y", "noise_multiplier"]
    assert main([*argv, "--fixed", "steps=100", "--report", str(report)]) == 0
    fixed_png = regret_png.parent / "gdp_regret_noise_multiplier_vs_sampling_rate__steps=100.png"
    assert fixed_png.exists() and regret_png.read_bytes() == before
    assert regret_png.name == "gdp_regret_noise_multiplier_vs_sampling_rate__max-over-others.png"
    # an explicit --out that exists is refused (exit 2) unless --overwrite
    assert main([*argv, "--out", str(regret_png), "--report", str(report)]) == 2
    assert regret_png.read_bytes() == before
    assert main([*argv, "--fixed", "steps=10", "--out", str(regret_png), "--overwrite", "--report", str(report)]) == 0
    assert regret_png.read_bytes() != before


@pytest.mark.slow
def test_dask_runner_gives_identical_rows(tiny_spec, tmp_path):
    from distributed import LocalCluster

    spec = tiny_spec()
    _sweep(spec, tmp_path / "lake_t", tmp_path / "t.duckdb")
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0") as cluster:
        _sweep(spec, tmp_path / "lake_d", tmp_path / "d.duckdb", runner="dask", dask_address=cluster.scheduler_address)
    cols = (
        "cell_id, noise_multiplier, sampling_rate, steps, mu, gdp_regret, advantage, bayes_security, status, "
        "accountant, discretization"
    )
    for view, select in (("cells", cols), ("epsilons", "cell_id, delta, epsilon"), ("curves", "cell_id, fpr, fnr")):
        sql = f"SELECT {select} FROM {view} ORDER BY ALL"
        assert query_report(tmp_path / "d.duckdb", sql) == query_report(tmp_path / "t.duckdb", sql), view
