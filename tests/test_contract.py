"""The contract every mechanism kind keeps with every producer (the shape of dp_accounting's PrivacyAccountantTest).

Parametrised over *every registered kind* (:mod:`gdpcore.kinds`), a few random instances each drawn by the kind's
own ``draw`` hook with a fixed seed (compositions included), times every public function that takes a mechanism:
``analyze`` (both sides), ``analyze_grid``, representation regrets, the Delta-divergence, named-accountant claims,
GDP bounds (gdpt), Bayes security, the DpEvent, the JSON round trip and content hash, the CLI parameters and the lake
columns. Invariants, which hold for any correct accountant: lower <= upper (eps at every delta from 1e-3 to 1e-12,
mu, advantage); eps non-increasing in delta; advantage, beta, delta in [0, 1]; beta <= 1 - alpha; mu_lower <= mu;
no NaN where a status is "ok"; an upper bound from another accountant (RDP) never below our lower end; and, for a
combination a kind declares unsupported, :class:`gdpcore.kinds.UnsupportedMechanismError`, never a number. The slow
part checks the upper ends against dp_accounting's pessimistic PLD at a 10x finer step on sampled cells.

A kind registered without a hook a producer needs fails here twice: :func:`gdpcore.kinds.check_kind` (run for every
registered kind) names the gap, and the meta-tests at the end show that a kind forced into the registry without a
hook is reported.
"""

from __future__ import annotations

import dataclasses
import json
import math
import zlib
from typing import ClassVar

import dp_accounting
import numpy as np
import pytest
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant
from pld_oracle import dp_accounting_pld  # dp_accounting's own composition (tests/pld_oracle.py)

import gdpcore as g
from gdpcore import kinds
from gdpcore._validation import Choice, Positive
from gdpcore.bayes_security import get_bayes_security_from_report
from gdpcore.divergence import (
    get_bayes_risk,
    get_delta_divergence,
    get_extremal_divergences,
    is_at_least_as_private,
)
from gdpcore.gdpt import get_gdp_upper_bound
from gdpcore.grid import report_row
from gdpcore.kinds import UnsupportedMechanismError
from gdpcore.mechanisms import Mechanism, param
from gdpcore.representations import (
    REPRESENTATIONS,
    get_delta_from_rdp,
    get_epsilon_from_mechanism,
    get_rdp_and_label,
    get_regret,
    get_representation_table,
    get_rho_from_mechanism,
)

SEED = 13
PER_KIND = 3
DELTAS = np.array([1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9, 1e-10, 1e-11, 1e-12])
FPRS = np.concatenate([[0.0], np.logspace(-10, -1, 19), np.linspace(0.15, 1.0, 18)])
EPSILONS = np.array([0.0, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0])
ROUND = 1e-12  # floating-point slack of comparisons between two computed numbers (as in tests/test_properties.py)


def _draws(kind: str) -> list[Mechanism]:
    # One generator per kind, seeded by the kind's name: adding a kind does not change the others' instances.
    rng = np.random.default_rng([SEED, zlib.crc32(kind.encode())])
    return [kinds.draw(kind, rng) for _ in range(PER_KIND)]


CASES = [(kind, i, m) for kind in kinds.kind_names() for i, m in enumerate(_draws(kind))]
IDS = [f"{kind}-{i}" for kind, i, _ in CASES]
# Mechanisms whose invariant is known to fail, pinned by instance (strict xfail: the marker must be removed when a fix
# lands). Pinned, not keyed by a drawn cell's id: a composite kind draws its parts from every registered leaf kind,
# so registering a kind changes which mechanism "self_composed-1" is (the case below was that cell until the
# replace-one Laplace and batch-sampler kinds were registered; it is kept here so that its failure stays tracked).
PINNED_FAILURES: dict[str, list[tuple[str, Mechanism, str]]] = {
    # Seed 002 Lemma 5 (TV/2 + R*(1/2) = 1/2, read two ways off one curve): the two reads disagree beyond the 1e-12
    # slack on this composition.
    "divergence": [
        (
            "kary_rr_self_composed_pinned",
            g.SelfComposed(
                mechanism=g.KaryRandomizedResponse(
                    noise_parameter=0.2587487981326018,
                    num_buckets=6,
                    sampling_rate=0.5350435702255755,
                    neighbouring="replace_one",
                ),
                count=3,
            ),
            "SelfComposed(KaryRandomizedResponse(p=0.2587, k=6, q=0.535), 3): sum = 0.4999986 (conservative: the "
            "Bayes risk read below (1 - TV)/2)",
        )
    ],
    # Fixed: composed-1 (0.5 + 1.5e-12) by the generic path's bounded compositions; subsampled_laplace-0
    # (0.5 + 6.2e-12) and -2 (0.5 + 1.1e-12) by vertices from sums of positive terms (gdpcore.curve).
    # Fixed by the single curve producer (round-off on the safe side, tilted tails): subsampled_gaussian-2 =
    # SubsampledGaussian(sigma=1.0501, q=0.3511, T=1897) had an inverted eps bracket at delta=1e-12 (lower 251.2179 >
    # upper 251.1559, and above dp_accounting's pessimistic eps at step 1e-5, 251.0630).
}


