"""``gdp sweep``, ``regret-map``, ``calibration-sweep``, ``publish`` and ``demo``: the commands that run flows; and
what ``gdp analyze`` adds to its report on demand (:func:`analyze_extras`, :func:`write_analyze_plot`): the trade-off
curve itself, the regret of each common representation and, when mu-GDP is not enough, the one that describes the
mechanism best.

Specs are validated *before* Prefect is imported or any flow starts, so an invalid spec fails in well under a second
and writes nothing; a spec whose cells are all in the lake and whose report is current is answered without Prefect.
Flows run on Prefect's ephemeral server unless ``PREFECT_API_URL`` points at a real one.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from flows.command_common import (
    Command,
    _add_run_args,
    _add_store_args,
    _check_workers,
    _prefect_env,
    _preflight,
    _runner,
    _spawn_workers,
    _start_api,
    _up_to_date,
)
from flows.commands_report import _sql
from flows.runners import run_flow
from gdpcore._validation import bounded_repr
from tasks.trace import phase

__all__ = ["RUN_COMMANDS", "analyze_extras", "best_representation_text", "check_plot_path", "write_analyze_plot"]

DEMO_SPEC = Path(__file__).resolve().parent.parent / "data" / "specs" / "demo.yaml"


def _flow_params(args: argparse.Namespace) -> dict[str, Any]:
    """The parameters every spec-driven flow (sweep, regret map, calibration sweep) takes from its command line."""
    return {
        "spec_path": str(args.spec),
        "lake": args.lake,
        "report": args.report,
        "force": args.force,
        "progress": not args.no_progress,
        "workers": args.workers,
    }


def _sweep(args: argparse.Namespace) -> int:
    from tasks.spec import load_grid_spec

    spec = load_grid_spec(args.spec, force=args.force)  # fail fast, before Prefect starts
    phase("spec-loaded")
    _check_workers(args)
    _preflight(args, object_store=True)
    plan = _up_to_date(spec, args)
    if plan is not None:
        from flows.pool_start import discard_pool
        from tasks.lake import default_report

        discard_pool()  # workers spawned at launch (flows.launch): nothing for them to do

        print(
            f"sweep {spec.name}: {plan.cells_total} cells (0 computed, {plan.cells_present} already in the lake); "
            "nothing to compute, report up to date"
        )
        print(f"report: {Path(args.report or default_report()).resolve()}")
        return 0
    _prefect_env(args.verbose)  # before the first Prefect import (and before the workers: they inherit it)
    _spawn_workers(args)  # a process pool starts computing now, while Prefect is imported and its server boots
    _start_api()  # boots while the flow is imported and its task runner built
    phase("server-starting")
    from flows.grid_sweep import grid_sweep

    phase("flow-imported")
    runner = _runner(args)
    phase("runner+server")
    summary = run_flow(
        grid_sweep,
        runner,
        **_flow_params(args),
    )
    phase("flow-returned")
    print(
        f"sweep {spec.name}: {summary.cells} cells ({summary.cells_computed} computed, {summary.cells_reused} "
        f"already in the lake), {summary.chunks_computed} chunk(s) computed, {summary.chunks_failed} failed"
    )
    print(f"report: {_shown(summary.report)}" if summary.report else "report: not published")
    phase("printed")
    return 0


def _regret_map(args: argparse.Namespace) -> int:
    from tasks.spec import load_grid_spec

    spec = load_grid_spec(args.spec, force=args.force)
    _check_workers(args)
    _preflight(args, object_store=True)  # an s3:// lake and report as for gdp sweep; the PNGs stay local
    from tasks.lake import default_report
    from tasks.object_store import is_url
    from tasks.publish import check_writable

    report = args.report or str(default_report())
    plots = getattr(args, "plots", None)
    _prefect_env(args.verbose)  # before the first Prefect import
    from flows.regret_map import choose_axes, plots_folder

    choose_axes(spec, args.x, args.y)  # bad axes fail before any work
    folder = plots_folder(report, spec.name, plots)
    check_writable(folder, "--plots folder" if plots else "plots folder")
    _start_api()  # boots while the flow is imported and its task runner built
    from flows.regret_map import regret_map

    result = run_flow(
        regret_map,
        _runner(args),
        **_flow_params(args),
        x=args.x,
        y=args.y,
        plots=str(folder),
    )
    print(f"regret map {spec.name}: {result.sweep.cells} cells, axes {result.y} vs {result.x}")
    if is_url(report) and not plots:
        print(
            f"plots: {folder}   (the report is on object storage: the PNGs are written here, not beside it; --plots DIR)"
        )
    for metric, path in result.heatmaps.items():
        print(f"  {metric:<10} {path}")
    if result.curve:
        print(f"  curve      {result.curve}   (worst-regret cell {result.worst_cell})")
    if result.sweep.report:  # None only for a sweep that did not publish (regret_map always publishes)
        print(f"report: {_shown(result.sweep.report)}")
    return 0


def _calibration_sweep(args: argparse.Namespace) -> int:
    from tasks.spec import load_calibration_spec

    spec = load_calibration_spec(args.spec, force=args.force)
    _check_workers(args)
    _preflight(args)
    from flows.runners import default_workers
    from tasks.calibrate import plan_calibration
    from tasks.lake import default_lake, default_report, members_current
    from tasks.publish import query_report, report_is_current

    lake, report = Path(args.lake or default_lake()), Path(args.report or default_report())
    ids, eval_key, chunks = plan_calibration(spec, lake, workers=args.workers or default_workers())
    if (
        not chunks
        and members_current(lake / "_calibration", spec.name, spec.spec_hash, ids, eval_key)
        and report_is_current(lake, report)
    ):  # planned before Prefect starts: nothing to compute, the report already shows it
        print(
            f"calibration sweep {spec.name}: {len(ids)} (sampling_rate, steps) cells, 0 computed; nothing to compute, "
            "report up to date"
        )
    else:
        _prefect_env(args.verbose)
        _start_api()  # boots while the flow is imported and its task runner built
        from flows.calibration_sweep import calibration_sweep

        result = run_flow(
            calibration_sweep,
            _runner(args),
            **_flow_params(args),
        )
        print(
            f"calibration sweep {spec.name}: {result.cells} (sampling_rate, steps) cells, {result.cells_computed} "
            f"computed, {result.cells_failed} without a solution"
        )
    name = spec.name.replace("'", "''")
    _, flagged = query_report(
        report,
        f"SELECT sampling_rate, steps, status FROM calibrations WHERE spec = '{name}' AND status <> 'ok' "
        "ORDER BY grid_index",
    )
    for q, steps, status in flagged:
        print(f"  sampling_rate={q:g}, steps={steps}: {status}")
    print(f"report: {report.resolve()}   (view: calibrations)")
    return 0


def _publish(args: argparse.Namespace) -> int:
    """Publishing is one local step: it runs without Prefect (no server to start, none to orphan when killed).
    Deployments and sweeps publish through the ``publish-report`` flow."""
    from tasks.lake import default_lake, default_report
    from tasks.object_store import is_url
    from tasks.publish import publish_lake

    lake: str | Path = args.lake if is_url(args.lake) else Path(args.lake or default_lake())
    if isinstance(lake, Path) and not lake.is_dir():  # a typo would otherwise publish an empty report over the real one
        raise ValueError(f"--lake {bounded_repr(str(lake))}: no such lake folder (sweeps and audits create it)")
    _preflight(args, prefect=False, object_store=True)
    result = publish_lake(lake, args.report or default_report())
    counts = ", ".join(f"{k}={v:,}" for k, v in result.counts.items())
    print(
        f"published {result.report} (snapshot {result.snapshot}{', reused' if result.reused_snapshot else ''}): "
        f"{counts}"
    )
    return 0


def _shown(report: str) -> str:
    """A report's address as printed: an object-store URL as given, a local path resolved."""
    from tasks.object_store import is_url

    return report if is_url(report) else str(Path(report).resolve())


