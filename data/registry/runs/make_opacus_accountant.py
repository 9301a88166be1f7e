"""Regenerates ``mnist-opacus-accountant.pt`` (the ``mnist-opacus-shuffled`` run of ``../training-runs.yaml``).

A real Opacus two-phase run with ``make_private(..., poisson_sampling=False)`` on an MNIST-sized stand-in dataset
(60,000 random one-feature examples, a one-weight linear model: only the accountant is kept): 20 epochs at noise
multiplier 1.1 with batch 256, then 5 epochs at 0.9 with batch 512, on one PrivacyEngine (one accountant). Opacus
records ``sample_rate = 1 / len(data_loader)`` (``opacus/privacy_engine.py``, ``make_private``), so the saved history
is ``[(1.1, 1/235, 4700), (0.9, 1/118, 590)]``: 235 and 118 shuffled batches per epoch. Run from the repository root
with opacus and torch installed::

    python data/registry/runs/make_opacus_accountant.py
"""

from __future__ import annotations

from pathlib import Path

import torch
from opacus import PrivacyEngine
from torch.utils.data import DataLoader, TensorDataset

OUT = Path(__file__).with_name("mnist-opacus-accountant.pt")
N = 60_000
PHASES = ((1.1, 256, 20), (0.9, 512, 5))  # (noise multiplier, batch size, epochs)


def main() -> None:
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(N, 1), torch.randn(N, 1))
    engine = PrivacyEngine(accountant="rdp")
    for sigma, batch, epochs in PHASES:
        model = torch.nn.Linear(1, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        loader = DataLoader(data, batch_size=batch, shuffle=True)
        model, opt, loader = engine.make_private(
            module=model,
            optimizer=opt,
            data_loader=loader,
            noise_multiplier=sigma,
            max_grad_norm=1.0,
            poisson_sampling=False,
        )
        for _ in range(epochs):
            for x, y in loader:
                opt.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                opt.step()
    torch.save(engine.accountant.state_dict(), OUT)
    print(engine.accountant.history)


if __name__ == "__main__":
    main()
