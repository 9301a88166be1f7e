"""PNG plots from a published report: regret / mu heat maps over two grid axes, and one cell's trade-off curve
against its mu-GDP curve and its (epsilon, delta) curves. Everything is read through :func:`tasks.report_query.query_report`
(read-only), so plots show exactly what the report says.

One curve convention everywhere (sweeps and privacy cards, :func:`tradeoff_figure`): the highest attack TPR at each
FPR, on a linear panel and a log-log panel (the low-FPR region where membership inference matters); the diagonal is
random guessing. Default file names encode everything that defines a plot (:func:`heatmap_filename`), so two
different plots never share a file, and an explicit ``out`` that exists is not overwritten unless asked.

A report on object storage (``s3://...``) is read the way ``gdp sql`` reads it (:func:`tasks.report_query.local_report`:
the small report file downloaded, its snapshot read through s3fs); :func:`report_version` lets several plots share
one download, so they all show the same version of the report. The PNGs themselves are always local files.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tasks.report_query import query_report
from tasks.schema import COMPLETE_CELLS_SQL

__all__ = ["METRICS", "heatmap_filename", "plot_curve", "plot_heatmap", "report_version", "tradeoff_figure"]

METRICS = ("mu", "gdp_regret", "advantage", "bayes_security")
_AXES = (
    "noise_multiplier",
    "sampling_rate",
    "steps",
    "sensitivity",
    "scale",
    "sigma",
    "rr_epsilon",
    "noise_parameter",
    "rr_num_buckets",
    "dataset_size",
    "batch_size",
    "standard_deviation",
    "truncated_batch_size",
    "rho",
    "xi",
    "steps_per_epoch",
    "epochs",
)


@contextlib.contextmanager
def report_version(report: str | Path) -> Iterator[str]:
    """The report file every plot inside the ``with`` block reads: ``report`` itself when local; for an ``s3://``
    report one private downloaded copy (removed afterwards), so the plots of one command show one version of it
    even while another machine publishes. A message naming the copy names the URL instead."""
    from tasks.object_store import is_url
    from tasks.report_query import local_report

    if not is_url(str(report)):
        yield str(report)
        return
    with local_report(report) as path:
        try:
            yield str(path)
        except ValueError as exc:
            if str(path) not in str(exc):
                raise
            raise ValueError(str(exc).replace(str(path), str(report))) from None


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _q(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _num(v: Any) -> str:
    """1000.0 -> '1000', 0.020000000000000004 -> '0.02'."""
    return f"{v:g}" if isinstance(v, float | int) and not isinstance(v, bool) else str(v)


def heatmap_filename(metric: str, x: str, y: str, fixed: dict[str, Any] | None, reduce: str) -> str:
    """``<metric>_<y>_vs_<x>__<fixed or reduce>.png``: the name says which plot it is."""
    which = "_".join(f"{k}={_num(v)}" for k, v in sorted((fixed or {}).items())) or f"{reduce}-over-others"
    return f"{metric}_{y}_vs_{x}__{which}.png"


def _check_out(out: Path, overwrite: bool) -> None:
    if out.exists() and not overwrite:
        raise ValueError(f"{str(out)!r} exists: choose another --out or pass --overwrite")


def _save(fig: Any, out: Path, root: Path | None = None) -> None:
    """Write the PNG atomically, never through a symbolic link (:func:`tasks.safe_write.atomic_write`; ``root``: the
    output folder, default ``out``'s)."""
    from tasks.safe_write import atomic_write

    atomic_write(out, lambda f: fig.savefig(f, format="png", dpi=110), root=root)


def tradeoff_figure(
    title: str,
    fpr: Any,
    fnr: Any,
    *,
    curve_label: str,
    mu: float | None = None,
    eps_deltas: Sequence[tuple[float, float]] = (),
    claimed: tuple[float, float, str] | None = None,
    mu_cutoff: float | None = None,
    difference: bool = False,
    regret: float | None = None,
) -> Any:
    """The trade-off curve as attack TPR (= 1 - FNR) vs FPR, linear and log-log, with the mu-GDP curve, the
    (eps, delta)-DP curves and, for a published claim, the region its (eps, delta) allows (shaded).

    ``difference=True`` adds a third panel, |f - f_mu| against FPR on a log x axis (seed 000 App. F, Figs. 7-8: the
    low-FPR region where mu-GDP can misstate the curve), with 2 x ``regret`` marked when given (the paper's
    observation that the largest vertical gap is roughly 2 Delta); ``fpr``/``fnr`` are the curve's vertices (the
    curve is linear between them)."""
    import textwrap

    import numpy as np

    import gdpcore

    plt = _pyplot()
    fpr = np.asarray(fpr, dtype=float)
    tpr = 1.0 - np.asarray(fnr, dtype=float)
    grid = np.unique(np.concatenate([np.logspace(-10, 0, 400), np.linspace(0, 1, 401)]))
    show_difference = difference and mu is not None and math.isfinite(mu)
    fig, axes = plt.subplots(
        1, 3 if show_difference else 2, figsize=(15 if show_difference else 10, 4.8), constrained_layout=True
    )
    for ax, log in zip(axes[:2], (False, True), strict=True):
        if claimed is not None:
            c_eps, c_delta, c_acc = claimed
            allowed = 1.0 - np.asarray(gdpcore.get_beta_from_epsilon_delta(epsilon=c_eps, delta=c_delta, alpha=grid))
            ax.fill_between(
                grid, 1e-12 if log else 0.0, allowed, color="C3", alpha=0.12, lw=0,
                label=f"claimed ({c_eps:g}, {c_delta:.0e})-DP ({c_acc}): attacks allowed",
            )  # fmt: skip
            ax.plot(grid, allowed, color="C3", lw=0.8)
        ax.plot(fpr, tpr, "k-", lw=2, label=curve_label)
        if mu is not None and math.isfinite(mu):
            ax.plot(grid, 1 - np.asarray(gdpcore.get_beta_from_gdp(mu=mu, alpha=grid)), "C0--", label=f"{mu:.3g}-GDP")
        for k, (e, d) in enumerate(eps_deltas):
            if e is not None and math.isfinite(e):
                beta = np.asarray(gdpcore.get_beta_from_epsilon_delta(epsilon=e, delta=d, alpha=grid))
                ax.plot(grid, 1 - beta, f"C{k + 1}:", label=f"({e:.3g}, {d:.0e})-DP")
        ax.plot([1e-10 if log else 0, 1], [1e-10 if log else 0, 1], color="0.6", lw=0.8, label="random guessing")
        ax.set_xlabel("attack FPR")
        ax.set_ylabel("highest attack TPR")
        if log:
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlim(1e-10, 1)
            ax.set_ylim(1e-10, 1.05)
            ax.set_title("log-log: the low-FPR region", fontsize=9)
            if mu_cutoff and mu_cutoff > 1.5e-10:  # at the axis edge the whole range is certified: no mark
                ax.axvline(mu_cutoff, color="0.5", lw=0.6, ls="-.")
                ax.text(mu_cutoff, 2e-10, " mu certified to the right", fontsize=7, color="0.4")
        else:
            ax.set_xlim(0, 1)
            ax.set_ylim(0, 1.01)
            ax.set_title("linear", fontsize=9)
    axes[0].legend(fontsize=7, loc="lower right")
    if show_difference:
        assert mu is not None  # show_difference implies it
        _difference_panel(axes[2], fpr, 1.0 - tpr, mu=mu, regret=regret)
    fig.suptitle("\n".join(textwrap.wrap(title, 110)), fontsize=9)
    return fig


def _difference_panel(ax: Any, fpr: Any, fnr: Any, *, mu: float, regret: float | None) -> None:
    """|f(alpha) - f_mu(alpha)| on a log FPR axis (seed 000 Figs. 7-8, right panels)."""
    import numpy as np

    import gdpcore

    grid = np.logspace(-10, 0, 2001)
    order = np.argsort(fpr, kind="stable")
    f = np.interp(grid, np.asarray(fpr)[order], np.asarray(fnr)[order])  # linear between vertices: the curve itself
    gap = np.abs(f - np.asarray(gdpcore.get_beta_from_gdp(mu=mu, alpha=grid)))
    ax.plot(grid, gap, "k-", lw=1.5, label=f"|f - f_mu|, mu = {mu:.3g}")
    if regret is not None and math.isfinite(regret) and regret > 0:
        ax.axhline(2 * regret, color="C3", lw=0.8, ls="--", label=f"2 x GDP regret = {2 * regret:.3g}")
    ax.set_xscale("log")
    ax.set_xlim(1e-10, 1)
    ax.set_ylim(0, max(float(gap.max()), 2 * (regret or 0.0), 1e-6) * 1.15)
    ax.set_xlabel("attack FPR")
    ax.set_ylabel("|FNR of the curve - FNR of mu-GDP|")
    ax.set_title("difference to the mu-GDP curve (log FPR)", fontsize=9)
    ax.legend(fontsize=7, loc="upper left")


def plot_heatmap(
    report: str | Path,
    spec: str,
    *,
    x: str,
    y: str,
    metric: str,
    out: str | Path,
    fixed: dict[str, Any] | None = None,
    reduce: str = "max",
    overwrite: bool = True,
) -> dict[str, Any]:
    """Heat map of ``metric`` over grid axes ``x`` and ``y`` for one spec; other axes fixed or reduced (max/min/mean).

    ``overwrite=False`` refuses an existing ``out`` (the CLI's default for an explicit ``--out``)."""
    for name, value, allowed in (
        ("x", x, _AXES),
        ("y", y, _AXES),
        ("metric", metric, METRICS),
        ("reduce", reduce, ("max", "min", "mean")),
    ):
        if value not in allowed:
            raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
    _check_out(Path(out), overwrite)
    where = [f"spec = {_q(spec)}", COMPLETE_CELLS_SQL]
    for key, value in (fixed or {}).items():
        if key not in _AXES:
            raise ValueError(f"fixed.{key}: not a grid axis ({', '.join(_AXES)})")
        where.append(f"{key} = {float(value)!r}")
    cols, rows = query_report(
        report,
        f"SELECT {x} AS x, {y} AS y, {reduce}({metric}) AS v, count(*) AS n FROM cells WHERE {' AND '.join(where)} "
        "GROUP BY ALL ORDER BY x, y",
    )
    if not rows:
        raise ValueError(
            f"no ok cells of spec {spec!r} in {report} for {x} x {y}" + (f" with {fixed}" if fixed else "")
        )
    xs = sorted({r[0] for r in rows})
    ys = sorted({r[1] for r in rows})
    grid = [[math.nan] * len(xs) for _ in ys]
    for xv, yv, v, _n in rows:
        grid[ys.index(yv)][xs.index(xv)] = math.nan if v is None else v
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(1.2 + 0.9 * len(xs), 1.2 + 0.6 * len(ys)), constrained_layout=True)
    im = ax.imshow(grid, origin="lower", aspect="auto", cmap="viridis")
    ax.set_xticks(range(len(xs)), [f"{v:.3g}" for v in xs], rotation=45, ha="right")
    ax.set_yticks(range(len(ys)), [f"{v:.3g}" for v in ys])
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    for j, row in enumerate(grid):
        for i, v in enumerate(row):
            if not math.isnan(v):
                light = im.norm(v) > 0.6  # viridis turns yellow: dark text stays readable
                ax.text(i, j, f"{v:.2g}", ha="center", va="center", fontsize=7, color="k" if light else "w")
    others = "fixed " + ", ".join(f"{k}={_num(v)}" for k, v in fixed.items()) if fixed else f"{reduce} over other axes"
    import textwrap

    ax.set_title("\n".join(textwrap.wrap(f"{spec}: {metric} ({others})", max(30, 9 * len(xs)))), fontsize=9)
    fig.colorbar(im, ax=ax, label=metric)
    out = Path(out)
    _save(fig, out)
    plt.close(fig)
    return {"path": str(out), "x": xs, "y": ys, "values": grid}