def _demo(args: argparse.Namespace) -> int:
    import time

    from tasks.lake import default_report

    started = time.monotonic()
    ns = argparse.Namespace(
        spec=str(DEMO_SPEC),
        runner=args.runner,
        dask_address=None,
        workers=None,
        force=False,
        no_progress=False,
        verbose=False,
        lake=args.lake,
        report=args.report,
        x=None,
        y=None,
        plots=None,
    )
    _regret_map(ns)
    report = args.report or str(default_report())
    query = (
        "SELECT steps, round(sampling_rate, 4) AS q, min(noise_multiplier) FILTER (WHERE mu <= 1) AS sigma_for_mu_le_1, "
        "round(max(gdp_regret), 4) AS worst_gdp_regret FROM cells WHERE spec = 'demo' AND steps = 1000 "
        "GROUP BY ALL ORDER BY ALL"
    )
    print(f'\n$ gdp sql "{query}"')
    _sql(argparse.Namespace(report=report, query=query, format="table", timeout=None, memory_limit=None, threads=None))
    print(f"\ndemo finished in {time.monotonic() - started:.0f} s")
    return 0


def _sweep_args(p: argparse.ArgumentParser) -> None:
    _add_run_args(p)


def _regret_args(p: argparse.ArgumentParser) -> None:
    _add_run_args(p)
    p.add_argument("--x", help="heat-map x axis (a grid key; default: spec plot.x or the first varying key)")
    p.add_argument("--y", help="heat-map y axis (a grid key; default: spec plot.y or the second varying key)")
    p.add_argument(
        "--plots",
        metavar="DIR",
        help="folder for the PNGs (default: plots/<spec>/ next to a local report; ./plots/<spec>/ when the report "
        "is on object storage)",
    )


