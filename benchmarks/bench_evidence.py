"""Audit-evidence benchmark: every bound of :mod:`gdpcore.evidence` from 10^6 attack scores per side on one core.

Scores: members N(1, 1), non-members N(0, 1), 10^6 each (numpy default_rng(0)). Timed (CPU seconds of this process,
thread pools pinned to 1, median of ``reps``): ``evidence_from_scores`` (thresholds, trade-off region, mu lower
bound), ``epsilon_lower`` at three deltas, ``detectable_mu`` (power), ``check_evidence`` against an already analysed
report (the accounting itself is the report's cost, benchmarked elsewhere), and the one-run bound for 2 x 10^6
canaries with 10^4 guesses (delta 1e-5) and its f-DP (Gaussian) version. Target: each <= 2 s. jax_privacy (the peer) needs jax and is not installed
in the project environment; its numbers are compared in tests/test_evidence.py (docs/references.md E-1).
"""

from __future__ import annotations

import statistics
import time

import numpy as np

import gdpcore as g

N = 10**6


def _cpu(fn, reps: int):
    times, out = [], None
    for _ in range(reps):
        t0 = time.process_time()
        out = fn()
        times.append(time.process_time() - t0)
    return out, statistics.median(times)


def run(*, reps: int = 3) -> str:
    rng = np.random.default_rng(0)
    mem = rng.normal(1.0, 1.0, N)
    non = rng.normal(0.0, 1.0, N)
    report = g.analyze(g.Gaussian(noise_multiplier=1.0))
    ev, t_ev = _cpu(lambda: g.evidence_from_scores(mem, non), reps)
    eps, t_eps = _cpu(lambda: [ev.epsilon_lower(d) for d in (1e-5, 1e-6, 1e-9)], reps)
    det, t_det = _cpu(lambda: ev.detectable_mu(), reps)
    chk, t_chk = _cpu(lambda: g.check_evidence(report, ev), reps)
    one, t_one = _cpu(lambda: g.one_run_epsilon_lower(canaries=2 * N, guesses=10**4, correct=9000, delta=1e-5), reps)
    fdp, t_fdp = _cpu(lambda: g.one_run_mu_lower(canaries=2 * N, guesses=10**4, correct=9000), reps)
    rows = [
        ("evidence_from_scores (mu lower bound, trade-off region)", f"mu_lower = {ev.mu_lower:.4f}", t_ev),
        ("epsilon_lower at delta 1e-5, 1e-6, 1e-9", ", ".join(f"{e:.3f}" for e in eps), t_eps),
        ("detectable_mu (claim 0)", f"{det:.5f}", t_det),
        ("check_evidence vs Gaussian(sigma = 1)", f"{chk.verdict}, tightness {chk.tightness:.3f}", t_chk),
        ("one_run_epsilon_lower (m = 2e6, r = 1e4, v = 9000)", f"{one:.4f}", t_one),
        ("one_run_mu_lower, f-DP one run (same counts)", f"{fdp:.4f}", t_fdp),
    ]
    total = t_ev + t_eps + t_det + t_chk + t_one + t_fdp
    lines = [
        "## Audit evidence (`gdpcore.evidence`), 10^6 scores per side",
        "",
        f"CPU seconds, median of {reps}; members N(1, 1), non-members N(0, 1). Target: each bound <= 2 s.",
        "",
        "| computation | result | CPU s |",
        "|---|---|---|",
        *(f"| {name} | {res} | {t:.3f} |" for name, res, t in rows),
        f"| **all of the above** | | **{total:.3f}** |",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(run())
