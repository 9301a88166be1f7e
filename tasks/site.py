"""The report site: static HTML pages written next to the DuckDB report, for people who would rather look than query.

``write_site(report, cards)`` reads the published report through :func:`tasks.report_query.open_report` (read-only,
confined) and writes ``index.html`` in the report's folder and the other pages under ``site/``:

* ``index.html``: every model and version (mu, epsilon at the declared delta, each with its bound label; the claim
  and evidence verdicts; how the batches were drawn - numbers are *estimates* when they were not drawn as accounted,
  and a shuffled run shows the proven lower bound of its shuffled mechanism beside the Poisson estimate; a tuned
  version (best of K runs) its tuning-adjusted bound, with the analysis, beside the single run's;
  the change in mu against the previous and the production version, flagged when less private), a small inline-SVG
  trend of mu across each model's versions, the versions that could not be audited, and the sweeps in the report;
* ``site/models/<model>/v<version>/index.html``: one page per version - its numbers and comparisons from the report,
  its privacy card (``card.md`` of :mod:`tasks.cards`, rendered) and the card's trade-off figure (copied);
* ``site/sweeps/<spec>.html``: one page per sweep - its heat maps, its runs and its least private cells. The heat
  maps (``site/sweeps/<spec>/*.png``) are :func:`tasks.plots.plot_heatmap`'s, the figure ``gdp plot heatmap`` draws:
  mu, and the GDP regret when the sweep has it, over the two grid axes with the most distinct values, the maximum over
  the other axes (:func:`heatmap_plans`); a sweep with fewer than two varying axes gets none, and its page says why.

Every table is shown with the SQL that reproduces it from the report (``gdp sql "..."``): the SQL shown is the SQL
that was run. The pages need no network and no JavaScript (no CDN; plain HTML and one CSS file shipped in
``tasks/site_templates/``), open from ``file://``, and reflow at phone width.

Libraries: Jinja2 (templates, autoescaping on: model names, descriptions and card text come from the registry and
are untrusted) and markdown-it-py (CommonMark, the card's Markdown; raw HTML off, so text in a card is escaped, and
its link validation drops ``javascript:`` URLs) - both well kept and already installed with Prefect and rich.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from tasks.formatting import format_number
from tasks.schema import COMPLETE_CELLS_SQL

__all__ = ["QUERIES", "SITE_DIR", "heatmap_plans", "render_pages", "write_site"]

SITE_DIR = "site"
"""The folder (next to the report) holding every page but ``index.html``, the stylesheet and the figures."""

QUERIES: dict[str, str] = {
    "versions": "SELECT model, version, production, mu, mu_bound, epsilon, epsilon_bound, delta, delta_policy, "
    "gdp_regret, gdp_regret_bound, verdict, claimed_epsilon, claimed_delta, claimed_accountant, claim_status, claim_certified, "
    "claim_tight_epsilon, evidence_verdict, evidence_mu_lower, sampler, estimate_reason, shuffle_epsilon_lower, "
    "shuffle_mu_lower, shuffle_label, shuffle_analysis, tuning_epsilon, tuning_bound, tuning_analysis, "
    "tuning_distribution, tuning_expected_runs, epsilon_single_run, privacy_unit, "
    "neighbouring, accountant, description, audited_at FROM model_privacy ORDER BY model, version",
    "comparisons": "SELECT model, version, against, other_version, mu_change, less_private, blackwell_verdict, "
    "divergence_new_over_old, divergence_bound FROM model_comparisons ORDER BY model, version, against",
    "not_auditable": "SELECT model, version, registry, description_source, not_auditable FROM models "
    "WHERE status <> 'audited' ORDER BY model, version",
    "sweeps": "SELECT spec, count(*) AS cells, count(*) FILTER (WHERE status = 'ok') AS ok_cells, "
    "min(mu) AS min_mu, max(mu) AS max_mu, max(gdp_regret) AS max_regret FROM cells GROUP BY spec ORDER BY spec",
    "runs": "SELECT spec, json_extract_string(spec_json, '$.name') AS name, run_id, cells, cells_computed, "
    "chunks_failed, task_runner, started_at, finished_at FROM runs ORDER BY spec, started_at",
    "worst_cells": "SELECT spec, cell_id, mechanism_kind, noise_multiplier, sampling_rate, steps, steps_per_epoch, "
    "epochs, mu, mu_bound, mu_lower, status, gdp_regret, advantage, advantage_bound FROM cells WHERE mu IS NOT NULL "
    "QUALIFY row_number() OVER (PARTITION BY spec ORDER BY mu DESC, cell_id) <= 10 ORDER BY spec, mu DESC, cell_id",
    "report_info": "SELECT published_at, snapshot, publisher_code_version FROM report_info",
}
"""Every query the site runs, by table; each page shows the ones its tables come from."""


def _sql_value(v: Any) -> str:
    return str(v) if isinstance(v, int) and not isinstance(v, bool) else "'" + str(v).replace("'", "''") + "'"


def version_query(view: str, model: str, version: int, columns: str = "*") -> str:
    """``SELECT columns FROM view WHERE model = '...' AND version = N`` (the SQL of one version's rows)."""
    return f"SELECT {columns} FROM {view} WHERE model = {_sql_value(model)} AND version = {_sql_value(version)}"


def _fetch(con: Any, sql: str) -> list[dict[str, Any]]:
    cur = con.execute(sql)
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]