def _case_params(check: str) -> list:
    out = [pytest.param(*case, id=cid) for case, cid in zip(CASES, IDS, strict=True)]
    for cid, m, reason in PINNED_FAILURES.get(check, []):
        out.append(pytest.param(m.kind, -1, m, id=cid, marks=[pytest.mark.xfail(strict=True, reason=reason)]))
    return out


_REPORTS: dict[str, g.PrivacyReport] = {}


def _report(m: Mechanism) -> g.PrivacyReport:
    key = m.content_hash
    if key not in _REPORTS:
        _REPORTS[key] = g.analyze(m)
    return _REPORTS[key]


def _eps(report: g.PrivacyReport, side: str = "pessimistic") -> np.ndarray:
    return np.asarray(report.epsilon(DELTAS, side=side), dtype=float)


def _lower_eps(report: g.PrivacyReport, delta: float) -> float:
    """The report's lower end of eps, or 0 (the trivial lower bound) for upper-bound-only kinds (zCDP statements,
    truncated batches), whose lower ends are unavailable."""
    return float(report.epsilon(delta, side="optimistic")) if report.has_optimistic else 0.0


# Under REPLACE_ONE dp_accounting's RDP accountant reads the noise of Gaussian, Laplace and sampled-without-replacement
# events relative to the replace-one sensitivity (twice the norm bound), its PLD accountant and the DpEvent
# docstrings relative to the norm bound (gdpcore.events): on these its RDP value is not an upper bound of the event as
# documented (google/differential-privacy#378), so the "RDP >= our lower end" invariant is not asked of it.
RDP_CONVENTION_DIFFERS = ("gaussian", "laplace", "sampled_without_replacement_gaussian")


def _rdp_convention_differs(m: Mechanism) -> bool:
    return m.neighbouring_relation == "replace_one" and any(
        leaf.kind in RDP_CONVENTION_DIFFERS for leaf in kinds._leaves(m)
    )


# ---------------------------------------------------------------------------------------------------------------------
# The registry itself
# ---------------------------------------------------------------------------------------------------------------------
def assert_kind_contract(name: str) -> None:
    """Everything the producers need from a registered kind (the meta-tests feed it an incomplete one)."""
    spec = kinds.get(name)
    assert kinds.check_kind(spec) == [], kinds.check_kind(spec)
    assert spec.name == name and issubclass(spec.cls, Mechanism)
    if not spec.composite:
        for hook in kinds.HOOKS:
            value = spec.hook(hook)
            assert callable(value) or isinstance(value, kinds.Unsupported), f"{name}: hook {hook!r} undeclared"
        for hook in kinds.REQUIRED_HOOKS:
            ok = callable(spec.draw) if hook == "draw" else kinds.supports(name, hook)
            assert ok, f"{name}: required hook {hook!r} unsupported"
    for p in spec.params:
        assert p.doc and p.type in (float, int, str), f"{name}.{p.name}: undocumented or untyped parameter"
    m = kinds.draw(name, np.random.default_rng(0))
    assert type(m) is spec.cls


@pytest.mark.parametrize("name", kinds.kind_names())
def test_every_registered_kind_declares_every_hook(name):
    assert_kind_contract(name)


def test_registry_lists_are_derived_and_complete():
    assert set(kinds.kind_names()) >= {"gaussian", "subsampled_gaussian", "composed", "self_composed"}
    assert set(kinds.flat_kinds()) == {k for k in kinds.kind_names() if not kinds.get(k).composite}
    from tasks.lake import PARAM_COLUMNS, param_columns
    from tasks.spec import GRID_KINDS

    assert GRID_KINDS == kinds.flat_kinds()
    assert set(PARAM_COLUMNS) == set(kinds.param_columns())
    for kind in kinds.flat_kinds():
        m = kinds.draw(kind, np.random.default_rng(1))
        cols = param_columns(m.to_dict())
        assert set(cols) == set(PARAM_COLUMNS)
        for p in kinds.get(kind).params:  # every parameter lands in its own column
            assert cols[p.lake_column] == getattr(m, p.name)


