"""Grid benchmark: ``analyze_grid`` (the one engine, batched) against the per-point dp_accounting loop.

One process, one run, interleaved after a warm-up: the reference grid (sigma x q x T = 5 x 5 x 4 cells) is cut into
blocks of whole (sigma, q) groups, and each block is timed with (b) ``gdpcore.analyze_grid`` producing the full
report (epsilon at 3 deltas, mu, GDP regret, advantage, Bayes security, fnr at 7 FPRs, lower ends of every bracket)
and then with (a) the per-point peer loop (fresh dp_accounting ``PLDAccountant`` at discretisation 1e-4 per cell,
epsilon at delta = 1e-5 only), so both see the same machine load. Where the per-cell time goes is set against the
cost of one FFT round trip (rfft + irfft) of the cell's composed length. Accuracy: epsilon(1e-5) of (b) against dp_accounting's pessimistic PLD at 1e-5 on a stated subsample (the
1e-5 PLD of the high-epsilon cells needs > 1 GB), and against dp_accounting's optimistic PLD at 1e-4 on every cell.
Finally the scaling over two worker processes is measured on the reference grid and on a larger one.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import resource
import time

SIGMAS = (0.6, 0.8, 1.0, 1.5, 2.0)
QS = (0.001, 0.004, 0.01, 0.04, 0.1)
TS = (100, 1000, 3000, 10000)
DELTAS = (1e-5, 1e-6, 1e-9)
FPRS = (1e-10, 1e-8, 1e-6, 1e-4, 1e-3, 1e-2, 1e-1)
# Reference (dp_accounting at 1e-5) subsample: corners and the small-per-step-loss cells where coarse grids fail.
REFERENCE_CELLS = (
    (2.0, 0.001, 10000),
    (1.5, 0.001, 3000),
    (1.0, 0.01, 1000),
    (2.0, 0.01, 10000),
    (0.8, 0.004, 3000),
    (1.0, 0.04, 100),
    (2.0, 0.1, 1000),
    (0.6, 0.001, 100),
)


def _cells():
    return [(s, q, t) for s in SIGMAS for q in QS for t in TS]


def _peer_epsilon(sigma, q, T, vdi, delta=1e-5):
    from dp_accounting import dp_event, pld

    acc = pld.PLDAccountant(value_discretization_interval=vdi)
    acc.compose(dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), T))
    return acc.get_epsilon(delta)


def _optimistic_epsilon(sigma, q, T, vdi=1e-4, delta=1e-5):
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    p = pld_lib.from_gaussian_mechanism(
        sigma, sampling_prob=q, value_discretization_interval=vdi, pessimistic_estimate=False, use_connect_dots=False
    )
    return p.self_compose(T).get_epsilon_for_delta(delta)


def _grid(cells):
    import gdpcore as g
    from tasks.grid_table import analyze_grid_table

    mechs = [g.SubsampledGaussian(noise_multiplier=s, sampling_rate=q, steps=t) for s, q, t in cells]
    return analyze_grid_table(mechs, deltas=list(DELTAS), fprs=list(FPRS))


def _fft_round_trip_seconds(n: int, repeats: int = 5) -> float:
    """Best-of time of one rfft + irfft of length ``n`` (the floor of any composition of that size)."""
    import numpy as np
    from scipy import fft as sp_fft

    x = np.random.default_rng(0).random(n)
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        sp_fft.irfft(sp_fft.rfft(x, n), n)
        best = min(best, time.perf_counter() - t0)
    return best


def _timed_grid(cells):
    t0 = time.perf_counter()
    c0 = time.process_time()
    table = _grid(cells)
    return time.perf_counter() - t0, time.process_time() - c0, table.num_rows


def _warm_worker():
    # Imports and first-call set-up (scipy.fft plans, pyarrow) happen once per worker, before the clock starts.
    _grid([(1.0, 0.01, 10), (1.0, 0.01, 20)])


# Larger grid for the scaling measurement (the reference grid runs in about 2 s: pool hand-off matters there).
LARGE_SIGMAS = (0.6, 0.7, 0.8, 0.9, 1.0, 1.2, 1.4, 1.6, 1.8, 2.0)
LARGE_QS = (0.001, 0.002, 0.004, 0.007, 0.01, 0.02, 0.04, 0.1)


def _groups(cells):
    """Cells grouped by (sigma, q), as the pipeline's chunks are: one single-step PLD per group serves every T.
    Heaviest first (small sigma and large q make long supports), so dynamic scheduling balances the workers."""
    groups = {}
    for c in cells:
        groups.setdefault(c[:2], []).append(c)
    return sorted(groups.values(), key=lambda g: (g[0][0], -g[0][1]))


def _scaling(cells, pool, repeats):
    """(serial wall, serial CPU, 2-worker wall, per-worker CPU seconds), each wall the best of ``repeats`` runs (the
    usual defence against other jobs' bursts): the same group tasks run serially in this (warm) process, then on the
    warmed 2-worker pool with dynamic scheduling (imap_unordered)."""
    tasks = _groups(cells)
    best_serial = best_two = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        c0 = time.process_time()
        for task in tasks:
            _timed_grid(task)
        run = (time.perf_counter() - t0, time.process_time() - c0)
        best_serial = run if best_serial is None or run[0] < best_serial[0] else best_serial
        t0 = time.perf_counter()
        results = list(pool.imap_unordered(_timed_grid_with_pid, tasks))
        t_two = time.perf_counter() - t0
        cpu = {}
        for pid, (_, c, _) in results:
            cpu[pid] = cpu.get(pid, 0.0) + c
        if best_two is None or t_two < best_two[0]:
            best_two = (t_two, sorted(cpu.values()))
    return best_serial[0], best_serial[1], best_two[0], best_two[1]


def _timed_grid_with_pid(cells):
    import os

    return os.getpid(), _timed_grid(cells)


def _warm_worker_task(_):
    time.sleep(0.5)  # keeps one worker busy so that the other takes the second task
    return None


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def run() -> str:
    import pyarrow as pa

    import gdpcore as g

    cells = _cells()
    _grid(cells[:2])  # warm-up: lazy imports inside scipy/pyarrow are not part of the throughput
    _peer_epsilon(1.0, 0.01, 10, 1e-4)
    rss0 = _rss_mib()

    # Interleaved: blocks of whole (sigma, q) groups, (b) then (a) on each block.
    blocks = [[c for c in cells if c[0] == s] for s in SIGMAS]
    t_grid = t_peer = 0.0
    tables, peer_by_cell = [], {}
    for block in blocks:
        t0 = time.perf_counter()
        tables.append(_grid(block))
        t_grid += time.perf_counter() - t0
        t0 = time.perf_counter()
        for s, q, t in block:
            peer_by_cell[(s, q, t)] = _peer_epsilon(s, q, t, 1e-4)
        t_peer += time.perf_counter() - t0
    table = pa.concat_tables(tables)
    rss_grid = _rss_mib()
    eps_grid = [e[0] for e in table.column("epsilon").to_pylist()]
    statuses = table.column("status").to_pylist()
    steps_used = table.column("discretization").to_pylist()
    errs = table.column("discretization_error").to_pylist()
    eps_lower = [e[0] for e in table.column("epsilon_lower").to_pylist()]
    gaps = table.column("certified_gap").to_pylist()
    steps_lower = table.column("discretization_lower").to_pylist()

    eps_peer = [peer_by_cell[c] for c in cells]
    rss_peer = _rss_mib()

    # Where a cell's time goes: the engine's own per-cell seconds against one FFT round trip of its composed length.
    import numpy as np

    import gdpcore as g_

    breakdown = []
    for s, q, t in cells[::7]:  # every 7th cell: all four T values appear
        (rep,) = g_.analyze_grid([g_.SubsampledGaussian(noise_multiplier=s, sampling_rate=q, steps=t)], deltas=DELTAS)
        prov = rep.provenance
        n = int(prov.support_length)
        fft_s = _fft_round_trip_seconds(n)
        breakdown.append((s, q, t, n, prov.seconds, fft_s, prov.seconds / fft_s, prov.status))
    ratios = np.array([b[6] for b in breakdown])

    n = len(cells)
    pps_grid, pps_peer = n / t_grid, n / t_peer
    rel_vs_peer = [abs(a - b) / b for a, b in zip(eps_grid, eps_peer, strict=True)]
    worst = max(range(n), key=lambda i: rel_vs_peer[i])

    # Never below dp_accounting's optimistic value (every cell).
    opt = [_optimistic_epsilon(s, q, t) for s, q, t in cells]
    below_opt = sum(e < o for e, o in zip(eps_grid, opt, strict=True))

    ref_rows = []
    for s, q, t in REFERENCE_CELLS:
        i = cells.index((s, q, t))
        t1 = time.perf_counter()
        ref = _peer_epsilon(s, q, t, 1e-5)
        dt = time.perf_counter() - t1
        ref_rows.append(
            (
                s,
                q,
                t,
                eps_grid[i],
                ref,
                eps_grid[i] / ref - 1.0,
                eps_peer[i] / ref - 1.0,
                steps_used[i],
                dt,
                eps_lower[i],
            )
        )

    # Scaling: groups of cells sharing (sigma, q) stay in one task (as the pipeline's chunks do); tasks are handed
    # to a warmed 2-worker pool dynamically, heaviest first. Measured on the reference grid and on a larger one.
    import os

    large = [(s, q, t) for s in LARGE_SIGMAS for q in LARGE_QS for t in TS]
    ctx = mp.get_context("spawn")
    with ctx.Pool(2, initializer=_warm_worker) as pool:
        pool.map(_warm_worker_task, [0, 1], chunksize=1)  # both workers up and warm before any clock starts
        load0 = os.getloadavg()[0]
        ref_serial, ref_serial_cpu, ref_two, ref_cpu = _scaling(cells, pool, 5)
        big_serial, big_serial_cpu, big_two, big_cpu = _scaling(large, pool, 3)
        load1 = os.getloadavg()[0]
    t_two = ref_two
    pps_two = n / t_two

    lines = [
        "## Grid engine: `analyze_grid` vs the per-point dp_accounting loop",
        "",
        f"Reference grid sigma {list(SIGMAS)} x q {list(QS)} x T {list(TS)} = {n} cells, one process, one run. "
        f"(b) reports epsilon at {len(DELTAS)} deltas, mu, GDP regret, advantage, Bayes security and fnr at "
        f"{len(FPRS)} FPRs per cell, discretisation chosen per cell (certified gap <= "
        f"{g.engine.DEFAULT_GRID_TOLERANCE:g} on epsilon at every delta, mu and the advantage), lower "
        "ends of every bracket included; (a) is a fresh dp_accounting PLDAccountant at 1e-4 and "
        "epsilon at delta = 1e-5 only. (a) and (b) are interleaved block by block (one sigma per block) after a "
        "warm-up. The 2-core machine is shared with other jobs: wall times include contention.",
        "",
        "| method | wall s | points/s | ratio |",
        "|---|---|---|---|",
        f"| (a) dp_accounting PLD 1e-4, per point, eps(1e-5) only | {t_peer:.2f} | {pps_peer:.2f} | 1.0 |",
        f"| (b) gdpcore.analyze_grid, full report | {t_grid:.2f} | {pps_grid:.1f} | **{pps_grid / pps_peer:.1f}** |",
        f"| (b) on 2 worker processes | {t_two:.2f} | {pps_two:.1f} | {pps_two / pps_peer:.1f} "
        f"(x{ref_serial / ref_two:.2f} vs the same tasks in 1 process) |",
        "",
        "Scaling with two worker processes (spawned, warmed before timing; one task per (sigma, q) group, handed out "
        "dynamically, heaviest first; the 1-process column runs the same tasks serially in the parent; walls are the best "
        "of 5 runs on the reference grid and of 3 on the larger one). "
        f"Load average {load0:.1f} before and {load1:.1f} after on 2 cores: the machine is shared with other jobs, so "
        "wall-clock scaling is capped well below 2 (with N other runnable processes a fair scheduler gives one "
        "process 2/(N+1) of a core and two 4/(N+2): x1.67 at N = 4). The CPU columns show what two free cores give: "
        "the serial run's CPU seconds over the busier worker's (the work is split evenly and does not grow).",
        "",
        "| grid | cells | 1 process wall s | 2 workers wall s | wall scaling | 1 process CPU s | CPU s per worker "
        "| CPU-bound scaling |",
        "|---|---|---|---|---|---|---|---|",
        f"| reference | {n} | {ref_serial:.2f} | {ref_two:.2f} | **x{ref_serial / ref_two:.2f}** | "
        f"{ref_serial_cpu:.2f} | {', '.join(f'{c:.2f}' for c in ref_cpu)} | x{ref_serial_cpu / max(ref_cpu):.2f} |",
        f"| larger: sigma {list(LARGE_SIGMAS)} x q {list(LARGE_QS)} x T {list(TS)} | {len(large)} | {big_serial:.2f} | "
        f"{big_two:.2f} | **x{big_serial / big_two:.2f}** | {big_serial_cpu:.2f} | "
        f"{', '.join(f'{c:.2f}' for c in big_cpu)} | x{big_serial_cpu / max(big_cpu):.2f} |",
        "",
        f"- Peak RSS (ru_maxrss): {rss0:.0f} MiB after imports and warm-up, {rss_grid:.0f} MiB after (b), "
        f"{rss_peer:.0f} MiB after (a).",
        f"- Status: {sum(s == 'ok' for s in statuses)}/{n} cells 'ok'; steps used: "
        f"{sorted({f'{d:g}' for d in steps_used if d is not None})}; "
        f"max estimated discretisation error {max(e for e in errs if e is not None):.2e}.",
        "",
        "Where a cell's time goes (every 7th cell of the grid, analysed alone: the engine's per-cell seconds against "
        "one rfft + irfft round trip of its composed length n; the cell measures its error law (a doubling "
        "comparison of two float64 estimates), composes once, builds the twin at one or more steps, tilts tails "
        "where round-off would matter, and reads the curve out):",
        "",
        "| sigma | q | T | n | cell s | FFT round trip s | ratio | status |",
        "|---|---|---|---|---|---|---|---|",
        *(
            f"| {s} | {q} | {t} | {n} | {cs:.4f} | {fs:.5f} | {r:.0f} | {st[:40]} |"
            for s, q, t, n, cs, fs, r, st in breakdown
        ),
        "",
        f"Median cell / FFT-round-trip ratio {float(np.median(ratios)):.0f} (min {ratios.min():.0f}, max "
        f"{ratios.max():.0f}).",
        "- Certified gap (largest relative bracket width over epsilon at every delta, mu and the advantage; both "
        f"ends proven bounds), target {g.engine.DEFAULT_GRID_TOLERANCE:g}: max {max(gaps):.2e}, median "
        f"{sorted(gaps)[len(gaps) // 2]:.2e}; {sum(x <= g.engine.DEFAULT_GRID_TOLERANCE for x in gaps)}/{n} cells "
        f"within it; optimistic steps used {sorted({f'{d:g}' for d in steps_lower if d is not None})}.",
        f"- Largest relative epsilon(1e-5) difference (b) vs (a): {rel_vs_peer[worst]:.2e} at "
        f"sigma={cells[worst][0]}, q={cells[worst][1]}, T={cells[worst][2]} "
        f"((b) {eps_grid[worst]:.6g}, (a) {eps_peer[worst]:.6g}).",
        f"- Cells where (b) is below dp_accounting's optimistic (privacy-buckets) epsilon at 1e-4: {below_opt}/{n}.",
        "",
        "Accuracy against dp_accounting at discretisation 1e-5 (subsample: the 1e-5 PLD of the high-epsilon cells "
        "needs more than 1 GB):",
        "",
        "| sigma | q | T | (b) eps | dp_accounting 1e-5 | (b) rel. diff | (a) 1e-4 rel. diff | (b) step | ref s "
        "| (b) eps_lower | eps_lower <= ref |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s, q, t, e, ref, rb, ra, d, dt, lo in ref_rows:
        lines.append(
            f"| {s} | {q} | {t} | {e:.6g} | {ref:.6g} | {rb:+.2e} | {ra:+.2e} | {d:g} | {dt:.1f} | {lo:.6g} "
            f"| {'yes' if lo <= ref else '**NO**'} |"
        )
    worst_ref = max(abs(r[5]) for r in ref_rows)
    lines += [
        "",
        f"Largest |relative difference| of (b) against dp_accounting 1e-5 on the subsample: {worst_ref:.2e} "
        f"(target 5e-3).",
    ]
    if not all(math.isfinite(e) for e in eps_grid):
        lines.append("- Some epsilons are infinite (delta below the curve's floor).")
    return "\n".join(lines)


if __name__ == "__main__":
    print(run())