def _publish_args(p: argparse.ArgumentParser) -> None:
    _add_store_args(p)
    p.add_argument(
        "-v", "--verbose", action="store_true", help="accepted for compatibility (publishing starts no flow server)"
    )


def _demo_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runner", choices=("thread", "process"), default="process", help="task runner (default process)")
    _add_store_args(p)


# -- gdp analyze: the curve on demand ---------------------------------------------------------------------------------
_REPRESENTATION_NAMES = {
    "pure_dp": "eps-DP",
    "epsilon_delta": "(eps, delta)-DP",
    "zcdp": "rho-zCDP",
    "rdp": "an RDP curve",
    "gdp": "mu-GDP",
}
# The concise statements a guarantee is published as, simplest first: ties (regrets closer than REGRET_TIE) go to
# the simpler one. An RDP curve is a whole curve on an order grid (its regret depends on that grid, see
# gdpcore.representations), like the trade-off curve itself: it is listed, never named "best".
_SIMPLICITY = ("pure_dp", "gdp", "zcdp", "epsilon_delta")
REGRET_TIE = 1e-4
"""Regrets closer than this are reported as tied (below what a PLD-based regret estimate resolves at the default
discretisation, e.g. Laplace b = 1: eps-DP 3.4323% against (eps, 1e-5) 3.4322%, docs/references.md S000-5)."""
_CURVE_GRID_POINTS = 201
_EPS_PLOT_MAX = 700.0


