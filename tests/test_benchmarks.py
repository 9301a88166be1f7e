"""The grid benchmark's own machinery: the mixed grid's design and the profile attribution (no timings asserted)."""

from __future__ import annotations

import math
import re

import pytest

from benchmarks import _cellcost as cc
from benchmarks import bench_grid as bg


def test_halton_is_the_radical_inverse():
    # van der Corput in base 2 and base 3: the digits of i reversed behind the point.
    assert [bg._halton(i, 2) for i in range(1, 8)] == [0.5, 0.25, 0.75, 0.125, 0.625, 0.375, 0.875]
    assert [bg._halton(i, 3) for i in range(1, 5)] == pytest.approx([1 / 3, 2 / 3, 1 / 9, 4 / 9])


def test_mixed_grid_covers_the_stated_box():
    cells = bg.mixed_cells()
    assert cells == bg.mixed_cells()  # deterministic
    assert len(cells) == len(set(cells))
    assert 60 <= len(cells) <= 100
    for s, q, t in cells:
        assert 0.5 <= s <= 3.0 and 1e-4 <= q <= 0.2 and 10 <= t <= 100_000
        assert q * math.sqrt(t * math.expm1(s**-2)) <= bg.MIXED_MU_CAP
    # The corners the target names: q = 1e-4 with T = 10^5, and T = 10 cells.
    assert (0.5, 1e-4, 100_000) in cells and (3.0, 1e-4, 100_000) in cells
    assert sum(t == 10 for _, _, t in cells) >= 4
    # Log-spread: every decade of q and T holds cells; short (T <= 100) and long (T >= 10^4) compositions both.
    assert {math.floor(math.log10(q)) for _, q, _ in cells} == {-4, -3, -2, -1}
    assert {min(4, math.floor(math.log10(t))) for _, _, t in cells} == {1, 2, 3, 4}
    assert sum(t <= 100 for _, _, t in cells) >= 15 and sum(t >= 10_000 for _, _, t in cells) >= 10
    # The far corner (no privacy: mu ~ 460) is left out.
    assert (0.5, 0.2, 100_000) not in cells


def test_quick_grid_keeps_the_corners():
    quick = bg.quick_cells()
    cells = bg.mixed_cells()
    assert set(quick) <= set(cells)
    assert {c for c in bg.MIXED_CORNERS if c in cells} <= set(quick)
    assert len(quick) < len(cells) / 2


def _stats(edges, self_times):
    """A pstats-like dict: func -> (cc, nc, tt, ct, {caller: (cc, nc, tt, ct)}); ``edges`` maps callee -> {caller:
    cumulative seconds under that caller}."""
    out = {}
    for func, tt in self_times.items():
        callers = {c: (1, 1, 0.0, ct) for c, ct in edges.get(func, {}).items()}
        out[func] = (1, 1, tt, tt, callers)
    return out


def test_attribution_charges_callees_to_the_engine_caller():
    a = ("/x/gdpcore/pld/powers.py", 10, "_power")
    b = ("/x/gdpcore/curve.py", 5, "read")
    np_sum = ("~", 0, "<method 'reduce' of 'numpy.ufunc' objects>")
    rfft = ("/x/scipy/fft/_basic.py", 1, "rfft")
    c2r = ("~", 0, "<built-in method scipy.fft._pocketfft.pypocketfft.r2c>")
    top = ("/x/benchmarks/bench_grid.py", 1, "main")
    # np_sum called by a (3 s under it) and b (1 s under it); rfft called by a; its builtin by rfft.
    edges = {a: {top: 10.0}, b: {top: 2.0}, np_sum: {a: 3.0, b: 1.0}, rfft: {a: 3.0}, c2r: {rfft: 2.5}}
    stats = _stats(edges, {a: 1.0, b: 1.0, np_sum: 4.0, rfft: 0.5, c2r: 2.5, top: 0.25})
    got = cc.attribute(stats)
    assert got == pytest.approx(
        {
            "gdpcore/pld/powers.py:_power": 1.0 + 3.0,
            "gdpcore/curve.py:read": 1.0 + 1.0,
            "FFT <- gdpcore/pld/powers.py:_power": 3.0,
            "other (Python, outside the engine)": 0.25,
        }
    )
    assert sum(got.values()) == pytest.approx(sum(v[2] for v in stats.values()))


