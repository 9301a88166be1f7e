"""SYNTHETIC canary scores for the sample registry's evidence audits (``canary-mlp``, data/registry/canary-mlp.yaml).

Nothing here was measured on a trained model. The scores are privacy-loss samples of DP-SGD itself, i.e. what the
strongest possible membership-inference attack on one canary would compute when it sees every noisy step:

* per step, the (projected) noisy gradient sum is N(0, sigma^2) without the canary, and with the canary (Poisson
  sampled at rate q, clipped to norm 1) the mixture (1 - q) N(0, sigma^2) + q N(1, sigma^2);
* a canary's score is the summed log-likelihood ratio sum_t log(1 - q + q exp((2 x_t - 1) / (2 sigma^2))).

Each canary stands for its own training run with one canary (the threat model of gdpcore.evidence_from_scores:
independent member and non-member scores), which a simulation gives for free.

Both versions declare sigma = 1.0, q = 0.02, T = 100 steps. Version 1's scores come from exactly that mechanism
(consistent with its claim). Version 2's come from a run whose real sampling rate was 4x the declared one (q = 0.08,
e.g. a data loader that drew batches four times as large as logged): its canaries leak more than the declared
mechanism allows, which the audit flags.

Run ``python data/registry/evidence/simulate.py`` to regenerate (seeded: the same files, bit for bit, on NumPy's
PCG64). Output: NPZ with float32 arrays ``member_scores`` and ``non_member_scores``, 20,000 canaries each (160 KB).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

SIGMA, DECLARED_Q, STEPS, CANARIES = 1.0, 0.02, 100, 20_000
HERE = Path(__file__).resolve().parent
RUNS = {"canary-mlp-v1.npz": (DECLARED_Q, 20261126), "canary-mlp-v2.npz": (4 * DECLARED_Q, 20261127)}


def privacy_loss(x: np.ndarray, q: float, sigma: float) -> np.ndarray:
    """Summed per-step log-likelihood ratio (member vs non-member) of observations x, shape (canaries, steps)."""
    return np.log1p(q * np.expm1((2 * x - 1) / (2 * sigma**2))).sum(axis=1)


def simulate(true_q: float, seed: int, n: int = CANARIES) -> tuple[np.ndarray, np.ndarray]:
    """Scores of n member and n non-member canaries of a run with sampling rate ``true_q`` (the attack's statistic
    is the true mechanism's privacy loss)."""
    rng = np.random.default_rng(seed)
    non = rng.normal(0.0, SIGMA, size=(n, STEPS))
    mem = rng.normal(0.0, SIGMA, size=(n, STEPS)) + (rng.random((n, STEPS)) < true_q)
    return privacy_loss(mem, true_q, SIGMA), privacy_loss(non, true_q, SIGMA)


def main() -> None:
    for name, (q, seed) in RUNS.items():
        member, non_member = simulate(q, seed)
        np.savez(HERE / name, member_scores=member.astype(np.float32), non_member_scores=non_member.astype(np.float32))
        print(f"{name}: true q = {q:g} (declared {DECLARED_Q:g}), {len(member):,} + {len(non_member):,} canaries")


if __name__ == "__main__":
    main()