def test_lake_views_and_plots_carry_every_parameter_column():
    # Hand-written column lists outside the registry: this tells the author of a new kind which ones to extend.
    from tasks.plots import _AXES
    from tasks.publish import _CELL_COLUMNS

    cell_columns = {c.strip() for c in _CELL_COLUMNS.split(",")}
    for col, typ in kinds.param_columns().items():
        assert col in cell_columns, f"tasks/publish.py _CELL_COLUMNS lacks parameter column {col!r}"
        if typ is not str:
            assert col in _AXES, f"tasks/plots.py _AXES lacks numeric parameter column {col!r}"


def test_cli_help_lists_every_flat_kind_and_parameter(capsys):
    from flows.cli import main

    assert main(["analyze", "--help"]) == 0
    out = capsys.readouterr().out
    for kind in kinds.flat_kinds():
        assert kind in out
        assert main(["analyze", kind, "--help"]) == 0
        kind_help = capsys.readouterr().out
        for p in kinds.get(kind).params:
            assert f"--{p.name.replace('_', '-')}" in kind_help
            assert p.doc in " ".join(kind_help.split())  # the help is the declaration's


# ---------------------------------------------------------------------------------------------------------------------
# Descriptions: JSON, hash, CLI, DpEvent
# ---------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("kind", "i", "m"), _case_params("json"))
def test_json_round_trip_and_content_hash(kind, i, m):
    again = g.mechanism_from_dict(json.loads(json.dumps(m.to_dict())))
    assert again == m and hash(again) == hash(m)
    assert again.content_hash == m.content_hash and len(m.content_hash) == 32
    assert again.to_json() == m.to_json()
    assert m.kind == kind


@pytest.mark.parametrize(("kind", "i", "m"), [c for c in _case_params("cli") if not kinds.get(c.values[0]).composite])
def test_cli_parameters_round_trip(kind, i, m):
    from flows.cli import _build_parser, _mechanism_from_args

    params = []
    for p in kinds.get(kind).params:
        params += [f"--{p.name.replace('_', '-')}", str(getattr(m, p.name))]
    assert _mechanism_from_args(_build_parser().parse_args(["analyze", kind, *params])) == m


@pytest.mark.parametrize(("kind", "i", "m"), _case_params("dp_event"))
def test_to_dp_event_round_trip_or_declared_unsupported(kind, i, m):
    if not kinds.supports(m, "to_dp_event"):
        with pytest.raises(UnsupportedMechanismError):
            kinds.to_dp_event(m)
        return
    assert kinds.supports(m, "from_dp_event"), f"{kind}: to_dp_event without its inverse"
    event = kinds.to_dp_event(m)
    assert isinstance(event, dp_accounting.DpEvent)
    assert kinds.to_dp_event(g.mechanism_from_dict(m.to_dict())) == event  # equal descriptions, equal events
    # Back from the event (sensitivity 1: events count noise in units of it): the same event and the same release.
    back = kinds.mechanism_from_dp_event(event, neighbouring=m.neighbouring_relation)
    assert kinds.to_dp_event(back) == event and back.neighbouring_relation == m.neighbouring_relation
    orders = np.array([1.5, 4.0, 32.0])
    np.testing.assert_allclose(
        get_rdp_and_label(back, orders=orders)[0], get_rdp_and_label(m, orders=orders)[0], rtol=1e-12
    )
    assert get_epsilon_from_mechanism(back) == pytest.approx(get_epsilon_from_mechanism(m), rel=1e-12)
    for d in (1e-3, 1e-6):
        eps_back = dp_accounting_pld(back, step=1e-3, pessimistic=True).get_epsilon_for_delta(d)
        eps = dp_accounting_pld(m, step=1e-3, pessimistic=True).get_epsilon_for_delta(d)
        assert eps_back == pytest.approx(eps, rel=1e-9)
    relation = (
        dp_accounting.NeighboringRelation.REPLACE_ONE
        if m.neighbouring_relation == "replace_one"
        else dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
    )
    # dp_accounting's own accountants either take the event or say why not: never silently mis-account it.
    rdp = rdp_privacy_accountant.RdpAccountant(neighboring_relation=relation)
    if rdp.supports(event) and not _rdp_convention_differs(m):
        rdp.compose(event)
        eps = rdp.get_epsilon(1e-5)
        assert eps >= _lower_eps(_report(m), 1e-5) - ROUND  # an upper bound >= our lower end