def test_attribution_of_a_real_profile_conserves_time():
    wall, shares = cc.profile(lambda: cc.timed_cells([(1.0, 0.01, 20)]))
    assert wall > 0 and sum(shares.values()) <= wall * 1.05
    assert any(k.startswith("FFT <- gdpcore/") for k in shares)
    assert any(k.startswith("gdpcore/") for k in shares)


def test_fft_floor_length_is_scipys_fast_length():
    from scipy import fft as sp_fft

    for n in (97, 1000, 12_345):
        m = cc.fft_length(n)
        assert m >= n and m == sp_fft.next_fast_len(n, real=True)


def test_mixed_checks_flag_each_target():
    per_cell = [{"seconds": 0.01, "peer_s": 2.0}, {"seconds": 0.02, "peer_s": 0.01}]
    m = {
        "per_cell": per_cell,
        "t_grid": 0.03,
        "t_peer": 2.01,
        "statuses": ["ok", "tolerance_not_met: certified gap 2e-2 > tolerance 1e-2"],
        "below": [],
        "floor": {"median": 4.0, "max": 30.0, "small_max": 25.0},
    }
    got = {what: ok for what, ok, _ in bg.mixed_checks(m)}
    assert got == {
        ">= 100x the per-point dp_accounting loop over the grid": False,  # 2.01 / 0.03 = 67
        "no cell slower than dp_accounting's per-point time": False,  # the second cell: 0.02 s against 0.01 s
        "every cell within the tolerance (status ok)": False,
        "0 cells below dp_accounting's optimistic epsilon": True,
        "median cell <= 5 FFT round trips": True,
        "cells with n < 10^4 <= 20 FFT round trips": False,
    }
    summary = bg._summary(m)
    assert summary["slower"] == 1 and summary["ok"] == 1 and summary["min_cell_ratio"] == pytest.approx(0.5)


def test_cli_rate_row_is_cells_over_seconds():
    from benchmarks import bench_cli

    m = {"cells": 10_000, "analyze_grid_s": 40.0, "sweep_s": 50.0, "load_average": 1.0}
    assert bench_cli._rate_row("x", m) == "| x | 250 (40.0 s) | 200 (50.0 s) | 20 % | 1.0 |"
    assert bench_cli._rate_row("y", {"cells": 10_000}) == "| y | - | - | - | - |"


def test_cli_chunk_seconds_count_only_chunks_that_were_computed(tmp_path):
    # A trace as the sweep writes it (tasks.trace): the first-chunk process (pid 2) computes a chunk before the flow
    # exists; the pool's worker (pid 3) takes those rows (no chunk-accounted: it waited) and computes the next one.
    from benchmarks import bench_cli

    trace = tmp_path / "trace.txt"
    trace.write_text(
        "100.0 0 launched\n101.5 2 worker-warm\n113.5 2 chunk-accounted\n113.6 2 chunk-precomputed\n"
        "109.0 3 chunk-start\n113.7 3 early-rows\n113.7 3 chunk-computed\n"
        "113.8 3 chunk-start\n121.6 3 chunk-accounted\n121.7 3 chunk-computed\n"
    )
    assert bench_cli._chunk_seconds(trace) == pytest.approx([12.1, 7.9])
    assert bench_cli._worker_accounting(trace) == pytest.approx(20.0)


def test_scale_sample_spreads_over_both_axes(tmp_path):
    # The scale benchmark's per-cell compute comes from a sample of whole (sigma, q) groups; the plan orders groups by
    # their JSON text, so an evenly strided pick saw 2 of the 20 sampling rates. A uniform draw sees most of both axes.
    import json

    from benchmarks import bench_scale as bs
    from tasks.plan import build_plan
    from tasks.spec import load_grid_spec

    spec_path = tmp_path / "scale.yaml"
    spec_path.write_text(bs._spec(10_000))
    plan = build_plan(load_grid_spec(spec_path, force=True), tmp_path / "lake", workers=1)
    mechs = [m for c in plan.chunks for m in c.mechanisms]
    picked, spare = bs.sample_groups(mechs, 500)
    cells = [json.loads(m) for group in picked for m in group]
    assert len(picked) >= 20 and len(cells) >= 500
    assert all(len(group) == 20 for group in picked)  # whole groups: 20 step counts each at 10^4 cells
    assert len({c["sampling_rate"] for c in cells}) >= 10 and len({c["noise_multiplier"] for c in cells}) >= 10
    assert spare not in {m for group in picked for m in group}


