"""Per-cell A/B of two source trees: is one engine faster than the other on the same cells, and do its rows move?

On a shared or drifting machine one run of a grid against another says little: the same code's whole reference grid,
run in one process and alternated between trees, took 0.84-1.29 s in one sitting (benchmarks/RESULTS.md, "Engine
throughput, session 16"). This tool compares two trees cell by cell instead. Two worker processes are spawned, one per
tree (each imports ``gdpcore`` and ``tasks`` from its own tree), and warmed up. Each work unit is fed to both, in an
order that alternates per repeat. A unit is one cell of the mixed grid, or one (sigma, q) group of the reference grid
or of the CLI sweep's grid: a group shares single steps, as a batch does. Each unit keeps the best of ``--repeats``
CPU times per tree (this process's CPU clock in each worker: other jobs' bursts do not count). Per unit the tool
prints both times and their ratio, then the totals, the median and range of the ratios, and how far each tree's
reported upper ends of epsilon(1e-5), mu and the advantage moved between the trees.

    python -m benchmarks.ab BEFORE AFTER [--grid quick|mixed|reference|sweep] [--repeats 5]

BEFORE and AFTER are source trees (a directory holding ``gdpcore/``) or git revisions of this repository (checked out
into temporary worktrees, removed afterwards). The cells come from this tree's :mod:`benchmarks.bench_grid`, so both
trees get the same ones. Not part of ``make bench``: it measures a change, not the project.
"""

from __future__ import annotations

import argparse
import itertools
import math
import multiprocessing as mp
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

Cell = tuple[float, float, int]

_DELTAS = (1e-5, 1e-6, 1e-9)
_FPRS = (1e-10, 1e-8, 1e-6, 1e-4, 1e-3, 1e-2, 1e-1)


def sweep_groups() -> list[list[Cell]]:
    """20 (sigma, q) groups of the CLI benchmark's sweep grid (every fifth sigma and q of its 25 x 20, all 20 T of
    10-200): 400 cells."""
    import numpy as np

    sigmas = np.geomspace(0.8, 4.0, 25)[::5]
    qs = np.geomspace(0.001, 0.05, 20)[::5]
    ts = np.geomspace(10, 200, 20)
    return [[(float(s), float(q), round(float(t))) for t in ts] for s in sigmas for q in qs]


def work_units(grid: str) -> list[list[Cell]]:
    """The units a grid is compared on: single cells (mixed, quick) or whole (sigma, q) groups (reference, sweep)."""
    from benchmarks import bench_grid as bg

    if grid == "mixed":
        return [[c] for c in bg.mixed_cells()]
    if grid == "quick":
        return [[c] for c in bg.quick_cells()]
    if grid == "reference":
        return [list(g) for _, g in itertools.groupby(bg._cells(), key=lambda c: c[:2])]
    if grid == "sweep":
        return sweep_groups()
    raise ValueError(f"grid must be quick, mixed, reference or sweep, got {grid!r}")


def _worker(tree: str, conn: Any) -> None:
    """One tree's side: import its engine, warm up, then time each unit sent (CPU seconds) and send back the time
    and the rows' upper ends (epsilon at the first delta, mu, advantage)."""
    sys.path.insert(0, tree)
    for name in [m for m in sys.modules if m.split(".")[0] in ("gdpcore", "tasks")]:
        del sys.modules[name]
    import gdpcore as g
    from tasks.grid_table import analyze_grid_table

    def run(cells: Sequence[Cell]) -> tuple[float, list[tuple[float, float, float]]]:
        mechs = [g.SubsampledGaussian(noise_multiplier=s, sampling_rate=q, steps=t) for s, q, t in cells]
        c0 = time.process_time()
        table = analyze_grid_table(mechs, deltas=list(_DELTAS), fprs=list(_FPRS))
        seconds = time.process_time() - c0
        eps = [e[0] for e in table.column("epsilon").to_pylist()]
        rows = list(zip(eps, table.column("mu").to_pylist(), table.column("advantage").to_pylist(), strict=True))
        return seconds, rows

    run([(1.0, 0.01, 100), (2.0, 0.001, 1000)])  # warm-up: lazy imports and first-call costs
    conn.send(str(Path(g.__file__).resolve().parents[1]))
    while (unit := conn.recv()) is not None:
        conn.send(run(unit))


class BadTree(ValueError):
    """BEFORE or AFTER names neither a source tree nor a git revision of this repository."""