# ---------------------------------------------------------------------------------------------------------------------
# Producers of curves
# ---------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("kind", "i", "m"), _case_params("analyze"))
def test_analyze_both_sides(kind, i, m):
    assert kinds.supports(m, "analyze")
    r = _report(m)
    if not r.has_optimistic:  # upper ends only: every lower end is unavailable, never a number posing as one
        assert r.status.startswith("upper_bound_only"), r.status
        assert math.isnan(r.mu_lower) and math.isnan(r.advantage_lower)
        with pytest.raises(ValueError, match="optimistic"):
            r.epsilon(1e-5, side="optimistic")
        hi = _eps(r)
        assert not np.isnan(hi).any() and np.all(hi >= 0) and np.all(np.diff(hi) >= -ROUND)
        assert 0.0 <= r.advantage <= 1.0 + ROUND and r.mu >= 0
        return
    hi, lo = _eps(r), _eps(r, "optimistic")
    assert not np.isnan(hi).any() and not np.isnan(lo).any()
    assert np.all(hi >= 0) and np.all(lo >= 0)
    bad = lo > hi + ROUND
    assert not bad.any(), list(zip(DELTAS[bad], lo[bad], hi[bad], strict=True))
    for side in (hi, lo):  # DELTAS ascend in magnitude downwards: eps may only grow as delta shrinks
        assert np.all(np.diff(side) >= -ROUND)
    assert 0.0 <= r.mu_lower <= r.mu + ROUND
    assert 0.0 <= r.advantage_lower <= r.advantage + ROUND <= 1.0 + ROUND
    assert 0.0 <= r.bayes_security <= 1.0
    for side in ("pessimistic", "optimistic"):
        beta = np.asarray(r.fnr(FPRS, side=side), dtype=float)
        assert np.all((beta >= 0) & (beta <= 1)) and np.all(beta <= 1 - FPRS + ROUND)
        assert np.all(np.diff(beta) <= ROUND)
        delta = np.asarray(r.delta(EPSILONS, side=side), dtype=float)
        assert np.all((delta >= 0) & (delta <= 1)) and np.all(np.diff(delta) <= ROUND)
    assert np.all(np.asarray(r.fnr(FPRS)) <= np.asarray(r.fnr(FPRS, side="optimistic")) + ROUND)
    lo_reg, hi_reg = r.gdp_regret_bracket
    assert not math.isnan(r.gdp_regret) and 0.0 <= lo_reg <= hi_reg
    exact = kinds.exact_mu(m)
    if exact is not None:  # the closed form is the report
        assert r.exact and r.mu == pytest.approx(exact, rel=1e-12)


@pytest.mark.parametrize(("kind", "i", "m"), [c for c in _case_params("pld_exact") if kinds.exact_mu(c.values[2])])
def test_pld_bracket_contains_the_closed_form(kind, i, m):
    """Where a closed form exists it is the truth: the PLD accountant's bracket must contain it."""
    exact = g.analyze(m)
    r = g.analyze(m, accountant="pld")
    assert exact.exact and not r.exact
    eps_true = np.asarray(exact.epsilon(DELTAS), float)
    assert np.all(_eps(r, "optimistic") <= eps_true + ROUND) and np.all(eps_true <= _eps(r) + ROUND)
    assert r.mu_lower - ROUND <= exact.mu <= r.mu + ROUND
    assert r.advantage_lower - ROUND <= exact.advantage <= r.advantage + ROUND
    beta_true = np.asarray(exact.fnr(FPRS), float)
    assert np.all(np.asarray(r.fnr(FPRS)) <= beta_true + ROUND)
    assert np.all(beta_true <= np.asarray(r.fnr(FPRS, side="optimistic")) + ROUND)


@pytest.mark.parametrize(("kind", "i", "m"), _case_params("analyze_grid"))
def test_analyze_grid_row(kind, i, m):
    assert kinds.supports(m, "analyze_grid")
    (report,) = g.analyze_grid([m], deltas=list(DELTAS))
    row = report_row(0, report, deltas=DELTAS, fprs=FPRS)
    assert row["mechanism_hash"] == m.content_hash and row["mechanism_kind"] == kind
    if row["status"] != "ok":
        allowed = ("tolerance_not_met", "over_budget", "upper_bound_only")
        if kinds.ends_notes(m):  # ends bounding different mechanisms (the samplers): the bracket's own width
            allowed += ("bracket_of_bounds",)
        assert row["status"].startswith(allowed), row["status"]
    if row["status"].startswith("upper_bound_only"):  # lower ends unavailable: empty, never a number
        assert row["epsilon_lower"] is None and row["mu_lower"] is None and row["advantage_lower"] is None
        row = {**row, "epsilon_lower": [0.0] * len(DELTAS), "mu_lower": 0.0, "advantage_lower": 0.0}
    eps, eps_lo = np.array(row["epsilon"], float), np.array(row["epsilon_lower"], float)
    beta = np.array(row["fnr"], float)
    if row["status"] == "ok":
        for name in ("mu", "mu_lower", "gdp_regret", "advantage", "advantage_lower", "bayes_security"):
            assert not math.isnan(row[name]), name
        assert not np.isnan(eps).any() and not np.isnan(eps_lo).any() and not np.isnan(beta).any()
    assert np.all(eps_lo <= eps + ROUND) and np.all(np.diff(eps) >= -ROUND)
    assert row["mu_lower"] <= row["mu"] + ROUND
    assert 0.0 <= row["advantage_lower"] <= row["advantage"] + ROUND <= 1.0 + ROUND
    assert np.all((beta >= 0) & (beta <= 1)) and np.all(beta <= 1 - FPRS + ROUND)


