"""The kind registry's own API: lookups, derived lists, dispatch errors, the CLT formula and its inverse."""

from __future__ import annotations

import math

import pytest

import gdpcore as g
from gdpcore import kinds

DPSGD = g.SubsampledGaussian(noise_multiplier=9.4, sampling_rate=2**14 / 50_000, steps=2000)


def test_clt_mu_of_de_et_al_and_its_composition():
    # Bu et al. 2020: mu = q sqrt(T (e^{1/sigma^2} - 1)) = 1.5634 for De et al.'s eps = 8 run (as in test_claims).
    assert kinds.clt_mu(DPSGD) == pytest.approx(1.5634, abs=1e-4)
    assert kinds.clt_mu_subsampled_gaussian(noise_multiplier=9.4, sampling_rate=2**14 / 50_000, steps=2000) == (
        kinds.clt_mu(DPSGD)
    )
    # mu^2 adds over parts (Dong et al. Cor. 3.3); a plain Gaussian is exact.
    both = g.Composed(mechanisms=(DPSGD, g.Gaussian(noise_multiplier=2.0)))
    assert kinds.clt_mu(both) == pytest.approx(math.hypot(kinds.clt_mu(DPSGD), 0.5), rel=1e-14)
    assert kinds.clt_mu(g.SelfComposed(mechanism=DPSGD, count=4)) == pytest.approx(2 * kinds.clt_mu(DPSGD), rel=1e-14)


@pytest.mark.parametrize("q", [0.01, 0.3, 1.0])
def test_solve_clt_inverts_the_formula_for_each_parameter(q):
    sigma, steps = 1.3, 700
    mu = kinds.clt_mu_subsampled_gaussian(noise_multiplier=sigma, sampling_rate=q, steps=steps)
    assert kinds.solve_clt_subsampled_gaussian(mu, sampling_rate=q, steps=steps) == pytest.approx(sigma, rel=1e-12)
    assert kinds.solve_clt_subsampled_gaussian(mu, noise_multiplier=sigma, sampling_rate=q) == pytest.approx(
        steps, rel=1e-12
    )
    if q < 1:
        assert kinds.solve_clt_subsampled_gaussian(mu, noise_multiplier=sigma, steps=steps) == pytest.approx(
            q, rel=1e-12
        )
    with pytest.raises(ValueError, match="exactly one"):
        kinds.solve_clt_subsampled_gaussian(mu, noise_multiplier=sigma, sampling_rate=q, steps=steps)
    with pytest.raises(ValueError, match="mu"):
        kinds.solve_clt_subsampled_gaussian(math.inf, sampling_rate=q, steps=steps)


def test_unsupported_property_raises_the_named_error_with_the_reason():
    lap = g.Laplace(scale=1.0)
    assert not kinds.supports(lap, "claims.clt") and kinds.supports(lap, "analyze")
    with pytest.raises(kinds.UnsupportedMechanismError, match="Laplace.*subsampled"):
        kinds.clt_mu(g.Composed(mechanisms=(g.Gaussian(noise_multiplier=1.0), lap)))
    assert issubclass(kinds.UnsupportedMechanismError, ValueError)  # callers catching ValueError keep working
    dg = g.DiscreteGaussian(sigma=2.0)
    with pytest.raises(kinds.UnsupportedMechanismError, match="discrete_gaussian"):
        g.gdpt.get_gdp_upper_bound(dg)
    assert kinds.exact_mu(dg) is None  # "no closed form", not an error
    assert kinds.subsampled_gaussian_phases(g.Composed(mechanisms=(DPSGD, dg))) is None


def test_supports_is_a_dry_run_over_the_tree():
    dg = g.DiscreteGaussian(sigma=2.0)
    mixed = g.SelfComposed(mechanism=g.Composed(mechanisms=(g.Gaussian(noise_multiplier=1.0), dg)), count=3)
    assert kinds.supports(mixed, "rdp") and not kinds.supports(mixed, "to_dp_event")
    assert kinds.supports("composed", "to_dp_event")  # a composite kind name: decided by its parts
    with pytest.raises(ValueError, match="what must be one of"):
        kinds.supports(dg, "no_such_property")
    with pytest.raises(ValueError, match="mechanism kind must be one of"):
        kinds.get("no_such_kind")


def test_phases_merge_over_compositions():
    a = g.SubsampledGaussian(noise_multiplier=1.0, sampling_rate=0.01, steps=100)
    b = g.SubsampledGaussian(noise_multiplier=2.0, sampling_rate=0.02, steps=5)
    m = g.Composed(mechanisms=(g.SelfComposed(mechanism=a, count=3), b, a))
    assert kinds.subsampled_gaussian_phases(m) == {(1.0, 0.01): 400, (2.0, 0.02): 5}
    assert (
        kinds.subsampled_gaussian_phases(g.SubsampledGaussian(noise_multiplier=1.0, sampling_rate=1.0, steps=3)) is None
    )


def test_derived_parameter_lists():
    cols = kinds.param_columns()
    assert cols["sensitivity"] is float  # int for the discrete Gaussian, float elsewhere: widened
    assert cols["steps"] is int and cols["neighbouring"] is str
    assert kinds.lake_columns("randomized_response") == {"epsilon": "rr_epsilon", "neighbouring": "neighbouring"}
    assert "composed" not in kinds.flat_kinds() and "composed" in kinds.kind_names()
    sg = {p.name: p for p in kinds.get("subsampled_gaussian").params}
    assert sg["steps"].required and not sg["sensitivity"].required and sg["sensitivity"].default == 1.0
    assert "integer >= 1" in sg["steps"].describe()


def test_register_refuses_a_second_kind_of_the_same_name():
    with pytest.raises(kinds.KindContractError, match="already registered"):
        kinds.register(kinds.KindSpec(**{**_fields(kinds.get("gaussian"))}))


def _fields(spec: kinds.KindSpec) -> dict:
    import dataclasses

    # A copy (not the registered object itself) with every hook of the Gaussian.
    return {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)} | {"summary": "a copy"}
