"""Per-cell cost of the grid engine against its FFT floor, and where the rest of a cell's time goes.

Shared by the grid benchmarks (:mod:`benchmarks.bench_grid`): the floor of a cell is one float64 rfft + irfft round
trip at the length the composition itself uses (scipy's ``next_fast_len`` of the composed support, as
:mod:`gdpcore.pld.powers` pads it); a cell's time is its wall time in the engine including the flat report row
(:func:`gdpcore.grid.report_row`). Where the time goes is read from :mod:`cProfile`: every function's self time is
charged to the nearest gdpcore (or tasks) function above it in the call graph (numpy / scipy / builtins called by
an engine function count as that function's), except FFT work, which is charged to "FFT" and named after the
engine function that asked for it.
"""

from __future__ import annotations

import cProfile
import math
import pstats
import time
from collections.abc import Callable, Sequence
from typing import Any

DELTAS = (1e-5, 1e-6, 1e-9)
FPRS = (1e-10, 1e-8, 1e-6, 1e-4, 1e-3, 1e-2, 1e-1)

_FLOOR_CACHE: dict[int, float] = {}


def fft_length(n: int) -> int:
    """The transform length a composition of support ``n`` uses (:func:`gdpcore.pld.powers` pads to it)."""
    from scipy import fft as sp_fft

    return int(sp_fft.next_fast_len(int(n), real=True))


def fft_floor_seconds(n: int, repeats: int = 5) -> float:
    """Best-of time of one float64 rfft + irfft at ``fft_length(n)``: the floor of any composition of that size."""
    import numpy as np
    from scipy import fft as sp_fft

    m = fft_length(n)
    if m not in _FLOOR_CACHE:
        x = np.random.default_rng(0).random(m)
        best = math.inf
        for _ in range(repeats):
            t0 = time.perf_counter()
            sp_fft.irfft(sp_fft.rfft(x, m), m)
            best = min(best, time.perf_counter() - t0)
        _FLOOR_CACHE[m] = best
    return _FLOOR_CACHE[m]


def mechanisms(cells: Sequence[tuple[float, float, int]]) -> list[Any]:
    import gdpcore as g

    return [g.SubsampledGaussian(noise_multiplier=s, sampling_rate=q, steps=t) for s, q, t in cells]


def grid_table(cells: Sequence[tuple[float, float, int]]) -> Any:
    """(b): the full labelled report of every cell as the pipeline stores it (``tasks.grid_table``)."""
    from tasks.grid_table import analyze_grid_table

    return analyze_grid_table(mechanisms(cells), deltas=list(DELTAS), fprs=list(FPRS))


def timed_cells(cells: Sequence[tuple[float, float, int]]) -> list[dict[str, Any]]:
    """Analyse ``cells`` in one ``analyze_grid`` call and time each cell in the batch: from the previous cell's row to
    this cell's row (a group's shared set-up is charged to its first cell). One dict per cell, in input order:
    ``seconds`` (this process's CPU seconds: robust to other jobs on a shared machine), ``wall``, ``n`` (composed
    support, None without a PLD), ``status``, the report row and the provenance's diagnostics."""
    import gdpcore as g
    from gdpcore.grid import report_row

    out: list[dict[str, Any]] = [{} for _ in cells]
    clock = [time.process_time(), time.perf_counter()]

    def on_report(i: int, report: Any) -> None:
        row = report_row(i, report, deltas=list(DELTAS), fprs=list(FPRS))
        now = [time.process_time(), time.perf_counter()]
        prov = report.provenance
        out[i] = {
            "seconds": now[0] - clock[0],
            "wall": now[1] - clock[1],
            "n": None if prov is None or prov.support_length is None else int(prov.support_length),
            "status": row["status"],
            "row": row,
            "diagnostics": {} if prov is None else dict(prov.diagnostics),
        }
        clock[:] = now

    g.analyze_grid(mechanisms(cells), deltas=list(DELTAS), on_report=on_report)
    return out


def floor_ratios(timed: Sequence[dict[str, Any]]) -> list[tuple[int, float, float, float]]:
    """(index, n, floor seconds, cell CPU seconds / floor) of every timed cell that composed a PLD."""
    out = []
    for i, t in enumerate(timed):
        if t.get("n"):
            floor = fft_floor_seconds(t["n"])
            out.append((i, t["n"], floor, t["seconds"] / floor))
    return out