# ---------------------------------------------------------------------------------------------------------------------
# Functions of a mechanism or of its report
# ---------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("kind", "i", "m"), _case_params("representations"))
def test_representation_regrets(kind, i, m):
    r = _report(m)
    if all(kinds.supports(m, f"regret.{rep}") for rep in REPRESENTATIONS):
        rows = get_representation_table(r, delta=1e-5)
        assert [row["representation"] for row in rows] == list(REPRESENTATIONS)
        assert all(row["mechanism_hash"] == m.content_hash for row in rows)
        results = [(row["representation"], row["regret"], row["regret_lower"]) for row in rows]
    else:
        with pytest.raises(UnsupportedMechanismError):
            get_representation_table(r, delta=1e-5)
        results = []
        for rep in REPRESENTATIONS:
            kwargs = {"delta": 1e-5} if rep == "epsilon_delta" else {}
            if not kinds.supports(m, f"regret.{rep}"):
                with pytest.raises(UnsupportedMechanismError):
                    get_regret(r, rep, **kwargs)
                continue
            res = get_regret(r, rep, **kwargs)
            results.append((rep, res.regret, res.regret_lower))
    for rep, regret, regret_lower in results:
        assert not math.isnan(regret) and not math.isnan(regret_lower), rep
        if math.isinf(regret):  # pure_dp of a mechanism that is not pure DP
            assert rep == "pure_dp" and math.isinf(get_epsilon_from_mechanism(m))
            continue
        assert 0.0 <= regret_lower <= regret <= 0.5 + ROUND, rep
    eps0 = get_epsilon_from_mechanism(m)
    assert eps0 >= _lower_eps(r, 0.5) - ROUND  # pure eps bounds eps(delta) for every delta
    orders = np.array([1.5, 2.0, 8.0, 64.0])
    rdp, label = get_rdp_and_label(m, orders=orders)
    assert label in ("exact", "upper") and np.all(rdp >= 0)
    # RDP grows with t; it is +inf from some order on when the curve has mass at +inf loss (f(0) < 1: user-supplied
    # profiles and PLDs, gdpcore.kinds.curves), never NaN.
    finite = np.isfinite(rdp)
    assert not np.isnan(rdp).any() and np.all(finite[:-1] >= finite[1:])
    assert np.all(np.diff(rdp[finite]) >= -ROUND)
    rho, rlabel = get_rho_from_mechanism(m)
    assert rho >= 0 and rlabel in ("exact", "upper")
    assert np.all(rdp <= rho * orders * (1 + ROUND) + ROUND)  # rho* = sup_t eps(t)/t
    # RDP and zCDP are upper bounds too: their implied delta at our lower eps(delta) is never below delta.
    for delta in (1e-3, 1e-6, 1e-9):
        lo = _lower_eps(r, delta)
        for curve in (rdp, rho * orders):
            assert float(get_delta_from_rdp(orders=orders, rdp=curve, epsilon=lo)) >= delta * (1 - ROUND)


@pytest.mark.parametrize(("kind", "i", "m"), _case_params("divergence"))
def test_delta_divergence(kind, i, m):
    assert kinds.supports(m, "divergence")
    r = _report(m)
    same = get_delta_divergence(r, r)
    assert same.lower == 0.0 <= same.upper  # no prior is more exposed under M than under M
    assert is_at_least_as_private(r, r).at_least_as_private is not False
    ref = g.Gaussian(noise_multiplier=1.0, neighbouring=m.neighbouring_relation)
    for a, b in ((r, ref), (ref, r)):
        res = get_delta_divergence(a, b, symmetric=False)
        assert 0.0 <= res.lower <= res.upper <= 0.5 + ROUND and res.value == res.upper
    pi = np.array([0.0, 0.1, 0.5, 0.9, 1.0])
    risk = np.asarray(get_bayes_risk(r, pi), float)
    assert np.all((risk >= 0) & (risk <= np.minimum(pi, 1 - pi) + ROUND))  # never above the trivial guess
    ext = get_extremal_divergences(r)
    assert 0.0 <= ext["from_perfect_privacy"] <= 0.5 and 0.0 <= ext["to_blatant_non_privacy"] <= 0.5
    assert ext["sum"] == pytest.approx(0.5, abs=ROUND)  # seed 002 Lemma 5, for symmetric curves