@contextmanager
def _tree(spec: str) -> Iterator[str]:
    """A source tree for ``spec``: the directory itself, or a temporary worktree of a git revision of this repo
    (:class:`BadTree` when it is neither)."""
    path = Path(spec)
    if (path / "gdpcore").is_dir():
        yield str(path.resolve())
        return
    with tempfile.TemporaryDirectory(prefix="gdp-ab-") as tmp:
        where = str(Path(tmp) / "tree")
        added = subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", where, spec], capture_output=True, text=True
        )
        if added.returncode != 0:
            why = (added.stderr.strip().splitlines() or ["git worktree add failed"])[-1]
            raise BadTree(f"{spec!r} is neither a directory holding gdpcore/ nor a git revision of this repo ({why})")
        try:
            yield where
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", where], check=False, capture_output=True
            )


def _moved(a: float | None, b: float | None) -> float:
    """Relative change from ``a`` to ``b`` (0 where both are equal, NaN where either is missing or infinite)."""
    if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)):
        return 0.0 if a == b else math.nan
    return 0.0 if a == b else (b - a) / max(abs(a), 1e-300)


def compare(
    trees: Sequence[str], units: Sequence[Sequence[Cell]], repeats: int
) -> list[tuple[list[Cell], list[float], list[Any]]]:
    """(unit, best CPU seconds per tree, rows per tree) for every unit, trees fed alternately."""
    ctx = mp.get_context("spawn")
    conns, procs = [], []
    for tree in trees:
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_worker, args=(tree, child))
        proc.start()
        conns.append(parent)
        procs.append(proc)
    try:
        for tree, conn in zip(trees, conns, strict=True):
            got = conn.recv()
            if Path(got) != Path(tree).resolve():
                raise RuntimeError(f"the worker for {tree} imported gdpcore from {got}")
        out = []
        for unit in units:
            best = [math.inf, math.inf]
            rows: list[Any] = [None, None]
            for r in range(repeats):
                for i in (0, 1) if r % 2 == 0 else (1, 0):
                    conns[i].send(list(unit))
                    seconds, rows[i] = conns[i].recv()
                    best[i] = min(best[i], seconds)
            out.append((list(unit), best, rows))
        return out
    finally:
        for conn, proc in zip(conns, procs, strict=True):
            if proc.is_alive():
                try:
                    conn.send(None)
                except OSError:  # the worker is going away already: nothing to tell it
                    pass
            proc.join(timeout=30)
            if proc.is_alive():
                proc.terminate()


def report(results: Sequence[tuple[list[Cell], list[float], list[Any]]], names: Sequence[str]) -> str:
    """The Markdown table of a comparison and its summary lines."""
    lines = [
        f"| unit (sigma, q, T) | {names[0]} s | {names[1]} s | speed-up |",
        "|---|---|---|---|",
    ]
    ratios = []
    moved: dict[str, list[float]] = {"epsilon(1e-5)": [], "mu": [], "advantage": []}
    for unit, best, rows in results:
        ratio = best[0] / best[1]
        ratios.append(ratio)
        (s, q, t), t_last = unit[0], unit[-1][2]
        label = (
            f"({s:.3g}, {q:.3g}, {t})" if len(unit) == 1 else f"({s:.3g}, {q:.3g}), T {t}-{t_last} ({len(unit)} cells)"
        )
        lines.append(f"| {label} | {best[0]:.4f} | {best[1]:.4f} | x{ratio:.2f} |")
        for before, after in zip(rows[0], rows[1], strict=True):
            for key, a, b in zip(moved, before, after, strict=True):
                moved[key].append(_moved(a, b))
    total = [sum(r[1][i] for r in results) for i in (0, 1)]
    lines += [
        "",
        f"- Total (sum of best CPU seconds): {names[0]} {total[0]:.3f} s, {names[1]} {total[1]:.3f} s: "
        f"**x{total[0] / total[1]:.3f}**; per unit median x{statistics.median(ratios):.2f}, "
        f"range x{min(ratios):.2f} .. x{max(ratios):.2f} ({len(ratios)} units).",
    ]
    for key, values in moved.items():
        finite = [v for v in values if math.isfinite(v)]
        span = f"{min(finite):+.2e} .. {max(finite):+.2e}" if finite else "none comparable"
        lines.append(f"- Upper ends of {key}, {names[1]} against {names[0]}: relative change {span}.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", help="a source tree or a git revision")
    ap.add_argument("after", help="a source tree or a git revision")
    ap.add_argument("--grid", choices=("quick", "mixed", "reference", "sweep"), default="quick")
    ap.add_argument("--repeats", type=int, default=5, help="timings per unit and tree; the best is kept")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error(f"--repeats must be at least 1, got {args.repeats}")
    units = work_units(args.grid)
    try:
        with ExitStack() as stack:
            trees = [stack.enter_context(_tree(spec)) for spec in (args.before, args.after)]
            results = compare(trees, units, args.repeats)
    except BadTree as why:
        ap.error(str(why))
    print(
        f"before = {args.before}, after = {args.after}; grid {args.grid}, best of {args.repeats} CPU times per unit\n"
    )
    print(report(results, ("before", "after")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