def _read_report(report: Path) -> dict[str, list[dict[str, Any]]]:
    """Every table of :data:`QUERIES` from ``report`` (read-only, confined: tasks.report_query)."""
    import duckdb

    from tasks.report_query import open_report

    con = open_report(report)
    try:
        out: dict[str, list[dict[str, Any]]] = {}
        for name, sql in QUERIES.items():
            try:
                out[name] = _fetch(con, sql)
            except duckdb.CatalogException:  # a report published before the registry views existed
                out[name] = []
        out["sweep_axes"] = _sweep_axes(con)
        return out
    finally:
        con.close()


def _sweep_axes(con: Any) -> list[dict[str, Any]]:
    """Per spec, the number of distinct values of each grid axis :func:`tasks.plots.plot_heatmap` can draw (the
    columns of ``cells`` among its axes) over the spec's complete cells (:data:`tasks.schema.COMPLETE_CELLS_SQL`), and how many of them have a GDP regret."""
    from tasks.plots import _AXES

    columns = {d[0] for d in con.execute("SELECT * FROM cells LIMIT 0").description}
    axes = [a for a in _AXES if a in columns]
    counts = "".join(f'count(DISTINCT "{a}") AS "{a}", ' for a in axes)
    return _fetch(
        con,
        f"SELECT spec, {counts}count(gdp_regret) AS regret_cells FROM cells WHERE {COMPLETE_CELLS_SQL} GROUP BY spec",
    )


# ---- presentation helpers (numbers keep their bound labels) -------------------------------------------------------


def fmt(x: Any, digits: int = 4) -> str:
    """A number as the pages print it (``tasks.formatting.format_number``, 4 significant digits)."""
    return format_number(x, digits)


def _signed(x: Any) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return fmt(x)
    return ("+" if x > 0 else "") + fmt(x, 3)


def _claim(v: dict[str, Any]) -> tuple[str, str]:
    """(text, css class) of the published-claim verdict."""
    if v.get("claimed_epsilon") is None:
        return "no claim", "muted"
    if v.get("claim_status") is None:
        return "not re-checked", "muted"
    if v.get("estimate_reason"):
        return "cannot certify (estimate)", "warn"
    if v["claim_certified"]:
        return "certified" + ("" if v["claim_status"] == "reproduced" else f"; {v['claim_status']}"), "ok"
    return f"not certified (ε ≤ {fmt(v['claim_tight_epsilon'])} > {fmt(v['claimed_epsilon'])})", "bad"


def _evidence(v: dict[str, Any]) -> tuple[str, str]:
    verdict = v.get("evidence_verdict")
    if verdict is None:
        return "no evidence", "muted"
    if verdict == "consistent":
        return "consistent", "ok"
    if "violat" in str(verdict):
        return f"violation: μ ≥ {fmt(v['evidence_mu_lower'])} (lower)", "bad"
    return str(verdict), "warn"