@pytest.mark.parametrize(("kind", "i", "m"), _case_params("bayes_security"))
def test_bayes_security(kind, i, m):
    r = _report(m)
    bs = get_bayes_security_from_report(r)
    assert 0.0 <= bs.value <= 1.0 and bs.value == pytest.approx(1.0 - r.advantage, abs=ROUND)
    assert bs.bound == ("exact" if r.exact else "lower")
    assert bs.relation == m.neighbouring_relation


@pytest.mark.parametrize(("kind", "i", "m"), _case_params("claims"))
def test_claims_with_every_named_accountant(kind, i, m):
    r = _report(m)
    delta = 1e-5
    tight, lower = float(r.epsilon(delta)), _lower_eps(r, delta)
    for accountant, family in (("RDP", "rdp"), ("PLD", "pld"), ("GDP", "clt")):
        check = g.check_claim(m, epsilon=max(tight, 1e-6), delta=delta, accountant=accountant, tight_epsilon=tight)
        rep = check.reproduction
        assert check.certified is True  # the claim is the tight upper bound itself
        if not kinds.supports(m, f"claims.{family}"):
            assert rep.epsilon is None and check.status == "accountant not reproducible" and rep.detail
            continue
        if rep.epsilon is None:  # dp_accounting's accountant declined the event (e.g. a relation): said, not guessed
            assert family == "rdp" and check.status == "accountant not reproducible" and rep.detail
            continue
        assert math.isfinite(rep.epsilon) and rep.epsilon >= 0
        if rep.bound == "upper":  # RDP and PLD are upper bounds: never below our lower end
            assert rep.epsilon >= lower - ROUND, (accountant, rep.epsilon, lower)
    if kinds.supports(m, "claims.clt"):
        mu = kinds.clt_mu(m)
        assert math.isfinite(mu) and mu >= 0
        if r.exact:  # plain Gaussians: the CLT mu is exact
            assert mu == pytest.approx(r.mu, rel=1e-12)
    else:
        with pytest.raises(UnsupportedMechanismError):
            kinds.clt_mu(m)


@pytest.mark.parametrize(("kind", "i", "m"), _case_params("gdpt"))
def test_gdp_upper_bound(kind, i, m):
    if not kinds.supports(m, "gdpt.gdp_upper_bound"):
        with pytest.raises(UnsupportedMechanismError):
            get_gdp_upper_bound(m)
        return
    r = _report(m)
    mu, label = get_gdp_upper_bound(m)
    assert label in ("exact", "upper") and math.isfinite(mu)
    assert (
        not r.has_optimistic or mu >= r.mu_lower - ROUND
    )  # an analytic mu-GDP bound is at least the tightest mu's lower end
    if label == "exact" and r.exact:
        assert mu == pytest.approx(r.mu, rel=1e-12)


@pytest.mark.parametrize(("kind", "i", "m"), _case_params("phases"))
def test_subsampled_gaussian_phases_compose_to_the_mechanism(kind, i, m):
    phases = kinds.subsampled_gaussian_phases(m)
    if phases is None:
        return
    assert all(0 < q < 1 and sigma > 0 and steps >= 1 for (sigma, q), steps in phases.items())
    # The phases describe the same release: their composition has the same RDP curve.
    parts = tuple(
        g.SubsampledGaussian(noise_multiplier=s, sampling_rate=q, steps=t) for (s, q), t in sorted(phases.items())
    )
    orders = [2.0, 16.0]
    np.testing.assert_allclose(
        get_rdp_and_label(g.Composed(mechanisms=parts), orders=orders)[0],
        get_rdp_and_label(m, orders=orders)[0],
        rtol=1e-12,
    )


# ---------------------------------------------------------------------------------------------------------------------
# Upper ends against dp_accounting at a 10x finer step (slow)
# ---------------------------------------------------------------------------------------------------------------------
# The first instance of every kind, and subsampled_gaussian-2 (the cell of a fixed failure, PINNED_FAILURES).
# dp_accounting's PLD accountant builds the discrete Laplace with privacy buckets (its constructor's default), looser
# than the connect-the-dots construction at any step: on discrete_laplace-0 (a = 0.5422, Delta = 2) it gives
# delta = 1.0045e-3 at step 1e-5 where the exact delta (summed over the integers) is 1.0000e-3. The reference there is
# dp_accounting's connect-the-dots constructor (the kind's construction).
ACCOUNTANT_LOOSER_THAN_CONNECT_DOTS = ("discrete_laplace",)
# A zCDP statement has no dp_accounting PLD; its construction at a finer step is another valid upper bound, not a
# tighter one. Its references are in tests/test_dpevent_kinds.py (Bun & Steinke closed forms, the RDP accountant).
NO_PLD_REFERENCE = ("zcdp",)