def plot_curve(
    report: str | Path, cell_id: str, *, out: str | Path, spec: str | None = None, overwrite: bool = True
) -> dict[str, Any]:
    """The cell's pessimistic trade-off curve (from ``curves``) with its mu-GDP curve and the (eps, delta)-DP curve
    of each stored delta, as attack TPR vs FPR (linear and log-log panels)."""
    import json

    _check_out(Path(out), overwrite)
    spec_filter = f" AND spec = {_q(spec)}" if spec else ""
    _, cells = query_report(
        report, f"SELECT spec, mu, mechanism_json FROM cells WHERE cell_id = {_q(cell_id)}{spec_filter} LIMIT 1"
    )
    if not cells:
        raise ValueError(f"cell_id {cell_id!r} is not in {report}")
    spec_name, mu, mech = cells[0]
    _, pts = query_report(
        report,
        f"SELECT fpr, fnr FROM curves WHERE cell_id = {_q(cell_id)} AND spec = {_q(spec_name)} ORDER BY fpr",
    )
    _, eps = query_report(
        report,
        f"SELECT epsilon, delta FROM epsilons WHERE cell_id = {_q(cell_id)} AND spec = {_q(spec_name)} ORDER BY delta",
    )
    m = json.loads(mech)
    params = {k: v for k, v in m.items() if k not in ("schema", "kind", "neighbouring")}
    label = ", ".join(f"{k}={_num(v)}" for k, v in params.items())
    fig = tradeoff_figure(
        f"{spec_name}: {m['kind']}({label})",
        [p[0] for p in pts],
        [p[1] for p in pts],
        curve_label="this cell (pessimistic: upper bound on attack TPR)",
        mu=mu,
        eps_deltas=[(e, d) for e, d in eps],
    )
    out = Path(out)
    _save(fig, out)
    _pyplot().close(fig)
    return {"path": str(out), "points": len(pts), "mu": mu}
