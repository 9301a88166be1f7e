"""The report site (tasks/site.py) in a real browser, and the report opened by plain DuckDB clients.

The site is built by ``gdp audit``'s flow from the sample registry (data/registry) and one sweep in the same lake; Debian's
headless Chromium (tests/pipeline/browser.py, DevTools protocol) opens every page: no console error or failed load,
no request leaves file://, every local link and image resolves, no horizontal overflow at phone width, and the numbers
on the pages equal the DuckDB report's, read independently with ``query_report``. Screenshots of the overview and one
version page at 1280 and 390 CSS pixels are kept in ``$GDP_SCREENSHOTS`` (default data/reports/screenshots/,
git-ignored) for a person to look at.
"""

from __future__ import annotations

import math
import os
import shutil
import struct
import urllib.parse
from pathlib import Path

import duckdb
import pytest

from tasks.formatting import format_number
from tasks.publish import query_report
from tasks.site import render_pages
from tests.pipeline.browser import Browser, environment_says_ci, find_chromium

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_REGISTRY = ROOT / "data" / "registry"


@pytest.fixture(scope="module")
def site(prefect_server, tmp_path_factory):
    """One sweep and the sample registry's audit published into one report; the audit flow writes the site."""
    from flows.grid_sweep import grid_sweep
    from flows.privacy_audit import privacy_audit
    from flows.runners import make_task_runner
    from tests.pipeline.conftest import TINY_SPEC

    root = tmp_path_factory.mktemp("site")
    spec = root / "tiny.yaml"
    spec.write_text(TINY_SPEC.format(name="tiny", steps=100))
    report = root / "reports" / "privacy.duckdb"
    flow = grid_sweep.with_options(task_runner=make_task_runner("thread", max_workers=2))
    flow(spec_path=str(spec), lake=str(root / "lake"), report=str(report), workers=2, progress=False)
    summary = privacy_audit(registry=str(SAMPLE_REGISTRY), lake=str(root / "lake"), report=str(report))
    return {"root": root, "report": report, "summary": summary}


def _rows(report: Path, sql: str) -> list[dict]:
    cols, rows = query_report(report, sql)
    return [dict(zip(cols, r, strict=True)) for r in rows]


def _chromium() -> str:
    exe = find_chromium()
    if exe is None:
        msg = "Chromium is not installed: `make test` installs it (apt-get install chromium), or install it yourself"
        if environment_says_ci():
            pytest.fail(msg + " (CI=true: the browser test must run)")
        pytest.skip(msg)
    return exe


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", head[16:24])


_LINKS = """[...document.querySelectorAll('a[href], link[href], img[src], [src]')]
  .map(e => e.href || e.src).filter(Boolean)"""


def _local_target(url: str) -> tuple[Path, str]:
    parsed = urllib.parse.urlparse(url)
    assert parsed.scheme == "file", f"a link leaves the site: {url}"
    return Path(urllib.parse.unquote(parsed.path)), parsed.fragment


