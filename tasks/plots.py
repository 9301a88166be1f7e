"""PNG plots from a published report: regret / mu heat maps over two grid axes, and one cell's trade-off curve
against its mu-GDP curve and its (epsilon, delta) curves. Everything is read through :func:`tasks.publish.query_report`
(read-only), so plots show exactly what the report says."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from tasks.publish import query_report

__all__ = ["METRICS", "plot_curve", "plot_heatmap"]

METRICS = ("mu", "gdp_regret", "advantage", "bayes_security")
_AXES = ("noise_multiplier", "sampling_rate", "steps", "sensitivity", "scale", "sigma", "rr_epsilon")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _q(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


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
) -> dict[str, Any]:
    """Heat map of ``metric`` over grid axes ``x`` and ``y`` for one spec; other axes fixed or reduced (max/min/mean)."""
    for name, value, allowed in (
        ("x", x, _AXES),
        ("y", y, _AXES),
        ("metric", metric, METRICS),
        ("reduce", reduce, ("max", "min", "mean")),
    ):
        if value not in allowed:
            raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
    where = [f"spec = {_q(spec)}", "status = 'ok'"]
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
                ax.text(i, j, f"{v:.2g}", ha="center", va="center", fontsize=7, color="w")
    others = "fixed " + ", ".join(f"{k}={v}" for k, v in fixed.items()) if fixed else f"{reduce} over other axes"
    ax.set_title(f"{spec}: {metric} ({others})", fontsize=9)
    fig.colorbar(im, ax=ax, label=metric)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return {"path": str(out), "x": xs, "y": ys, "values": grid}


def plot_curve(report: str | Path, cell_id: str, *, out: str | Path, spec: str | None = None) -> dict[str, Any]:
    """The cell's pessimistic trade-off curve (from ``curves``) with f_mu and the f_{eps,delta} of each stored delta."""
    import numpy as np

    import gdpcore

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
        f"SELECT delta, epsilon FROM epsilons WHERE cell_id = {_q(cell_id)} AND spec = {_q(spec_name)} ORDER BY delta",
    )
    alpha = np.linspace(0.0, 1.0, 401)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.2, 5), constrained_layout=True)
    ax.plot([p[0] for p in pts], [p[1] for p in pts], "k-", lw=2, label="trade-off curve f (pessimistic)")
    if mu is not None and math.isfinite(mu):
        ax.plot(alpha, gdpcore.get_beta_from_gdp(mu=mu, alpha=alpha), "C0--", label=f"mu-GDP, mu={mu:.3g}")
    for k, (d, e) in enumerate(eps):
        if e is not None and math.isfinite(e):
            beta = gdpcore.get_beta_from_epsilon_delta(epsilon=e, delta=d, alpha=alpha)
            ax.plot(alpha, beta, f"C{k + 1}:", label=f"({e:.3g}, {d:g})-DP")
    ax.plot([0, 1], [1, 0], color="0.7", lw=0.8)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("FPR (type I error)")
    ax.set_ylabel("FNR (type II error)")
    import json

    params = {k: v for k, v in json.loads(mech).items() if k not in ("schema", "kind", "neighbouring")}
    label = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items())
    ax.set_title(f"{spec_name}: {json.loads(mech)['kind']}({label})", fontsize=8)
    ax.legend(fontsize=7)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return {"path": str(out), "points": len(pts), "mu": mu}
