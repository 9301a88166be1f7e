"""``regret_map``: a grid sweep plus heat maps of GDP regret and mu over two chosen axes, and the trade-off curve of
the cell where mu-GDP describes the mechanism worst. PNGs go to ``plots`` (``--plots DIR``), by default next to a
local report (``<report dir>/plots/<spec>/``) and, for a report on object storage, to ``./plots/<spec>/``; they
are listed in a Prefect artifact.

    gdp regret-map data/specs/dpsgd-cifar-map.yaml --x sampling_rate --y noise_multiplier
    gdp regret-map SPEC.yaml --lake s3://bucket/lake --report s3://bucket/reports/privacy.duckdb --plots figures/

Why a local folder for an ``s3://`` report rather than uploading the PNGs beside it: the plots are for the person
who ran the command, redrawn from the report in seconds (``gdp plot``); uploading them would need write access to
the report's prefix for what is only a view, leave objects no publish or garbage collection knows about, and
make readers of the report depend on files that can disagree with the report a later publish installs. Every plot
of one run reads one downloaded copy of the report (:func:`tasks.plots.report_version`), so the heat maps, the
worst cell and its curve come from the same report even while another machine publishes.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.artifacts import create_link_artifact, create_markdown_artifact

from flows.grid_sweep import SweepSummary, _key, run_sweep
from flows.naming import run_name
from flows.runners import runner_from_env
from gdpcore.kinds import flat_kinds
from tasks.lake import default_report
from tasks.object_store import is_url
from tasks.plots import heatmap_filename, plot_curve, plot_heatmap, report_version
from tasks.report_query import query_report
from tasks.safe_yaml import shown
from tasks.schema import COMPLETE_CELLS_SQL
from tasks.spec import GridSpec, load_grid_spec

__all__ = ["RegretMap", "plots_folder", "regret_map"]


@dataclasses.dataclass(frozen=True)
class RegretMap:
    sweep: SweepSummary
    x: str
    y: str
    heatmaps: dict[str, str]
    curve: str | None
    worst_cell: str | None


@task(name="plot-heatmap")
def render_heatmap(
    report: str, spec: str, x: str, y: str, metric: str, out: str, fixed: dict[str, Any], reduce: str
) -> str:
    return plot_heatmap(report, spec, x=x, y=y, metric=metric, out=out, fixed=fixed, reduce=reduce)["path"]


@task(name="plot-curve")
def render_curve(report: str, spec: str, cell_id: str, out: str) -> str:
    return plot_curve(report, cell_id, out=out, spec=spec)["path"]


def plots_folder(report: str, spec_name: str, plots: str | None = None) -> Path:
    """Where the PNGs go: ``plots`` when given, else ``<report dir>/plots/<spec>`` for a local report and
    ``./plots/<spec>`` (the current folder) for a report on object storage (module docstring: why not beside it)."""
    if plots:
        return Path(plots).resolve()
    if is_url(report):
        return Path("plots").resolve() / spec_name
    return Path(report).resolve().parent / "plots" / spec_name


def choose_axes(spec: GridSpec, x: str | None, y: str | None) -> tuple[str, str, dict[str, Any], str]:
    """Axes from the arguments, else the spec's ``plot`` block, else the first two axes with more than one value."""
    if spec.kind not in flat_kinds():  # heat maps read typed parameter columns, which compositions do not have
        raise ValueError(
            f"regret-map draws heat maps over the parameter columns of a flat kind; spec {spec.name!r} sweeps a "
            f"{spec.kind} (run 'gdp sweep' and query its swept values in the report's axes view)"
        )
    fixed: dict[str, Any] = {}
    reduce = "max"
    if spec.plot is not None:
        x = x or spec.plot.x
        y = y or spec.plot.y
        fixed = dict(spec.plot.fixed)
        reduce = spec.plot.reduce
    varying = [k for k, v in spec.axes().items() if len(v) > 1] or list(spec.grid)
    x = x or varying[0]
    y = y or next((k for k in varying if k != x), None)
    for name, value in (("x", x), ("y", y)):
        if value is None or value not in spec.grid:
            raise ValueError(f"--{name} must be one of the grid keys {', '.join(spec.grid)}, got {shown(value)}")
    assert x is not None and y is not None  # checked just above
    if x == y:
        raise ValueError(f"--x and --y must differ, got {shown(x)} twice")
    return x, y, {k: v for k, v in fixed.items() if k not in (x, y)}, reduce