@pytest.mark.slow  # the sample registry's audit (~1-2 min on 2 cores) and ~25 pages in Chromium
@pytest.mark.subprocess
@pytest.mark.timeout(900)
def test_site_in_headless_chromium(site, tmp_path):
    exe = _chromium()
    report, summary = site["report"], site["summary"]
    index = report.parent / "index.html"
    assert summary.site == str(index) and index.is_file()
    truth = {
        (r["model"], r["version"]): r for r in _rows(report, "SELECT model, version, mu, epsilon FROM model_privacy")
    }
    assert len(truth) == 24  # data/registry: 24 model versions (tuned-classifier: 2)
    shots = Path(os.environ.get("GDP_SCREENSHOTS", ROOT / "data" / "reports" / "screenshots"))
    with Browser(tmp_path, exe) as browser:
        seen: set[Path] = set()
        queue = [index]
        while queue:  # every page reachable from the overview, at desktop width
            page_path = queue.pop()
            if page_path in seen:
                continue
            seen.add(page_path)
            page = browser.open(page_path.as_uri(), 1280)
            assert page.errors() == [], (page_path, page.errors())
            assert all(u.startswith("file://") for u in page.requests()), page.requests()
            for url in browser.evaluate(_LINKS):
                target, fragment = _local_target(url)
                assert target.is_file(), f"{page_path}: broken link {url}"
                if fragment:
                    assert f'id="{fragment}"' in target.read_text(encoding="utf-8"), f"{page_path}: no #{fragment}"
                if target.suffix == ".html":
                    queue.append(target)
        assert len(seen) == 1 + 24 + 1  # the overview, one page per version, one per sweep

        # key numbers on the overview == the report's (exact values in data-*, printed to 4 significant digits)
        page = browser.open(index.as_uri(), 1280)
        shown = browser.evaluate(
            """[...document.querySelectorAll('tr[data-mu]')].map(r => ({model: r.dataset.model,
               version: +r.dataset.version, mu: +r.dataset.mu, epsilon: +r.dataset.epsilon,
               mu_text: r.querySelector('.mu').textContent, eps_text: r.querySelector('.eps').textContent}))"""
        )
        assert len(shown) == len(truth)
        for row in shown:
            want = truth[(row["model"], row["version"])]
            assert row["mu"] == want["mu"] and row["epsilon"] == want["epsilon"], row
            assert row["mu_text"] == format_number(want["mu"], 4) and row["eps_text"] == format_number(
                want["epsilon"], 4
            )
        # the paper's value behind the sample registry: De et al.'s sigma = 9.4 run (cifar10-wrn40-4 v6), mu in
        # [1.567, 1.570] (seed 000 Table 4) within the accountant's resolution, as tests/registry/test_sample_registry.py
        # checks it on the report (MU_SLACK there)
        v6 = next(r for r in shown if (r["model"], r["version"]) == ("cifar10-wrn40-4", 6))
        assert 1.567 - 0.002 <= v6["mu"] <= 1.570 + 0.002
        text = browser.evaluate("document.body.innerText")
        assert "canary-mlp v2: evidence violation" in text  # the demo's flagged version is at the top
        page.screenshot(shots / "overview-1280.png")

        version = report.parent / "site" / "models" / "canary-mlp" / "v2" / "index.html"
        page = browser.open(version.as_uri(), 1280)
        mu = browser.evaluate("+document.getElementById('mu').dataset.value")
        eps = browser.evaluate("+document.getElementById('epsilon').dataset.value")
        assert (mu, eps) == (truth[("canary-mlp", 2)]["mu"], truth[("canary-mlp", 2)]["epsilon"])
        assert browser.evaluate("document.querySelector('article.card img').naturalWidth") > 500  # the card figure
        page.screenshot(shots / "version-1280.png")

        sweep = report.parent / "site" / "sweeps" / "tiny.html"  # its heat maps load (tasks.plots' PNGs)
        browser.open(sweep.as_uri(), 1280)
        assert browser.evaluate(
            "[...document.querySelectorAll('figure.heatmap img')].map(i => i.naturalWidth > 200)"
        ) == [
            True,
            True,
        ]
        for name, path in (("overview", index), ("version", version), ("sweep", sweep)):  # phone width: no scrolling
            page = browser.open(path.as_uri(), 390)
            assert page.errors() == []
            assert browser.evaluate("document.documentElement.scrollWidth") <= 390, name
            page.screenshot(shots / f"{name}-390.png")
    for name, width in (("overview", 1280), ("version", 1280), ("overview", 390), ("version", 390), ("sweep", 390)):
        w, h = _png_size(shots / f"{name}-{width}.png")
        assert w == width and h > 600
    print(f"\nscreenshots: {shots}")


def _tables(**over):
    empty = {k: [] for k in ("versions", "comparisons", "not_auditable", "sweeps", "runs", "worst_cells")}
    return {**empty, "report_info": [], **over}


def _version(model: str = "m", **over) -> dict:
    row = dict.fromkeys(
        "claimed_epsilon claimed_delta claimed_accountant claim_status claim_certified claim_tight_epsilon "
        "evidence_verdict evidence_mu_lower sampler estimate_reason audited_at".split()
    )
    row.update(model=model, version=1, production=False, mu=0.5, mu_bound="upper", epsilon=1.25, epsilon_bound="upper")
    row.update(delta=1e-5, delta_policy="fixed", gdp_regret=0.001, gdp_regret_bound="estimate", verdict="complete")
    row.update(privacy_unit="example")
    row.update(neighbouring="add_remove", accountant="pld", description="d")
    row.update(over)
    return row


def test_registry_text_is_escaped():
    """Model names, descriptions and card text come from the registry: none of it becomes markup or a script URL."""
    attack = "<script>alert(1)</script>"
    pages = render_pages(
        _tables(
            versions=[_version(description=attack + '<img src=x onerror="alert(2)">')],
            not_auditable=[
                {
                    "model": attack,
                    "version": 3,
                    "registry": attack,
                    "description_source": attack,
                    "not_auditable": attack,
                }
            ],
        ),
        {
            (
                "m",
                1,
            ): f"# card {attack}\n\n[click](javascript:alert(3)) <b onmouseover=alert(4)>x</b>\n\n| a |\n|---|\n| {attack} |\n"
        },
    )
    assert set(pages) == {"index.html", "site/models/m/v1/index.html"}
    for html in pages.values():
        assert "<script" not in html and "<img src=x" not in html and 'href="javascript:' not in html
        assert "<b onmouseover" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in pages["index.html"]
    assert pages["site/models/m/v1/index.html"].count("&lt;script&gt;alert(1)&lt;/script&gt;") == 3


