"""gdpcore.analyze_grid: the external contract, and its numbers against dp_accounting / closed forms."""

import math

import numpy as np
import pyarrow as pa
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib

import gdpcore as g
from gdpcore.grid import analyze_grid

DELTAS = [1e-5, 1e-6]
FPRS = [0.0, 1e-4, 1e-2, 0.1]


def _dp_pld(sigma, q, T, vdi, pessimistic=True):
    single = pld_lib.from_gaussian_mechanism(
        sigma, sampling_prob=q, value_discretization_interval=vdi, pessimistic_estimate=pessimistic,
        use_connect_dots=pessimistic,
    )
    return single.self_compose(T)


# --- contract ----------------------------------------------------------------------------------------------------


def test_contract_columns_types_and_order():
    mechs = [
        g.SubsampledGaussian(noise_multiplier=1.0, sampling_rate=0.01, steps=100),
        g.Gaussian(noise_multiplier=2.0),
        g.Laplace(scale=2.0),
        g.SubsampledGaussian(noise_multiplier=2.0, sampling_rate=0.04, steps=30),
    ]
    t = analyze_grid(mechs, deltas=DELTAS, fprs=FPRS)
    assert isinstance(t, pa.Table)
    assert t.num_rows == len(mechs)
    for name in ("mu", "gdp_regret", "advantage", "bayes_security"):
        assert t.schema.field(name).type == pa.float64()
    assert t.schema.field("status").type == pa.string()
    assert t.schema.field("epsilon").type == pa.list_(pa.float64())
    assert t.schema.field("fnr").type == pa.list_(pa.float64())
    assert t.column("mechanism_hash").to_pylist() == [m.content_hash for m in mechs]
    assert t.column("row").to_pylist() == list(range(len(mechs)))
    assert set(t.column("status").to_pylist()) == {"ok"}
    assert all(len(e) == len(DELTAS) for e in t.column("epsilon").to_pylist())
    assert all(len(b) == len(FPRS) for b in t.column("fnr").to_pylist())
    # The Gaussian row is exact: closed form mu = 1/sigma.
    assert t.column("mu")[1].as_py() == pytest.approx(0.5)
    assert t.column("mu_bound")[1].as_py() == "exact"
    assert t.column("epsilon_bound")[0].as_py() == "upper"
    assert t.column("fnr_bound")[0].as_py() == "lower"


def test_empty_input_gives_empty_table():
    t = analyze_grid([], deltas=DELTAS, fprs=FPRS)
    assert t.num_rows == 0
    assert "epsilon" in t.column_names


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"mechanisms": "abc"}, "mechanisms"),
        ({"mechanisms": [g.Gaussian(noise_multiplier=1.0), 3]}, "mechanisms[1]"),
        ({"deltas": [1e-5, 1.5]}, "deltas"),
        ({"deltas": [0.0]}, "deltas"),
        ({"fprs": [-0.1]}, "fprs"),
        ({"fprs": [float("nan")]}, "fprs"),
        ({"discretization": 0.0}, "discretization"),
    ],
)
def test_bad_input_raises_value_error_naming_field(kwargs, needle):
    args = {"mechanisms": [g.Gaussian(noise_multiplier=1.0)], "deltas": DELTAS, "fprs": FPRS, **kwargs}
    mechs = args.pop("mechanisms")
    with pytest.raises(ValueError, match=r"^" + needle.replace("[", r"\[").replace("]", r"\]")):
        analyze_grid(mechs, **args)


# --- numbers against independent truth ---------------------------------------------------------------------------


def test_subsampled_gaussian_epsilon_against_dp_accounting():
    sigma, q, T = 1.0, 0.01, 300
    t = analyze_grid([g.SubsampledGaussian(noise_multiplier=sigma, sampling_rate=q, steps=T)], deltas=DELTAS, fprs=FPRS)
    eps = t.column("epsilon")[0].as_py()
    pess = _dp_pld(sigma, q, T, 1e-4)
    opt = _dp_pld(sigma, q, T, 1e-4, pessimistic=False)
    for d, e in zip(DELTAS, eps):
        ref = pess.get_epsilon_for_delta(d)
        assert e == pytest.approx(ref, rel=5e-3)
        assert e >= opt.get_epsilon_for_delta(d)
