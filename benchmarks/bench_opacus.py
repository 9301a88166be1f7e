"""gdp-audit as an Opacus accountant beside Opacus's own PRV and RDP accountants, same run, same machine.

What a training loop pays to know its epsilon while it trains: the three accountants are stepped in lockstep through
T DP-SGD steps (sigma = 1.0, q = 0.01, Opacus's ``step(noise_multiplier=, sample_rate=)``) and ``get_epsilon(1e-5)``
is asked of each after every k-th step (and after every step for a prefix of the run), in rotating order so that
machine load falls on all three alike. Each accountant's defaults: gdp-audit's 1% certified bracket
(gdpcore.analyze), PRV's ``eps_error=0.01`` (its upper bound), RDP's default orders.

Also measured: the follow-up queries a training loop asks at the same step (mu, TPR at FPR 1e-3, advantage) after
``get_epsilon`` — answered from the one analysis of that history (gdpcore.adapters.GdpAuditAccounting, reusing work).

Run: ``python -m benchmarks.bench_opacus [T k prefix]`` (prints the section) or ``make bench`` (all sections).
"""

from __future__ import annotations

import os
import statistics
import sys
import time

SIGMA, Q, DELTA = 1.0, 0.01, 1e-5


def _accountants() -> dict[str, object]:
    from opacus.accountants import PRVAccountant, RDPAccountant

    from gdpcore.adapters import register_opacus_accountant

    return {"gdp-audit": register_opacus_accountant()(), "Opacus PRV": PRVAccountant(), "Opacus RDP": RDPAccountant()}


def _drive(steps: int, every: int) -> tuple[dict[str, list[float]], dict[str, float], list[float]]:
    """Step all three accountants ``steps`` times; after every ``every``-th step time get_epsilon on each
    (rotating order). Returns per-accountant query times, final epsilons and gdp-audit's follow-up query times."""
    accts = _accountants()
    names = list(accts)
    times: dict[str, list[float]] = {n: [] for n in names}
    final: dict[str, float] = {}
    follow: list[float] = []
    for t in range(1, steps + 1):
        for a in accts.values():
            a.step(noise_multiplier=SIGMA, sample_rate=Q)  # type: ignore[attr-defined]
        if t % every:
            continue
        r = (t // every) % len(names)
        for n in names[r:] + names[:r]:
            t0 = time.perf_counter()
            final[n] = float(accts[n].get_epsilon(DELTA))  # type: ignore[attr-defined]
            times[n].append(time.perf_counter() - t0)
        g = accts["gdp-audit"]
        t0 = time.perf_counter()
        g.mu(), g.tpr_at_fpr(1e-3), g.advantage()  # type: ignore[attr-defined]
        follow.append(time.perf_counter() - t0)
    return times, final, follow


def _row(mode: str, name: str, ts: list[float], eps: float) -> str:
    q = sorted(ts)
    p90 = q[min(len(q) - 1, int(0.9 * len(q)))]
    return (
        f"| {mode} | {name} | {len(ts)} | {sum(ts):.1f} | {1e3 * statistics.median(ts):.1f} | {1e3 * p90:.1f} "
        f"| {1e3 * max(ts):.1f} | {eps:.4f} |"
    )


def run(steps: int = 10_000, every: int = 100, prefix: int = 300) -> str:
    try:
        import opacus
    except ImportError:
        return "## Opacus accountants\n\nNot measured: Opacus is not installed (the `opacus` extra)."
    load = os.getloadavg()[0]
    sparse, eps_sparse, follow = _drive(steps, every)
    dense, eps_dense, _ = _drive(prefix, 1)
    load = max(load, os.getloadavg()[0])
    lines = [
        f"## Opacus accountants: `get_epsilon` during training, sigma={SIGMA}, q={Q}, delta={DELTA:g}, T={steps:,}",
        "",
        f"Opacus {opacus.__version__}; the three accountants stepped in lockstep, `get_epsilon` timed on each after "
        f"every {every}th step of T = {steps:,} and after every step of the first {prefix} (rotating order: "
        'interleaved, same machine load). gdp-audit: `PrivacyEngine(accountant="gdp-audit")`\'s accountant '
        "(upper bound, 1% certified bracket); PRV: its upper bound at eps_error=0.01; RDP: default orders (upper "
        "bound, looser). Times in seconds (total) and milliseconds (per query); 1-minute load average up to "
        f"{load:.1f} during the run (other jobs on the machine: compare the accountants, not the absolute times).",
        "",
        "| queries | accountant | n | total s | median ms | p90 ms | max ms | epsilon at last query |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [_row(f"every {every}th of {steps:,}", n, ts, eps_sparse[n]) for n, ts in sparse.items()]
    lines += [_row(f"every step, first {prefix}", n, ts, eps_dense[n]) for n, ts in dense.items()]
    lines += [
        "",
        f"Per-step queries over all T = {steps:,} steps, *estimated* from the every-{every}th measurement (each "
        f"query stands for the {every} steps around it: {every} x total): "
        + ", ".join(f"{n} ~{every * sum(ts) / 60:.0f} min" for n, ts in sparse.items())
        + ". Follow-up queries at the same step (gdp-audit's mu, TPR at FPR 1e-3 and advantage after its "
        f"get_epsilon, one cached analysis): median {1e6 * statistics.median(follow):.0f} us for all three.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    print(run(*args))