def test_estimated_errors_line_with_none_and_with_some():
    # The engine estimates a cell's discretisation error only where its first step missed the certified gap: a grid
    # where every cell met it carries none (the reference section printed max() of nothing and crashed before).
    assert bg._estimated_errors([None, None]).startswith("no discretisation error estimated")
    line = bg._estimated_errors([None, 1.5e-3, 4e-4])
    assert "estimated on 2 cells" in line and "max 1.50e-03" in line


def test_ab_units_cover_each_grid_once():
    from benchmarks import ab

    assert [u[0] for u in ab.work_units("mixed")] == bg.mixed_cells()
    ref = ab.work_units("reference")
    assert sorted(c for u in ref for c in u) == sorted(bg._cells())
    assert all(len({c[:2] for c in u}) == 1 for u in ref)  # one (sigma, q) per unit: a batch group
    sweep = ab.work_units("sweep")
    assert len(sweep) == 20 and all(len(u) == 20 and len({c[:2] for c in u}) == 1 for u in sweep)
    with pytest.raises(ValueError, match="grid"):
        ab.work_units("everything")


def test_ab_report_sums_the_best_times_and_the_rows_moved():
    from benchmarks import ab

    results = [
        ([(1.0, 0.01, 100)], [0.02, 0.01], [[(1.0, 0.5, 0.1)], [(1.01, 0.5, 0.1)]]),
        ([(2.0, 0.1, 10)], [0.03, 0.03], [[(2.0, math.inf, 0.2)], [(2.0, math.inf, 0.19)]]),
    ]
    text = ab.report(results, ("before", "after"))
    assert "x2.00" in text and "x1.00" in text
    assert "**x1.250**" in text  # 0.05 s against 0.04 s
    assert "epsilon(1e-5), after against before: relative change +0.00e+00 .. +1.00e-02" in text
    assert "advantage, after against before: relative change -5.00e-02 .. +0.00e+00" in text
    assert math.isnan(ab._moved(None, 1.0)) and ab._moved(math.inf, math.inf) == 0.0


def test_make_bench_replaces_its_sections_in_place_and_keeps_the_records_written_by_hand():
    from benchmarks.run import merge_results, split_sections

    old = "# Benchmark results\n\nold header\n\n## A\n\nold a\n\n## Session record\n\nby hand\n\n### detail\n\nkept\n\n## B\n\nold b\n"
    new = merge_results(old, "# Benchmark results\n\nnew header\n", ["## B\n\nnew b", "## A\n\nnew a\n\n## C\n\nnew c"])
    assert [t for t, _ in split_sections(new)] == ["", "A", "Session record", "B", "C"]
    assert "new header" in new and "old header" not in new
    assert "new a" in new and "new b" in new and "old a" not in new and "old b" not in new
    assert "by hand\n\n### detail\n\nkept" in new
    # A subset run (only B) keeps A and the record as they were.
    subset = merge_results(old, "# Benchmark results\n", ["## B\n\nnewer b"])
    assert "old a" in subset and "by hand" in subset and "newer b" in subset and "old b" not in subset
    # The repository's own file splits into its titled sections with nothing lost.
    from benchmarks.run import HERE

    text = (HERE / "RESULTS.md").read_text(encoding="utf-8")
    titles = [t for t, _ in split_sections(text) if t]
    assert len(titles) == len(set(titles)) == text.count("\n## ")
    # Merging nothing back in gives the file again (runs of blank lines between sections collapsed to one).
    assert merge_results(text, split_sections(text)[0][1], []) == re.sub(r"\n{3,}", "\n\n", text).rstrip("\n") + "\n"


def test_ab_refuses_a_tree_that_is_neither_a_directory_nor_a_revision(capsys):
    from benchmarks import ab

    with pytest.raises(SystemExit) as stop:
        ab.main(["no-such-revision-xyz", "HEAD", "--grid", "quick"])
    assert stop.value.code == 2
    assert (
        "'no-such-revision-xyz' is neither a directory holding gdpcore/ nor a git revision" in capsys.readouterr().err
    )
    with pytest.raises(SystemExit):
        ab.main(["HEAD", "HEAD", "--repeats", "0"])
    assert "--repeats must be at least 1, got 0" in capsys.readouterr().err