def test_a_model_name_that_is_no_file_name_is_refused():
    with pytest.raises(ValueError, match="not a model version"):
        render_pages(_tables(versions=[_version(model="../x")]))


@pytest.mark.slow
def test_report_opens_in_plain_duckdb_from_any_directory(site, tmp_path, monkeypatch):
    """A DuckDB client opening the report file itself (CLI, Python, a SQL IDE) answers from any working directory,
    without SET file_search_path; ATTACHed elsewhere, or renamed, one message says what to run."""
    report = site["report"]
    want = _rows(report, "SELECT count(*) AS n, sum(mu) AS s FROM cells")[0]
    mus = _rows(report, "SELECT model, version, mu FROM model_privacy ORDER BY ALL")
    monkeypatch.chdir(tmp_path)  # neither the report's folder nor the lake's
    for path in (str(report), os.path.relpath(report)):
        con = duckdb.connect(path, read_only=True)
        try:
            n, s = con.execute("SELECT count(*), sum(mu) FROM cells").fetchone()
            assert n == want["n"] == 8 and math.isclose(s, want["s"], rel_tol=1e-12)
            got = con.execute("SELECT model, version, mu FROM model_privacy ORDER BY ALL").fetchall()
            assert [tuple(r.values()) for r in mus] == got
        finally:
            con.close()
    con = duckdb.connect()
    try:
        con.execute(f"ATTACH '{report}' AS r (READ_ONLY)")
        with pytest.raises(duckdb.Error, match=r"open that file itself as the database.*SET file_search_path"):
            con.execute("SELECT count(*) FROM r.cells").fetchall()
        con.execute(f"SET file_search_path = '{report.parent}'")
        assert con.execute("SELECT count(*) FROM r.cells").fetchone()[0] == 8
    finally:
        con.close()
    renamed = report.with_name("renamed.duckdb")
    shutil.copy(report, renamed)
    con = duckdb.connect(str(renamed), read_only=True)
    try:
        with pytest.raises(duckdb.Error, match="duckdb privacy.duckdb"):
            con.execute("SELECT count(*) FROM model_privacy").fetchall()
    finally:
        con.close()
        renamed.unlink()


def test_sweep_page_shows_its_heat_maps(prefect_server, tiny_spec, tmp_path):
    """A sweep's page embeds tasks.plots' heat maps (mu and GDP regret, max over the other axes) as PNG files beside
    it, with the command that redraws each; the two plotted axes are the grid's, whose values the spec lists."""
    import re

    from flows.grid_sweep import grid_sweep
    from flows.runners import make_task_runner
    from tasks.site import write_site

    report = tmp_path / "reports" / "privacy.duckdb"
    grid_sweep.with_options(task_runner=make_task_runner("thread", max_workers=2))(
        spec_path=str(tiny_spec()), lake=str(tmp_path / "lake"), report=str(report), workers=2, progress=False
    )
    write_site(report)
    page = report.parent / "site" / "sweeps" / "tiny.html"
    html = page.read_text(encoding="utf-8")
    imgs = re.findall(r'<img src="([^"]+)" alt="([^"]+)">', html)
    # TINY_SPEC: noise_multiplier, sampling_rate and steps each take 2 values; ties go in plot_heatmap's axis order
    assert [urllib.parse.unquote(src) for src, _ in imgs] == [
        "tiny/mu_sampling_rate_vs_noise_multiplier__max-over-others.png",
        "tiny/gdp_regret_sampling_rate_vs_noise_multiplier__max-over-others.png",
    ]
    for src, alt in imgs:
        png = page.parent / urllib.parse.unquote(src)
        w, h = _png_size(png)
        assert 150 <= w <= 2000 and 150 <= h <= 2000 and png.stat().st_size > 5000
        assert "noise_multiplier" in alt and "sampling_rate" in alt and "max over the other axes" in alt
    assert "gdp plot heatmap --spec tiny --x noise_multiplier --y sampling_rate --metric mu --reduce max" in html


def test_a_sweep_with_one_varying_axis_has_no_heat_map_and_says_why():
    sweep = {"spec": "s", "cells": 3, "ok_cells": 3, "min_mu": 0.1, "max_mu": 0.3, "max_regret": 0.0}
    axes = {"spec": "s", "noise_multiplier": 3, "sampling_rate": 1, "steps": 1, "regret_cells": 3}
    pages = render_pages(_tables(sweeps=[sweep], sweep_axes=[axes]))
    html = pages["site/sweeps/s.html"]
    assert "<img" not in html and "this sweep has 1 (only noise_multiplier varies)" in html