def _sampler(v: dict[str, Any]) -> tuple[str, str]:
    sampler = v.get("sampler") or "not declared"
    if v.get("estimate_reason"):
        return f"{sampler}: estimate, not a bound", "bad"
    return f"{sampler}: as accounted", "ok" if v.get("sampler") else "muted"


def _shuffled(v: dict[str, Any]) -> dict[str, Any] | None:
    """The shuffled run's proven lower bound beside the Poisson estimate (tasks.audit.shuffle_lower_fields), or None."""
    low = v.get("shuffle_epsilon_lower")
    if low is None:
        return None
    return {
        "epsilon": low,
        "mu": v.get("shuffle_mu_lower"),
        "label": v.get("shuffle_label") or "lower",
        "analysis": v.get("shuffle_analysis") or "",
        "understates": low > v["epsilon"],
    }


def _understates(v: dict[str, Any]) -> str:
    """The overview's attention line of a shuffled run whose proven lower bound is above its Poisson estimate."""
    low = v["shuffled"]
    if not low:
        return ""
    return (
        f"the shuffled run's ε ≥ {fmt(low['epsilon'])} (proven lower bound) > the Poisson estimate {fmt(v['epsilon'])}"
    )


def _tuning(v: dict[str, Any]) -> dict[str, Any] | None:
    """The best-of-K bound of a tuned version (tasks.audit.tuning_fields) next to the single run's, or None."""
    if v.get("tuning_epsilon") is None:
        return None
    law = json.loads(v.get("tuning_distribution") or "{}")
    fixed = law.get("distribution") == "fixed"
    return {
        "epsilon": v["tuning_epsilon"],
        "bound": v.get("tuning_bound") or "upper",
        "analysis": v.get("tuning_analysis") or "",
        "runs": f"K = {law.get('count')}" if fixed else f"K random, E[K] = {fmt(v.get('tuning_expected_runs'), 3)}",
        "single": v.get("epsilon_single_run", v["epsilon"]),
    }


def _change(cmp: dict[str, Any] | None) -> dict[str, Any] | None:
    if cmp is None:
        return None
    return {
        "against": cmp["other_version"],
        "text": _signed(cmp["mu_change"]),
        "less_private": bool(cmp["less_private"]),
        "blackwell": cmp["blackwell_verdict"],
    }


def trend_svg_points(mus: list[float], width: int = 150, height: int = 36, pad: int = 5) -> list[tuple[float, float]]:
    """(x, y) of each version's mu in a ``width`` x ``height`` box (y grows downwards; equal mus sit mid-height)."""
    finite = [m for m in mus if m is not None and math.isfinite(m)]
    lo, hi = (min(finite), max(finite)) if finite else (0.0, 1.0)
    n = len(mus)
    pts = []
    for i, m in enumerate(mus):
        x = pad + (width - 2 * pad) * (i / (n - 1) if n > 1 else 0.5)
        if m is None or not math.isfinite(m):
            y = float(height - pad)
        elif hi > lo:
            y = pad + (height - 2 * pad) * (1 - (m - lo) / (hi - lo))
        else:
            y = height / 2
        pts.append((round(x, 1), round(y, 1)))
    return pts


def _page_path(model: str, version: int) -> Path:
    """A version's page, relative to the site folder (names checked as card folders are: tasks.cards.card_dir)."""
    from tasks.cards import card_dir

    return card_dir(Path("models"), model, version) / "index.html"


def _sweep_page(spec: str) -> Path:
    from tasks.lake import safe_join

    return safe_join(Path("sweeps"), f"{spec}.html")


HEATMAP_REDUCE = "max"
"""How the sweep pages' heat maps reduce the axes they do not plot: the largest value (the least private cell)."""