SAMPLED = [
    c
    for c in _case_params("reference")
    if (c.values[1] == 0 or c.id == "subsampled_gaussian-2") and c.values[0] not in NO_PLD_REFERENCE
]
REFERENCE_DELTAS = (1e-3, 1e-6, 1e-9, 1e-12)
TRUNCATION = 1e-14
"""dp_accounting moves up to 1e-15 of tail mass per composition (``tail_mass_truncation``; fewer than ten here)."""
SUMMATION = 1e-10
"""Relative rounding of a delta summed over a PMF of up to ~1e6 entries (n * machine epsilon): dp_accounting's
pessimistic delta(0) of a Gaussian at 1e-5 sits 8e-13 below the exact closed form (0.2436304886913 vs ...6921)."""


def _le(a: float, b: float, slack: float = TRUNCATION) -> bool:
    """a <= b up to the reference's absolute slack and relative summation rounding."""
    return a <= b + slack + SUMMATION * abs(b)


def _reference_pld(m: Mechanism, step: float, pessimistic: bool):
    """dp_accounting's own event -> PLD path where its PLD accountant takes the event, else dp_accounting's PLD of
    the kind's construction composed by dp_accounting (tests/pld_oracle.py)."""
    looser = any(leaf.kind in ACCOUNTANT_LOOSER_THAN_CONNECT_DOTS for leaf in kinds._leaves(m))
    if pessimistic and kinds.supports(m, "to_dp_event") and not looser:
        relation = (
            dp_accounting.NeighboringRelation.REPLACE_ONE
            if m.neighbouring_relation == "replace_one"
            else dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
        )
        acc = pld_privacy_accountant.PLDAccountant(relation, value_discretization_interval=step)
        event = kinds.to_dp_event(m)
        if acc.supports(event):
            acc.compose(event)
            return acc._pld
    return dp_accounting_pld(m, step=step, pessimistic=pessimistic)


def _excess_mass(pld) -> float:
    """P-mass a dp_accounting PMF holds beyond 1: what it gained in composition, and so the most by which its delta
    can overstate its own construction (its composed PMFs gain mass at fine steps: 2.3e-5 measured on composed-0
    at 1e-5, against 2e-7 at 1e-4; tests/test_properties.py and gdpcore/accounting.py describe the same effect)."""
    excess = 0.0
    for pmf in (pld._pmf_remove, pld._pmf_add):
        dense = pmf.to_dense_pmf()
        excess = max(excess, float(np.clip(dense._probs, 0, None).sum() + dense._infinity_mass) - 1.0)
    return excess


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "i", "m"), SAMPLED)
@pytest.mark.timeout(900)  # dp_accounting at a finer step: the mixture kind hit 300 s at load 12 on 2 cores
def test_upper_ends_never_below_dp_accounting_at_a_finer_step(kind, i, m):
    """At a 10x finer step: the reference's delta at our upper eps is at most delta (up to the mass the reference
    gained), and the bracket holds the theorems upper >= truth >= the reference's optimistic side, lower <= truth <=
    its pessimistic side. Compared in delta, where both accountants are exact functions of their PMFs (their eps
    root-finding differs at 1e-11)."""
    r = _report(m)
    step = (r.discretization or 1e-4) / 10.0
    pess = _reference_pld(m, step, pessimistic=True)
    slack = TRUNCATION + _excess_mass(pess)
    if not r.has_optimistic:  # upper ends only (zCDP statements, truncated batches): no lower end to hold
        for delta in REFERENCE_DELTAS:
            hi = float(r.epsilon(delta))
            assert _le(pess.get_delta_for_epsilon(hi), delta, slack), (delta, hi, pess.get_delta_for_epsilon(hi))
        assert _le(pess.get_delta_for_epsilon(0.0), r.advantage, slack)
        return
    opt = dp_accounting_pld(m, step=step, pessimistic=False)
    for delta in REFERENCE_DELTAS:
        hi = float(r.epsilon(delta))
        lo = _lower_eps(r, delta)
        assert _le(pess.get_delta_for_epsilon(hi), delta, slack), (delta, hi, pess.get_delta_for_epsilon(hi))
        assert _le(opt.get_delta_for_epsilon(hi), delta), (delta, hi)
        assert _le(delta, pess.get_delta_for_epsilon(lo)), (delta, lo)
    adv_opt, adv_pess = opt.get_delta_for_epsilon(0.0), pess.get_delta_for_epsilon(0.0)
    assert _le(adv_opt, r.advantage)  # upper >= truth >= the reference's lower bound
    if r.exact:
        assert _le(r.advantage, adv_pess)
    else:
        assert _le(adv_pess, r.advantage, slack)
    assert _le(r.advantage_lower, adv_pess)


