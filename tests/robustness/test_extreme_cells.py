"""Extreme cells (sigma=0.3, q=0.5, T=1e6; sigma=50, q=1e-5; ...) through the chunk task's code path in a child
process capped by RLIMIT_AS and a wall-clock timeout: every cell ends with a result or a status row naming the reason
- never a MemoryError, an out-of-memory kill or a hang - and no published number is NaN."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import gdpcore
from tasks.grid_table import analyze_grid_table
from tests.robustness.conftest import REPO, base_env

MEMORY_CAP_MIB = 2048  # address space of the whole child: interpreter + numpy/pyarrow/prefect + one cell's budget
CELL_SECONDS = 60  # per cell; the measured worst is about 2 s on a shared 2-core machine
CELLS = [  # (sigma, q, T)
    (0.3, 0.5, 1_000_000),  # composed support ~1.7e8 points: refused before allocation -> RDP fallback row
    (0.5, 0.99, 1_000_000),  # likewise
    (50.0, 1e-5, 1_000_000),  # per-step loss spread ~2e-7: finest step allowed, tolerance not met -> status
    (50.0, 1e-5, 1),
    (0.3, 1e-5, 1_000_000),
    (0.3, 1.0, 1_000_000),  # q = 1: an exact Gaussian (closed form)
    (100.0, 0.5, 1),
]

CHILD = textwrap.dedent(
    """
    import json, resource, sys, time
    cap = int(sys.argv[1]) * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    from tasks.evaluate import Chunk, compute_chunk_table, EvalSettings
    from tasks.spec import GridSpec
    import gdpcore
    cells = json.loads(sys.argv[2])
    spec = GridSpec.model_validate({"name": "extreme", "mechanism": "subsampled_gaussian",
                                    "grid": {"noise_multiplier": [1.0], "sampling_rate": [0.5], "steps": [1]},
                                    "deltas": [1e-5, 1e-9], "fprs": [1e-3, 0.1]})
    settings = EvalSettings.from_spec(spec)
    for s, q, t in cells:
        m = gdpcore.SubsampledGaussian(noise_multiplier=s, sampling_rate=q, steps=t)
        t0 = time.perf_counter()
        row = compute_chunk_table(Chunk("extreme", m.kind, (m.to_json(),), settings), "run").to_pylist()[0]
        row["seconds"] = time.perf_counter() - t0
        # VmHWM of this process image (ru_maxrss survives exec and would report the forking parent's peak).
        hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]
        row["maxrss_mib"] = int(hwm) / 1024
        print(json.dumps({k: v for k, v in row.items() if k != "computed_at"}), flush=True)
    """
)


@pytest.mark.slow
@pytest.mark.subprocess  # `gdp` processes
def test_extreme_cells_end_within_budget_with_result_or_reason():
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(MEMORY_CAP_MIB), json.dumps(CELLS)],
        cwd=REPO,
        env=base_env(REPO / ".pytest_cache" / "unused-prefect-home"),
        capture_output=True,
        text=True,
        timeout=CELL_SECONDS * len(CELLS),
    )
    assert proc.returncode == 0, proc.stderr[-4000:]  # a MemoryError or a kill by the cap would end it non-zero
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(rows) == len(CELLS)
    for (s, q, t), r in zip(CELLS, rows, strict=True):
        where = f"sigma={s}, q={q}, T={t}: {r['status'][:120]}"
        assert r["cell_id"] == gdpcore.SubsampledGaussian(noise_multiplier=s, sampling_rate=q, steps=t).content_hash
        assert r["seconds"] < CELL_SECONDS, where
        assert r["status"] == "ok" or r["status"].split(":")[0] in (
            "over_budget",
            "tolerance_not_met",
            "discretization_limited",
        ), where
        # The published numbers: mu/advantage never NaN (+inf mu is the honest 'no finite mu certified').
        for k in ("mu", "advantage", "bayes_security"):
            assert r[k] is not None and not math.isnan(r[k]), (k, where)
        assert 0.0 <= r["advantage"] <= 1.0 and r["mu"] >= 0.0, where
        if r["status"] == "ok" or r["deltas"] is not None:  # epsilons and the curve are published: all numbers
            assert not np.isnan(r["epsilon"]).any() and not np.isnan(r["curve_fnr"]).any(), where
        if r["status"].startswith("over_budget"):
            # The RDP fallback's numbers are published (labelled upper bounds), with no lower ends.
            assert r["engine"] == "rdp_fallback" and "RDP" in r["status"] and r["epsilon_lower"] is None, where
            assert r["mu"] == math.inf and r["advantage"] == 1.0, where  # pessimistic, not plausible-looking
    by_cell = {c: r for c, r in zip(CELLS, rows, strict=True)}
    assert by_cell[(0.3, 0.5, 1_000_000)]["status"].startswith("over_budget")
    assert by_cell[(0.3, 1.0, 1_000_000)]["mu"] == pytest.approx(1000 / 0.3, rel=1e-12)
    peak = max(r["maxrss_mib"] for r in rows)
    assert peak < MEMORY_CAP_MIB
    print(
        "extreme cells: "
        + "; ".join(f"{c}: {r['seconds']:.2f} s, {r['status'][:30]}" for c, r in by_cell.items())
        + f"; peak RSS {peak:.0f} MiB under a {MEMORY_CAP_MIB} MiB address-space cap"
    )


@pytest.mark.filterwarnings("ignore:.*failed to converge.*")  # dp_accounting's RDP orders at sigma=0.3, q=0.5
def test_rdp_fallback_epsilon_is_never_nan():
    m = gdpcore.SubsampledGaussian(noise_multiplier=0.3, sampling_rate=0.5, steps=1_000_000)
    row = analyze_grid_table([m], deltas=[1e-5, 1e-9], fprs=[0.1]).to_pylist()[0]
    assert row["engine"] == "rdp_fallback"
    assert not any(math.isnan(e) for e in row["epsilon"]), row["epsilon"]  # +inf would be the honest upper bound
