"""gdp-audit as Opacus's accountant: ``PrivacyEngine(accountant="gdp-audit")`` after
:func:`gdpcore.adapters.register_opacus_accountant`.

Independent truth: the mechanism built directly from the (noise multiplier, sampling rate, steps) the training loop
was given (not from the accountant's history) and accounted by :func:`gdpcore.analyze`; Opacus's own PRV accountant
(Gopi et al. 2021, its eps_error) on the same phases; Opacus's step convention (one step per batch of a
``DPDataLoader`` with ``len(data_loader)`` batches per epoch, rate ``1 / len(data_loader)``).

Tests that need torch and Opacus (the ``opacus`` extra, installed by the Makefile) carry the ``torch`` marker; without
them they are skipped with the reason, except under ``CI=true``, where a missing extra is an error.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest

import gdpcore
from gdpcore import Composed, SubsampledGaussian

SIGMA_1, SIGMA_2, N, BATCH = 1.0, 1.3, 1000, 10  # q = 1 / len(data_loader) = 0.01
EPOCHS_1, EPOCHS_2 = 2, 1  # 200 steps at SIGMA_1, then 100 at SIGMA_2
DELTA = 1e-5

# Opacus's own warnings on a CPU toy run (pytest turns warnings into errors): not ours, and not about privacy.
OPACUS_WARNINGS = (
    "Secure RNG turned off",  # secure_mode=False: fine for a test (Opacus's own advice for experiments)
    "Full backward hook is firing",  # torch's note for a first layer whose input needs no gradient
)


def _require_opacus():
    try:
        import opacus  # noqa: F401
        import torch  # noqa: F401
    except ImportError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but the 'opacus' extra is not installed ({exc}): make venv installs it")
        pytest.skip(f"torch/Opacus (the 'opacus' extra) not installed: {exc}")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A Linear layer trained with PrivacyEngine(accountant="gdp-audit") on random data: 2 epochs at SIGMA_1, 1 at
    SIGMA_2 (the noise multiplier changed on the optimizer, as a schedule does); its checkpoint saved by Opacus."""
    _require_opacus()
    import torch
    from opacus import PrivacyEngine

    from gdpcore.adapters import register_opacus_accountant

    register_opacus_accountant()
    with warnings.catch_warnings():
        for message in OPACUS_WARNINGS:
            warnings.filterwarnings("ignore", message=message)
        gen = torch.Generator().manual_seed(0)
        x, y = torch.randn(N, 5, generator=gen), torch.randn(N, 1, generator=gen)
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=BATCH)
        model = torch.nn.Linear(5, 1)
        engine = PrivacyEngine(accountant="gdp-audit")
        model, opt, loader = engine.make_private(
            module=model,
            optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
            data_loader=loader,
            noise_multiplier=SIGMA_1,
            max_grad_norm=1.0,
        )
        for epoch in range(EPOCHS_1 + EPOCHS_2):
            if epoch == EPOCHS_1:
                opt.noise_multiplier = SIGMA_2
            for xb, yb in loader:
                opt.zero_grad()
                torch.nn.functional.mse_loss(model(xb), yb).backward()
                opt.step()
        ckpt = tmp_path_factory.mktemp("opacus") / "checkpoint.pt"
        engine.save_checkpoint(path=ckpt, module=model, optimizer=opt)
    return {"engine": engine, "steps_per_epoch": len(loader), "checkpoint": ckpt}


def _raw_mechanism(steps_per_epoch: int) -> Composed:
    q = 1 / steps_per_epoch
    return Composed(
        mechanisms=(
            SubsampledGaussian(noise_multiplier=SIGMA_1, sampling_rate=q, steps=EPOCHS_1 * steps_per_epoch),
            SubsampledGaussian(noise_multiplier=SIGMA_2, sampling_rate=q, steps=EPOCHS_2 * steps_per_epoch),
        )
    )


@pytest.mark.torch
def test_privacy_engine_uses_the_accountant_by_name(trained):
    from opacus.accountants import IAccountant

    from gdpcore import adapters

    engine, spe = trained["engine"], trained["steps_per_epoch"]
    acct = engine.accountant
    assert type(acct) is adapters.register_opacus_accountant() is adapters.GdpAuditAccountant
    assert isinstance(acct, IAccountant) and acct.mechanism() == "gdp-audit"
    assert spe == N // BATCH
    assert acct.history == [(SIGMA_1, 1 / spe, EPOCHS_1 * spe), (SIGMA_2, 1 / spe, EPOCHS_2 * spe)]
    assert len(acct) == (EPOCHS_1 + EPOCHS_2) * spe


@pytest.mark.torch
def test_epsilon_equals_gdpcore_on_the_raw_parameters_and_agrees_with_opacus_prv(trained):
    from opacus.accountants import PRVAccountant

    engine, spe = trained["engine"], trained["steps_per_epoch"]
    report = gdpcore.analyze(_raw_mechanism(spe))
    eps = engine.get_epsilon(DELTA)
    assert eps == float(report.epsilon(DELTA))
    assert engine.accountant.epsilon(DELTA) == (eps, "upper")
    assert engine.accountant.mu() == (report.mu, "upper")
    assert engine.accountant.advantage() == (report.advantage, "upper")
    assert engine.accountant.tpr_at_fpr(1e-3) == (float(report.tpr(1e-3)), "upper")
    # Opacus's PRV accountant (Gopi et al. 2021) on the same phases: an estimate within its eps_error of the truth,
    # which lies in gdpcore's certified bracket [optimistic, pessimistic] (both within 1% by default).
    prv = PRVAccountant()
    prv.history = list(engine.accountant.history)
    eps_prv = prv.get_epsilon(DELTA, eps_error=0.01)
    lower = float(report.epsilon(DELTA, side="optimistic"))
    assert lower - 0.01 <= eps_prv <= eps + 0.01 + 0.01 * eps