# ---------------------------------------------------------------------------------------------------------------------
# Meta-tests: the contract catches a kind that lacks what a producer needs
# ---------------------------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, kw_only=True)
class _Dummy(Mechanism):
    """A throw-away kind: a Gaussian under another name."""

    kind: ClassVar[str] = "contract_dummy"
    noise_multiplier: float = param("noise multiplier", Positive())
    neighbouring: str = param("relation", Choice(("add_remove",)), default="add_remove")


def _complete_dummy_spec(**overrides) -> kinds.KindSpec:
    gauss = kinds.get("gaussian")
    hooks = {h: gauss.hook(h) for h in kinds.HOOKS}
    hooks["draw"] = lambda rng: _Dummy(noise_multiplier=float(rng.uniform(0.5, 2.0)))
    hooks.update(overrides)
    return kinds.KindSpec(cls=_Dummy, summary="test kind", **hooks)


def test_meta_complete_dummy_kind_passes_the_contract_and_round_trips():
    kinds.register(_complete_dummy_spec())
    try:
        assert_kind_contract("contract_dummy")
        m = _Dummy(noise_multiplier=1.3)
        assert g.mechanism_from_dict(m.to_dict()) == m
        assert g.analyze(m).mu == pytest.approx(1 / 1.3)  # exact_mu borrowed from the Gaussian
    finally:
        kinds.unregister("contract_dummy")
    assert "contract_dummy" not in kinds.kind_names()


@pytest.mark.parametrize("missing", kinds.HOOKS)
def test_meta_kind_missing_a_hook_is_refused_and_reported(missing, monkeypatch):
    spec = dataclasses.replace(_complete_dummy_spec(), **{missing: kinds.MISSING})
    problems = kinds.check_kind(spec)
    assert any(repr(missing) in p for p in problems), problems
    with pytest.raises(kinds.KindContractError, match=missing):
        kinds.register(spec)
    # Forced into the registry past register(), the contract test reports it.
    monkeypatch.setitem(kinds._REGISTRY, "contract_dummy", spec)
    with pytest.raises(AssertionError):
        assert_kind_contract("contract_dummy")


@pytest.mark.parametrize("required", kinds.REQUIRED_HOOKS)
def test_meta_required_hook_cannot_be_declared_unsupported(required):
    spec = _complete_dummy_spec(**{required: kinds.Unsupported("not today")})
    assert any("cannot be unsupported" in p for p in kinds.check_kind(spec))
    with pytest.raises(kinds.KindContractError):
        kinds.register(spec)


def test_dp_event_no_kind_describes_is_refused():
    with pytest.raises(UnsupportedMechanismError):
        kinds.mechanism_from_dp_event(
            dp_accounting.dp_event.RepeatAndSelectDpEvent(kinds.to_dp_event(g.Gaussian(noise_multiplier=1.0)), 2.0, 1.0)
        )
    with pytest.raises(UnsupportedMechanismError, match="DiscreteLaplaceDpEvent"):  # dp_accounting: add/remove only
        kinds.mechanism_from_dp_event(dp_accounting.dp_event.DiscreteLaplaceDpEvent(1.0, 1), neighbouring="replace_one")
    with pytest.raises(UnsupportedMechanismError):  # no kind subsamples a zCDP statement (nor does dp_accounting)
        kinds.mechanism_from_dp_event(
            dp_accounting.PoissonSampledDpEvent(0.1, dp_accounting.ZCDpEvent(1.0)), neighbouring="replace_one"
        )


def test_meta_unsupported_optional_hook_raises_the_named_error_not_a_number():
    kinds.register(_complete_dummy_spec(clt_mu_squared=kinds.Unsupported("no CLT for this kind")))
    try:
        m = _Dummy(noise_multiplier=1.0)
        assert not kinds.supports(m, "claims.clt") and not kinds.supports("contract_dummy", "clt_mu_squared")
        with pytest.raises(UnsupportedMechanismError, match="no CLT for this kind"):
            kinds.clt_mu(g.Composed(mechanisms=(g.Gaussian(noise_multiplier=1.0), m)))
        check = g.check_claim(m, epsilon=5.0, delta=1e-5, accountant="GDP")
        assert check.reproduction.epsilon is None and check.status == "accountant not reproducible"
    finally:
        kinds.unregister("contract_dummy")