def heatmap_plans(tables: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per spec, the heat maps its sweep page shows: ``{"maps": [...], "reason": why none or None}``; each map names
    its metric, axes ``x`` (most distinct values) and ``y`` (next; ties in :func:`tasks.plots.plot_heatmap`'s axis
    order), its file relative to the site folder, and the ``gdp plot heatmap`` command that draws it."""
    import shlex

    from tasks.lake import safe_join
    from tasks.plots import heatmap_filename

    plans: dict[str, dict[str, Any]] = {}
    counts = {r["spec"]: r for r in tables.get("sweep_axes", [])}
    for s in tables["sweeps"]:
        spec = s["spec"]
        row = counts.get(spec)
        if row is None:
            plans[spec] = {"maps": [], "reason": "no heat map: the sweep has no ok cells"}
            continue
        varying = sorted(
            ((n, k, a) for k, (a, n) in enumerate(row.items()) if a not in ("spec", "regret_cells") and n >= 2),
            key=lambda t: (-t[0], t[1]),
        )
        if len(varying) < 2:
            only = f" (only {varying[0][2]} varies)" if varying else ""
            plans[spec] = {
                "maps": [],
                "reason": f"no heat map: a heat map needs two grid axes that vary, this sweep has {len(varying)}{only}",
            }
            continue
        x, y = varying[0][2], varying[1][2]
        metrics = ["mu"] + (["gdp_regret"] if row["regret_cells"] else [])
        maps = []
        for metric in metrics:
            name = heatmap_filename(metric, x, y, None, HEATMAP_REDUCE)
            label = "μ (upper bound)" if metric == "mu" else "GDP regret"
            maps.append(
                {
                    "metric": metric,
                    "x": x,
                    "y": y,
                    "file": safe_join(Path("sweeps"), spec, name),
                    "alt": f"Heat map of {label} over {x} (x) and {y} (y), the {HEATMAP_REDUCE} over the other axes",
                    "caption": f"{label}: x = {x}, y = {y}; each cell is the {HEATMAP_REDUCE} over the other axes.",
                    "command": f"gdp plot heatmap --spec {shlex.quote(spec)} --x {x} --y {y} --metric {metric} "
                    f"--reduce {HEATMAP_REDUCE}",
                }
            )
        plans[spec] = {"maps": maps, "reason": None}
    return plans


def _href(path: Path | str, start: Path | str) -> str:
    """A relative URL from the folder ``start`` to ``path`` (both relative to the report's folder), each component
    percent-encoded."""
    rel = os.path.relpath(path, start)
    return "/".join(quote(p) for p in Path(rel).as_posix().split("/"))


# ---- pages -----------------------------------------------------------------------------------------------------------


def _environment() -> Any:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("tasks", "site_templates"),
        autoescape=True,  # every template is HTML; registry text (names, descriptions, cards) is untrusted
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["fmt"] = fmt
    return env


def _render_card(markdown: str) -> str:
    """The card's Markdown as HTML: CommonMark with tables, raw HTML *escaped* (card text is untrusted), links checked
    by markdown-it's validateLink (no ``javascript:`` / ``data:`` targets)."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False}).enable("table").render(markdown)


def _models(tables: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The overview's rows grouped by model: each version with its verdicts, changes and page link."""
    cmp: dict[tuple[str, int, str], dict[str, Any]] = {
        (c["model"], c["version"], c["against"]): c for c in tables["comparisons"]
    }
    models: dict[str, dict[str, Any]] = {}
    for v in tables["versions"]:
        m = models.setdefault(v["model"], {"name": v["model"], "versions": []})
        claim, evidence, sampler = _claim(v), _evidence(v), _sampler(v)
        m["versions"].append(
            {
                **v,
                "claim_text": claim[0],
                "claim_class": claim[1],
                "evidence_text": evidence[0],
                "evidence_class": evidence[1],
                "sampler_text": sampler[0],
                "sampler_class": sampler[1],
                "shuffled": _shuffled(v),
                "tuning": _tuning(v),
                "vs_previous": _change(cmp.get((v["model"], v["version"], "previous"))),
                "vs_production": _change(cmp.get((v["model"], v["version"], "production"))),
                "page": _page_path(v["model"], v["version"]),
            }
        )
    for m in models.values():
        pts = trend_svg_points([v["mu"] for v in m["versions"]])
        m["trend"] = [
            {
                "x": x,
                "y": y,
                "version": v["version"],
                "mu": fmt(v["mu"]),
                "flag": bool(v["vs_previous"] and v["vs_previous"]["less_private"]),
            }
            for (x, y), v in zip(pts, m["versions"], strict=True)
        ]
        m["polyline"] = " ".join(f"{x},{y}" for x, y in pts)
        m["flags"] = sum(
            1
            for v in m["versions"]
            if v["claim_class"] == "bad" or v["evidence_class"] == "bad" or v["sampler_class"] == "bad"
        )
    return list(models.values())


def render_pages(
    tables: dict[str, list[dict[str, Any]]], cards: dict[tuple[str, int], str] | None = None
) -> dict[str, str]:
    """Every page of the site, ``{path relative to the report's folder: HTML}``, from the report's tables
    (:data:`QUERIES`) and each version's card Markdown (``cards[(model, version)]``). Pure: no file is read."""
    env = _environment()
    cards = cards or {}
    info = tables["report_info"][0] if tables["report_info"] else {}
    models = _models(tables)
    site = Path(SITE_DIR)
    runs_by_spec: dict[str, list[dict[str, Any]]] = {}
    for r in tables["runs"]:
        runs_by_spec.setdefault(r["spec"], []).append(r)
    sweeps = [
        {
            **s,
            "name": next((r["name"] for r in runs_by_spec.get(s["spec"], []) if r["name"]), s["spec"]),
            "page": _sweep_page(s["spec"]),
        }
        for s in tables["sweeps"]
    ]
    common = {"info": info, "queries": QUERIES, "generated_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")}
    pages: dict[str, str] = {}

    def link(target: Path | str, page: Path) -> str:
        return _href(target, page.parent)

    attention = [
        {"key": f"{v['model']} v{v['version']}", "what": what, "page": v["page"]}
        for m in models
        for v in m["versions"]
        for what, cls in (
            ("evidence " + v["evidence_text"], v["evidence_class"]),
            ("published claim " + v["claim_text"], v["claim_class"]),
            ("sampling " + v["sampler_text"], v["sampler_class"]),
            (_understates(v), "bad" if v["shuffled"] and v["shuffled"]["understates"] else ""),
        )
        if cls == "bad"
    ]
    index = Path("index.html")
    pages[str(index)] = env.get_template("index.html").render(
        **common,
        css=link(site / "style.css", index),
        home=link(index, index),
        models=models,
        n_versions=len(tables["versions"]),
        attention=attention,
        not_auditable=tables["not_auditable"],
        sweeps=sweeps,
        href=lambda p: link(site / p, index),
    )
    for m in models:
        for v in m["versions"]:
            page = site / v["page"]
            md = cards.get((v["model"], v["version"]))
            pages[str(page)] = env.get_template("version.html").render(
                **common,
                css=link(site / "style.css", page),
                home=link(index, page),
                model=m,
                v=v,
                comparisons=[
                    c for c in tables["comparisons"] if (c["model"], c["version"]) == (v["model"], v["version"])
                ],
                card_html=_render_card(md) if md is not None else None,
                version_sql=version_query("model_privacy", v["model"], v["version"]),
                comparisons_sql=version_query("model_comparisons", v["model"], v["version"]),
                evidence_sql=version_query("evidence", v["model"], v["version"]),
                href=lambda p, page=page: link(site / p, page),
            )
    plans = heatmap_plans(tables)
    for s in sweeps:
        page = site / s["page"]
        plan = plans[s["spec"]]
        pages[str(page)] = env.get_template("sweep.html").render(
            **common,
            css=link(site / "style.css", page),
            home=link(index, page),
            s=s,
            runs=runs_by_spec.get(s["spec"], []),
            cells=[c for c in tables["worst_cells"] if c["spec"] == s["spec"]],
            heatmaps=[{**h, "src": link(site / h["file"], page)} for h in plan["maps"]],
            heatmap_reason=plan["reason"],
            runs_sql=QUERIES["runs"].replace("FROM runs", f"FROM runs WHERE spec = {_sql_value(s['spec'])}"),
            cells_sql=(
                "SELECT cell_id, mechanism_kind, noise_multiplier, sampling_rate, steps, steps_per_epoch, epochs, mu, "
                "mu_bound, mu_lower, status, gdp_regret, advantage, advantage_bound FROM cells "
                f"WHERE spec = {_sql_value(s['spec'])} AND mu IS NOT NULL "
                "ORDER BY mu DESC, cell_id LIMIT 10"
            ),
        )
    return pages


# ---- files -----------------------------------------------------------------------------------------------------------


def _write_file(path: Path, data: bytes) -> None:
    """The site's one file writer: :func:`tasks.safe_write.atomic_write` (written aside, fsynced and renamed into
    place, a symbolic link at the target refused). Every page, the stylesheet and the figures go through here."""
    from tasks.safe_write import atomic_write

    atomic_write(path, lambda f: f.write(data))


def _card_files(cards: Path | None, versions: Iterable[dict[str, Any]]) -> dict[tuple[str, int], dict[str, Path]]:
    from tasks.cards import card_dir

    out: dict[tuple[str, int], dict[str, Path]] = {}
    if cards is None:
        return out
    for v in versions:
        d = card_dir(cards, v["model"], v["version"])
        files = {name: d / name for name in ("card.md", "curve.png", "model_card.yaml") if (d / name).is_file()}
        if files:
            out[(v["model"], v["version"])] = files
    return out


def write_site(report: str | Path, cards: str | Path | None = None) -> Path:
    """Write the site of ``report`` (``index.html`` in its folder, the rest under ``site/``) from the report and the
    privacy cards under ``cards`` (default: the ``cards`` folder next to the report, as ``gdp audit`` writes them).
    Pages of versions no longer in the report are removed. Returns the path of ``index.html``."""
    report = Path(report).resolve()
    if not report.is_file():
        raise ValueError(f"report {str(report)!r} does not exist: run 'gdp audit' or 'gdp publish' first")
    root = report.parent
    cards_p = Path(cards).resolve() if cards is not None else root / "cards"
    tables = _read_report(report)
    card_files = _card_files(cards_p if cards_p.is_dir() else None, tables["versions"])
    markdown = {k: f["card.md"].read_text(encoding="utf-8") for k, f in card_files.items() if "card.md" in f}
    pages = render_pages(tables, markdown)
    site = root / SITE_DIR
    written = {root / name for name in pages}
    for name, html in pages.items():
        _write_file(root / name, html.encode("utf-8"))
    css = Path(__file__).with_name("site_templates") / "style.css"
    _write_file(site / "style.css", css.read_bytes())
    written.add(site / "style.css")
    for (model, version), files in card_files.items():  # the card's figure and files beside its page
        page_dir = (site / _page_path(model, version)).parent
        for name, src in files.items():
            _write_file(page_dir / name, src.read_bytes())
            written.add(page_dir / name)
    from tasks.plots import plot_heatmap

    for spec, plan in heatmap_plans(tables).items():  # each sweep's heat maps beside its page
        for h in plan["maps"]:
            out = site / h["file"]  # written atomically by tasks.plots (tasks.safe_write.atomic_write), as _write_file
            plot_heatmap(
                report, spec, x=h["x"], y=h["y"], metric=h["metric"], out=out, reduce=HEATMAP_REDUCE, overwrite=True
            )
            written.add(out)
    _remove_stale(site, written)
    return root / "index.html"


def _remove_stale(site: Path, written: set[Path]) -> None:
    """Remove files under ``site`` this build did not write (versions and sweeps no longer in the report)."""
    for folder, _, files in os.walk(site, topdown=False):
        for name in files:
            p = Path(folder) / name
            if p not in written and not name.startswith("."):
                p.unlink(missing_ok=True)
        if Path(folder) != site and not os.listdir(folder):
            shutil.rmtree(folder, ignore_errors=True)