@pytest.mark.torch
def test_state_dict_round_trips_and_the_checkpoint_is_auditable(trained):
    from opacus.accountants import create_accountant

    from tasks.training_runs import load_opacus_file

    engine, spe = trained["engine"], trained["steps_per_epoch"]
    state = engine.accountant.state_dict()
    assert state["mechanism"] == "gdp-audit"
    fresh = create_accountant("gdp-audit")
    fresh.load_state_dict(state)
    assert fresh.history == engine.accountant.history
    assert fresh.get_epsilon(DELTA) == engine.get_epsilon(DELTA)
    with pytest.raises(ValueError, match="prv"):
        fresh.load_state_dict({"history": [(1.0, 0.01, 1)], "mechanism": "prv"})
    # Opacus's own checkpoint file, read by gdp-audit's file reader (restricted unpickler, no torch): same mechanism
    run = load_opacus_file(trained["checkpoint"], use_torch=False)
    assert run.mechanism == _raw_mechanism(spe)
    assert "gdp-audit accountant" in run.source


def test_queries_reuse_one_analysis_per_history(monkeypatch):
    """The accounting itself needs no torch (gdpcore.adapters.GdpAuditAccounting)."""
    from gdpcore import adapters
    from gdpcore.adapters import GdpAuditAccounting as GdpAuditAccountant

    calls = []
    real = adapters.TrainingRun.analyze

    def counting(self, **kw):
        calls.append(kw)
        return real(self, **kw)

    monkeypatch.setattr(adapters.TrainingRun, "analyze", counting)
    acct = GdpAuditAccountant()
    for _ in range(50):
        acct.step(noise_multiplier=1.1, sample_rate=0.02)
    first = acct.get_epsilon(DELTA)
    acct.mu(), acct.advantage(), acct.tpr_at_fpr(0.01), acct.get_epsilon(DELTA)
    assert len(calls) == 1
    acct.step(noise_multiplier=1.1, sample_rate=0.02)
    assert acct.get_epsilon(DELTA) > first and len(calls) == 2
    acct.history = [(1.1, 0.02, 50)]  # as opacus.accountants.utils.get_noise_multiplier assigns it
    assert acct.get_epsilon(DELTA) == first and len(calls) == 2  # the key sees the assignment; the first is reused
    assert acct.get_epsilon(1e-7) > first and len(calls) == 3  # a new delta is refined for


def test_labels_before_the_first_step_for_shuffled_batches_and_bad_input():
    from gdpcore.adapters import GdpAuditAccounting as GdpAuditAccountant

    acct = GdpAuditAccountant()
    assert (acct.get_epsilon(DELTA), acct.mu(), acct.advantage(), acct.tpr_at_fpr(0.1)) == (
        0.0,
        (0.0, "exact"),
        (0.0, "exact"),
        (0.1, "exact"),
    )
    acct.sampler = "shuffle"  # make_private(poisson_sampling=False): Poisson accounting is only an estimate
    for _ in range(10):
        acct.step(noise_multiplier=1.0, sample_rate=0.01)
    assert acct.mu().bound == acct.epsilon(DELTA).bound == acct.advantage().bound == "estimate"
    with pytest.raises(ValueError, match="delta must be a number in"):
        acct.get_epsilon(0.0)
    with pytest.raises(ValueError, match="eps_error"):
        acct.get_epsilon(DELTA, eps_error=0.1)
    noiseless = GdpAuditAccountant()
    noiseless.step(noise_multiplier=0.0, sample_rate=0.1)  # Opacus allows it; no finite epsilon exists
    with pytest.raises(ValueError, match=r"history\[0\]\[0\] \(noise_multiplier\) must be > 0, got 0.0"):
        noiseless.get_epsilon(DELTA)


@pytest.mark.torch
def test_make_private_with_epsilon_calibrates_with_the_accountant(trained):
    """Opacus's calibration (get_noise_multiplier) runs on the named accountant: the sigma it returns meets the target
    by gdpcore's accounting of the raw parameters."""
    from opacus.accountants.utils import get_noise_multiplier

    sigma = get_noise_multiplier(
        target_epsilon=2.0, target_delta=DELTA, sample_rate=0.01, steps=300, accountant="gdp-audit"
    )
    eps = float(
        gdpcore.analyze(SubsampledGaussian(noise_multiplier=sigma, sampling_rate=0.01, steps=300)).epsilon(DELTA)
    )
    assert 1.9 < eps <= 2.0


@pytest.mark.subprocess
def test_import_gdpcore_never_imports_torch():
    """In a fresh interpreter: gdpcore and gdpcore.adapters load without torch or Opacus, and the registration
    names the extra when Opacus is absent (simulated by blocking the import)."""
    code = (
        "import sys\n"
        "sys.modules['opacus'] = None\n"
        "import gdpcore, gdpcore.adapters\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
        "try:\n"
        "    gdpcore.adapters.register_opacus_accountant()\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
        "assert 'torch' not in sys.modules\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert "pip install 'gdp-audit[opacus]'" in out.stdout