@flow(name="regret-map", task_runner=runner_from_env(), flow_run_name=run_name("regret-map", "spec_path"))
def regret_map(
    spec_path: str,
    lake: str | None = None,
    report: str | None = None,
    x: str | None = None,
    y: str | None = None,
    force: bool = False,
    progress: bool = False,
    workers: int | None = None,
    plots: str | None = None,
) -> RegretMap:
    """Sweep ``spec_path`` (:func:`flows.grid_sweep.run_sweep`, a local or ``s3://`` lake and report), then draw the
    heat maps and the worst cell's curve from the published report into :func:`plots_folder`."""
    spec = load_grid_spec(spec_path, force=force)
    x, y, fixed, reduce = choose_axes(spec, x, y)  # bad axes fail here, before any work
    report = str(report or default_report())
    sweep = run_sweep(
        spec, lake=lake, report=report, publish=True, progress=progress, workers=workers, release_workers=True
    )

    folder = plots_folder(report, spec.name, plots)
    with report_version(report) as source:  # an s3:// report: one private copy read by every plot below
        heatmaps = {
            metric: render_heatmap(
                source,
                spec.name,
                x,
                y,
                metric,
                str(folder / heatmap_filename(metric, x, y, fixed, reduce)),
                fixed,
                reduce,
            )
            for metric in ("gdp_regret", "mu")
        }
        _, worst = query_report(
            source,
            f"SELECT cell_id FROM cells WHERE spec = '{spec.name}' AND {COMPLETE_CELLS_SQL} "
            "ORDER BY gdp_regret DESC NULLS LAST, cell_id LIMIT 1",
        )
        worst_cell = worst[0][0] if worst else None
        curve = (
            render_curve(source, spec.name, worst_cell, str(folder / f"curve_{worst_cell}.png")) if worst_cell else None
        )

    lines = [
        f"# Regret map `{spec.name}`",
        "",
        f"Axes: x = `{x}`, y = `{y}`; other axes: "
        + (", ".join(f"{k}={v}" for k, v in fixed.items()) if fixed else f"{reduce} over them"),
        "",
    ]
    lines += [f"- {metric}: `{path}`" for metric, path in heatmaps.items()]
    if curve:
        lines.append(f"- trade-off curve of the worst-regret cell `{worst_cell}`: `{curve}`")
    lines.append(f"- report: `{report if is_url(report) else Path(report).resolve()}`")
    create_markdown_artifact(
        key=_key("regret-map", spec.name), markdown="\n".join(lines), description="Regret / mu heat maps (PNG paths)"
    )
    # Each PNG as a link artifact (Prefect's image artifacts need an http(s) URL; local files are file:// links).
    pngs = {**{f"{m}-map": p for m, p in heatmaps.items()}, **({"worst-curve": curve} if curve else {})}
    for kind, path in pngs.items():
        create_link_artifact(
            key=_key(f"regret-map-{kind.replace('_', '-')}", spec.name),
            link=Path(path).resolve().as_uri(),
            link_text=Path(path).name,
            description=f"{kind} PNG of {spec.name}",
        )
    return RegretMap(sweep=sweep, x=x, y=y, heatmaps=heatmaps, curve=curve, worst_cell=worst_cell)


if __name__ == "__main__":
    import sys

    regret_map(sys.argv[1])