def _curve_block(report: Any) -> dict[str, Any]:
    """Both sides of the certified bracket as the curves' vertices (FPR, FNR); an exact (closed-form) report gives f_mu
    at a fixed FPR grid instead (it has no vertices)."""
    import numpy as np

    from gdpcore import closed_form

    if report.exact:
        fpr = np.unique(np.concatenate([np.logspace(-10, 0, _CURVE_GRID_POINTS // 2 + 1), np.linspace(0, 1, 101)]))
        exact = {
            "fpr": fpr,
            "fnr": closed_form.get_beta_from_gdp(mu=float(report.mu), alpha=fpr),
            "bound": "exact",
            "points": int(fpr.size),
        }
        return {
            "form": "closed form f_mu (seed 000 Eq. 4) at the listed FPRs; the curve is convex between them",
            "pessimistic": exact,
            "optimistic": exact,
        }
    out: dict[str, Any] = {
        "form": "vertices of piecewise-linear curves, linear between consecutive vertices; the true curve lies "
        "between the two sides"
    }
    bounds = {
        "pessimistic": "lower bound on FNR (upper bound on attack TPR)",
        "optimistic": "upper bound on FNR (lower bound on attack TPR)",
    }
    for side, bound in bounds.items():
        try:
            a, b = report.breakpoints(side=side)
        except ValueError as exc:  # no optimistic side (RDP fallback, or a report built without it)
            out[side] = None
            out[f"{side}_reason"] = str(exc)
        else:
            out[side] = {"fpr": a, "fnr": b, "bound": bound, "points": int(a.size)}
    return out


def _representation_rows(report: Any, delta: float) -> list[dict[str, Any]]:
    """seed 000 Fig. 1(c) for this mechanism (:func:`gdpcore.representations.get_regret`), one row per
    representation; a representation the mechanism's kind cannot be stated in keeps its row, regret null and why."""
    from gdpcore.representations import REPRESENTATIONS, get_regret

    rows = []
    for rep in REPRESENTATIONS:
        try:
            row = get_regret(report, rep, delta=delta if rep == "epsilon_delta" else None).to_row()
        except (ValueError, NotImplementedError, TypeError, ArithmeticError) as exc:  # e.g. exp(eps0) overflows
            why = f"{type(exc).__name__}: {exc}" if isinstance(exc, ArithmeticError) else str(exc)
            row = {"representation": rep, "regret": None, "regret_bound": None, "note": f"not available: {why}"}
        row["name"] = _REPRESENTATION_NAMES[rep]
        rows.append(row)
    return rows


def _best(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    usable = [
        r
        for r in rows
        if r["representation"] in _SIMPLICITY and r.get("regret") is not None and math.isfinite(r["regret"])
    ]
    if not usable:
        return None
    low = min(r["regret"] for r in usable)
    tied = [r for r in usable if r["regret"] <= low + REGRET_TIE]
    return min(tied, key=lambda r: _SIMPLICITY.index(r["representation"]))


def analyze_extras(report: Any, *, delta: float = 1e-5) -> dict[str, Any]:
    """What ``gdp analyze --json`` adds to :meth:`gdpcore.PrivacyReport.summary`: ``curve`` (both sides of the
    bracket) and ``representations`` (the regret of each representation, seed 000 Eq. 24 / Fig. 1(c), eps at
    ``delta`` for the (eps, delta) row, and the best one)."""
    rows = _representation_rows(report, delta)
    best = _best(rows)
    return {
        "curve": _curve_block(report),
        "representations": {
            "delta": delta,
            "rows": rows,
            "best": None if best is None else best["representation"],
            "tie_tolerance": REGRET_TIE,
        },
    }


def _pct(x: float) -> str:
    return f"{100 * x:.3g}%"


def best_representation_text(report: Any, extras: dict[str, Any] | None = None) -> list[str]:
    """The text report's lines when mu-GDP is not a complete description (GDP regret >= 1e-2, seed 000 Prop. 4.1):
    the representation that describes the mechanism best, with its parameter and regret, against mu-GDP's."""
    from gdpcore import GDP_COMPLETE_REGRET
    from tasks.formatting import format_number

    if report.gdp_regret < GDP_COMPLETE_REGRET:
        return []
    reps = (extras or analyze_extras(report))["representations"]
    rows = {r["representation"]: r for r in reps["rows"]}
    gdp = rows["gdp"]
    best = rows.get(reps["best"] or "gdp", gdp)
    if best["representation"] == "gdp":
        return [
            f"  best statement  none describes it better than mu-GDP (regret {_pct(gdp['regret'])}, "
            f"{gdp['regret_bound']}): report the curve (--json, --plot)"
        ]
    param = ""
    if best["representation"] != "rdp":
        param = f" with {best['parameter_name']} = {format_number(best['parameter'], 4)} ({best['parameter_bound']})"
        if best["representation"] == "epsilon_delta":
            param += f" at delta = {best['delta']:g}"
    rdp = rows.get("rdp", {})
    curve = (
        f"; an RDP curve: {_pct(rdp['regret'])}, order-grid dependent"
        if rdp.get("regret") is not None and rdp["regret"] < best["regret"]
        else ""
    )
    return [
        f"  best statement  {best['name']}{param}: regret {_pct(best['regret'])} ({best['regret_bound']})",
        f"                  against {_pct(gdp['regret'])} for mu-GDP{curve} (seed 000 Fig. 1c; all rows: --json)",
    ]


def check_plot_path(path: str, overwrite: bool) -> None:
    """``--plot FILE`` is checked before any accounting: a .png name, not an existing file unless --overwrite."""

    if not str(path).lower().endswith(".png"):
        raise ValueError(f"--plot must name a .png file, got {bounded_repr(path)}")
    if Path(path).exists() and not overwrite:
        raise ValueError(f"--plot: {bounded_repr(path)} exists; choose another name or pass --overwrite")
    if Path(path).is_dir():
        raise ValueError(f"--plot: {bounded_repr(path)} is a folder")


def write_analyze_plot(report: Any, summary: dict[str, Any], path: str, *, title: str) -> Path:
    """The privacy card's figure (:func:`tasks.plots.tradeoff_figure`: attack TPR vs FPR, linear and log-log, with the
    mu-GDP and (eps, delta) curves) plus the |f - f_mu| panel (seed 000 Figs. 7-8), written atomically."""
    import numpy as np

    from tasks.plots import _pyplot, _save, tradeoff_figure

    curve = _curve_block(report)["pessimistic"]
    mu = float(report.mu)
    deltas = [row["delta"] for row in summary["epsilon"]]
    fig = tradeoff_figure(
        title,
        np.asarray(curve["fpr"]),
        np.asarray(curve["fnr"]),
        curve_label=f"this mechanism ({'exact' if report.exact else 'pessimistic: upper bound on attack TPR'})",
        mu=mu,
        # exp(eps) overflows past ~709 (and such a curve is TPR = 1 at every FPR > 0 on these axes anyway)
        eps_deltas=[(e, d) for e, d in ((float(report.epsilon(d)), d) for d in deltas[:2]) if e < _EPS_PLOT_MAX],
        mu_cutoff=summary.get("mu_certified_for_fpr_at_least") or None,
        difference=True,
        regret=float(report.gdp_regret),
    )
    out = Path(path)
    _save(fig, out)
    _pyplot().close(fig)
    return out


RUN_COMMANDS: dict[str, Command] = {
    "sweep": Command("sweep a grid spec into the lake and publish the report", _sweep_args, _sweep),
    "regret-map": Command(
        "sweep + regret/mu heat maps and the worst cell's trade-off curve", _regret_args, _regret_map
    ),
    "calibration-sweep": Command(
        "calibrate the noise multiplier over a (sampling_rate, steps) grid", _sweep_args, _calibration_sweep
    ),
    "publish": Command("compact the lake and atomically rebuild the DuckDB report", _publish_args, _publish),
    "demo": Command("tiny regret map on 2 cores, then a sample query", _demo_args, _demo),
}