def ratio_summary(ratios: Sequence[tuple[int, float, float, float]]) -> dict[str, float]:
    """Median and max of the cell / floor ratio, and max and median over cells with n < 10^4."""
    import numpy as np

    allr = np.array([r[3] for r in ratios]) if ratios else np.array([math.nan])
    small = np.array([r[3] for r in ratios if r[1] < 10_000])
    return {
        "median": float(np.median(allr)),
        "max": float(allr.max()),
        "small_cells": float(small.size),
        "small_median": float(np.median(small)) if small.size else math.nan,
        "small_max": float(small.max()) if small.size else math.nan,
    }


# --- where the time goes ---------------------------------------------------------------------------------------


def _is_fft(func: tuple[str, int, str]) -> bool:
    file, _, name = func
    return "/fft/" in file.replace("\\", "/") or "pocketfft" in name or "pocketfft" in file


def _engine_label(func: tuple[str, int, str]) -> str | None:
    file, _, name = func
    path = file.replace("\\", "/")
    for root in ("/gdpcore/", "/tasks/"):
        if root in path:
            return f"{root.strip('/')}/{path.split(root, 1)[1]}:{name}"
    return None


def attribute(stats: dict[Any, Any]) -> dict[str, float]:
    """Every function's self time charged to the nearest engine function above it (FFT work to "FFT <- caller"),
    split over callers in proportion to the time spent under each; time with no engine caller (or on a cycle of
    non-engine callers) is "other"."""
    memo: dict[tuple[Any, bool], dict[str, float]] = {}

    def other(fft: bool) -> dict[str, float]:
        return {"FFT (no engine caller)" if fft else "other (Python, outside the engine)": 1.0}

    def dist(func: Any, fft: bool) -> dict[str, float]:
        fft = fft or _is_fft(func)
        key = (func, fft)
        if key in memo:
            return memo[key]
        label = _engine_label(func)
        if label is not None:
            memo[key] = {f"FFT <- {label}" if fft else label: 1.0}
            return memo[key]
        memo[key] = other(fft)  # a cycle back here ends outside the engine
        callers = stats.get(func, (0, 0, 0.0, 0.0, {}))[4]
        weights = {c: e[3] for c, e in callers.items() if e[3] > 0}
        total = sum(weights.values())
        if total > 0:
            res: dict[str, float] = {}
            for caller, w in weights.items():
                for lab, frac in dist(caller, fft).items():
                    res[lab] = res.get(lab, 0.0) + frac * w / total
            memo[key] = res
        return memo[key]

    out: dict[str, float] = {}
    for func, (_, _, tt, _, _) in stats.items():
        if tt > 0:
            for lab, frac in dist(func, False).items():
                out[lab] = out.get(lab, 0.0) + tt * frac
    return out


def profile(work: Callable[[], Any]) -> tuple[float, dict[str, float]]:
    """(profiled CPU seconds, {label: CPU seconds}) of ``work()`` (see :func:`attribute`); the profiler's clock is
    this process's CPU time, so other jobs' bursts on a shared machine do not land on whatever function was running."""
    prof = cProfile.Profile(time.process_time)
    t0 = time.process_time()
    prof.enable()
    work()
    prof.disable()
    wall = time.process_time() - t0
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    return wall, attribute(stats)


def top_shares(shares: dict[str, float], k: int = 4) -> str:
    """The ``k`` largest labels as "label NN %" (shares of the profiled total), FFT summed first."""
    total = sum(shares.values()) or 1.0
    fft = sum(v for key, v in shares.items() if key.startswith("FFT"))
    rest = sorted(((v, key) for key, v in shares.items() if not key.startswith("FFT")), reverse=True)[:k]
    parts = [f"FFT {100 * fft / total:.0f} %"] + [f"{_short(key)} {100 * v / total:.0f} %" for v, key in rest]
    return "; ".join(parts)


def _short(label: str) -> str:
    return label.replace("gdpcore/", "").replace(".py:", ".")


def sample_profile(
    cells: Sequence[tuple[float, float, int]], picks: Sequence[int]
) -> tuple[list[tuple[int, float, str]], list[str]]:
    """Each picked cell analysed alone under the profiler: rows (index, profiled seconds, top shares), and Markdown
    rows of the 12 largest labels over all picked cells together (seconds, share of the profiled total)."""
    rows = []
    pooled: dict[str, float] = {}
    for i in picks:
        wall, shares = profile(lambda i=i: timed_cells([cells[i]]))
        rows.append((i, wall, top_shares(shares)))
        for key, v in shares.items():
            pooled[key] = pooled.get(key, 0.0) + v
    total = sum(pooled.values()) or 1.0
    top = sorted(pooled.items(), key=lambda kv: -kv[1])[:12]
    return rows, [f"| {_short(key)} | {v:.3f} | {100 * v / total:.1f} % |" for key, v in top]
