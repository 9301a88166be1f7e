"""gdpcore.pld against dp_accounting (same construction), prv_accountant and the Gaussian closed form."""

import dataclasses

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from prv_accountant import PoissonSubsampledGaussianMechanism, PRVAccountant

import gdpcore as g
from gdpcore import engine
from gdpcore import pld as f
from gdpcore.curve import curve_from_loss_pmf
from tasks.grid_table import analyze_grid_table


def _dp_single(sigma, q, d, pessimistic=True):
    return pld_lib.from_gaussian_mechanism(
        sigma,
        sampling_prob=q,
        value_discretization_interval=d,
        pessimistic_estimate=pessimistic,
        use_connect_dots=pessimistic,
    )


@pytest.mark.parametrize(
    ("sigma", "q", "d"),
    [(1.0, 0.01, 1e-3), (0.6, 0.1, 1e-3), (2.0, 0.001, 1e-4), (0.8, 1.0, 1e-3), (5.0, 0.3, 2e-3)],
)
def test_single_step_matches_dp_accounting_connect_the_dots(sigma, q, d):
    ref = _dp_single(sigma, q, d)
    directions = ("remove", "add") if q < 1 else ("remove",)
    for direction in directions:
        mine = f.single_step_pld(noise_multiplier=sigma, sampling_rate=q, discretization=d, direction=direction)
        theirs = (ref._pmf_remove if direction == "remove" else ref._pmf_add).to_dense_pmf()
        assert mine.lower_index == theirs._lower_loss
        assert mine.probs.size == theirs._probs.size
        # dp_accounting forms delta as a difference of nearly equal CDF terms; ours is closed-form: round-off only.
        np.testing.assert_allclose(mine.probs, theirs._probs, rtol=0, atol=1e-11)
        assert mine.infinity_mass == pytest.approx(theirs._infinity_mass, rel=1e-6, abs=1e-30)
        assert mine.probs.sum() + mine.infinity_mass == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize(("sigma", "q", "T"), [(1.0, 0.01, 1000), (2.0, 0.001, 10_000), (0.8, 0.04, 300)])
def test_composed_epsilon_matches_dp_accounting(sigma, q, T):
    d = 1e-4
    remove, add = f.subsampled_gaussian_loss_pmf(noise_multiplier=sigma, sampling_rate=q, steps=T, discretization=d)
    pess = _dp_single(sigma, q, d).self_compose(T)
    opt = _dp_single(sigma, q, d, pessimistic=False).self_compose(T)
    # The construction itself (before the round-off allowance) is dp_accounting's ...
    raw = curve_from_loss_pmf(dataclasses.replace(remove, roundoff=0.0), dataclasses.replace(add, roundoff=0.0))
    assert raw.add_direction_gap == 0.0  # the remove direction dominates for eps >= 0
    curve = curve_from_loss_pmf(remove, add)
    for delta in (1e-3, 1e-5, 1e-8):
        assert float(raw.epsilon_at(delta)) == pytest.approx(pess.get_epsilon_for_delta(delta), rel=1e-6)
        # ... and the allowance only moves it up (pessimistic), by far less than the discretisation error.
        mine = float(curve.epsilon_at(delta))
        assert float(raw.epsilon_at(delta)) <= mine <= float(raw.epsilon_at(delta)) * (1 + 1e-4)
        assert mine >= opt.get_epsilon_for_delta(delta)
    # The wrapped dp_accounting object answers the same queries.
    wrapped = f.to_dp_accounting_pld(remove, add)
    assert wrapped.get_epsilon_for_delta(1e-5) == pytest.approx(pess.get_epsilon_for_delta(1e-5), rel=1e-6)


def test_composed_epsilon_inside_prv_accountant_bracket():
    sigma, q, T = 0.8, 0.01, 1000
    remove, _ = f.subsampled_gaussian_loss_pmf(
        noise_multiplier=sigma, sampling_rate=q, steps=T, discretization=1e-4, include_add=False
    )
    mine = float(curve_from_loss_pmf(remove).epsilon_at(1e-5))
    acc = PRVAccountant(
        prvs=[PoissonSubsampledGaussianMechanism(sampling_probability=q, noise_multiplier=sigma)],
        eps_error=0.01,
        delta_error=1e-9,
        max_self_compositions=[T],
    )
    lo, est, up = acc.compute_epsilon(delta=1e-5, num_self_compositions=[T])
    assert lo <= mine <= up
    assert mine == pytest.approx(est, rel=1e-3)


def test_sampling_rate_one_is_a_gaussian_and_never_optimistic():
    # q = 1: T steps of N(0, sigma^2) are exactly (sqrt(T)/sigma)-GDP (closed form).
    sigma, T = 4.0, 16
    mu = T**0.5 / sigma
    remove, add = f.subsampled_gaussian_loss_pmf(
        noise_multiplier=sigma, sampling_rate=1.0, steps=T, discretization=1e-3
    )
    assert add is None
    curve = curve_from_loss_pmf(remove)
    for delta in (1e-2, 1e-5, 1e-9):
        exact = g.get_epsilon_from_gdp(mu=mu, delta=delta)
        assert exact <= float(curve.epsilon_at(delta)) <= exact * (1 + 1e-3)
    alphas = np.array([1e-8, 1e-5, 1e-3, 0.01, 0.1, 0.3, 0.5, 0.9])
    beta = curve.fnr(alphas)
    assert np.all(beta <= g.get_beta_from_gdp(mu=mu, alpha=alphas) + 1e-12)
    assert np.all(beta >= g.get_beta_from_gdp(mu=mu, alpha=alphas) - 2e-3)


def test_length_plan_matches_what_is_built():
    from dp_accounting.pld import common

    for sigma, q, T, d in [(1.0, 0.01, 1000, 1e-4), (0.6, 0.1, 3000, 1e-3), (2.0, 0.001, 10_000, 1e-4)]:
        n1 = f.single_step_length(noise_multiplier=sigma, sampling_rate=q, discretization=d)
        single = f.single_step_pld(noise_multiplier=sigma, sampling_rate=q, discretization=d)
        assert n1 == single.probs.size
        # Our Chernoff window is never wider than dp_accounting's (more orders), and is what compose uses.
        lo, hi = common.compute_self_convolve_bounds(single.probs, T, f.TAIL_MASS_TRUNCATION)
        n = f.fft_length(single, T)
        assert n <= 1.1 * max(hi - lo + 1, n1)
        assert f.compose_loss_pmf(single, T).probs.size <= n


def _delta(probs, losses, inf_mass, eps):
    """delta(eps) = sum_i p_i (1 - e^{eps - l_i})_+ + mass at +inf, summed exactly as written (the test's own)."""
    return np.array([np.sum(probs * np.maximum(0.0, -np.expm1(e - losses))) + inf_mass for e in eps])


def _dp_delta(pld_pmf, eps):
    dense = pld_pmf.to_dense_pmf()
    losses = (dense._lower_loss + np.arange(dense._probs.size)) * dense._discretization
    return _delta(dense._probs, losses, dense._infinity_mass, eps)


@pytest.mark.parametrize(
    ("sigma", "q", "T", "d"), [(0.5, 1e-4, 10, 2e-4), (1.0, 1e-4, 1000, 1e-4), (0.8, 0.01, 100, 5e-4)]
)
def test_single_steps_built_for_a_horizon_stay_on_their_side_within_the_tail_budget(sigma, q, T, d):
    """A single step built for ``horizon`` T ends where its upper tail holds SINGLE_STEP_TAIL / 10^ceil(log10 T);
    against dp_accounting's construction on the full noise truncation at the same step, composed T times: the
    pessimistic PMF is never below it and at most T eta above it, the optimistic one never above it and at most
    T eta below it (plus round-off of the compositions)."""
    eta = f.SINGLE_STEP_TAIL / f.horizon_bucket(T)
    assert eta <= f.SINGLE_STEP_TAIL / T
    for pessimistic in (True, False):
        kw = {"noise_multiplier": sigma, "sampling_rate": q, "discretization": d, "horizon": T}
        if pessimistic:
            short = f.single_step_pld(**kw)
            assert short.probs.size == f.single_step_length(**kw)
            assert 0.0 < short.infinity_mass <= eta
        else:
            short = f.optimistic_single_step_pld(**kw)
            assert short.probs.size == f.optimistic_single_step_length(**kw)
        full = _dp_single(sigma, q, d, pessimistic=pessimistic)
        theirs = full._pmf_remove.to_dense_pmf()
        assert short.lower_index == theirs._lower_loss
        assert short.probs.size <= theirs._probs.size
        # One step, on every grid point up to the full grid's top: tail values are relative-accurate sums of tiny
        # atoms, so the sides are held to 1e-9 relative (plus 1e-18 absolute), far inside eta.
        top = (short.lower_index + short.probs.size - 1) * d
        eps = (theirs._lower_loss + np.arange(0, theirs._probs.size, 7)) * d
        eps = np.concatenate([eps, [top - d, top, top + d]])
        mine1 = _delta(short.probs, (short.lower_index + np.arange(short.probs.size)) * d, short.infinity_mass, eps)
        ref1 = _dp_delta(full._pmf_remove, eps)
        slack1 = 1e-18 + 1e-9 * ref1
        if pessimistic:
            assert np.all(mine1 >= ref1 - slack1)
            assert np.all(mine1 <= ref1 + eta + slack1)
            # Beyond the shorter grid's top the divergence is its mass at +infinity: still above the full one's.
            assert np.all(mine1[eps >= top] == short.infinity_mass)
        else:
            assert np.all(mine1 <= ref1 + slack1)
            assert np.all(mine1 >= ref1 - eta - slack1)
        # T steps: the compositions' round-off (this PMF's rigorous bound per atom over its atoms; dp_accounting's own
        # float64 FFT and its 1e-15 tail truncation) is the slack, far above T eta.
        mine = f.compose_loss_pmf(short, T)
        eps_t = np.array([0.0, 0.01, 0.05, 0.2, 0.5, 1.0, 2.0, 3.0])
        got = _delta(mine.probs, (mine.lower_index + np.arange(mine.probs.size)) * d, mine.infinity_mass, eps_t)
        ref = _dp_delta(full.self_compose(T)._pmf_remove, eps_t)
        slack = 1e-12 + 1e-9 * ref
        if pessimistic:
            assert np.all(got >= ref - slack)
            assert np.all(got <= ref + T * eta + slack)
        else:
            assert np.all(got <= ref + slack)
            assert np.all(got >= ref - T * eta - slack)
    if q <= 1e-3:
        # Where the noise truncation ran far past the mass (small q), the horizon's grid is much shorter.
        assert short.probs.size < 0.8 * theirs._probs.size


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"noise_multiplier": 0.0}, "noise_multiplier"),
        ({"sampling_rate": 1.5}, "sampling_rate"),
        ({"steps": 0}, "steps"),
        ({"steps": 2.5}, "steps"),
        ({"discretization": -1e-4}, "discretization"),
        ({"discretization": 0.5}, "discretization"),
        ({"pessimistic": False}, "pessimistic"),
    ],
)
def test_bad_input_raises_value_error_naming_field(kwargs, needle):
    args = {"noise_multiplier": 1.0, "sampling_rate": 0.01, "steps": 10, "discretization": 1e-3, **kwargs}
    with pytest.raises(ValueError, match=needle):
        f.subsampled_gaussian_loss_pmf(**args)


@pytest.mark.parametrize("horizon", [0, -3, 2.5, True, "10"])
def test_a_bad_horizon_raises_value_error_naming_it(horizon):
    for build in (f.single_step_pld, f.optimistic_single_step_pld, f.single_step_length):
        with pytest.raises(ValueError, match="horizon"):
            build(noise_multiplier=1.0, sampling_rate=0.01, discretization=1e-3, horizon=horizon)


# --- optimistic twin (privacy buckets rounded down): lower ends of brackets only -----------------------------------


@pytest.mark.parametrize(
    ("sigma", "q", "d"), [(1.0, 0.01, 1e-3), (0.6, 0.1, 1e-3), (2.0, 0.001, 1e-4), (5.0, 0.3, 2e-3)]
)
def test_optimistic_single_step_matches_dp_accounting_privacy_buckets(sigma, q, d):
    theirs = _dp_single(sigma, q, d, pessimistic=False)._pmf_remove.to_dense_pmf()
    mine = f.optimistic_single_step_pld(noise_multiplier=sigma, sampling_rate=q, discretization=d)
    assert mine.lower_index == theirs._lower_loss
    assert mine.probs.size == theirs._probs.size
    assert mine.probs.size == f.optimistic_single_step_length(noise_multiplier=sigma, sampling_rate=q, discretization=d)
    # dp_accounting: differences of CDF values; ours: CDF or survival differences (closed form). Round-off only.
    np.testing.assert_allclose(mine.probs, theirs._probs, rtol=0, atol=1e-11)
    assert mine.infinity_mass == 0.0 == theirs._infinity_mass


@pytest.mark.parametrize(
    ("sigma", "q", "T", "d"), [(1.0, 0.01, 1000, 1e-4), (0.8, 0.04, 300, 1e-3), (2.0, 0.001, 3000, 1e-4)]
)
def test_optimistic_composition_matches_dp_accounting(sigma, q, T, d):
    theirs = _dp_single(sigma, q, d, pessimistic=False).self_compose(T)._pmf_remove
    single = f.optimistic_single_step_pld(noise_multiplier=sigma, sampling_rate=q, discretization=d)
    mine = f.optimistic_loss_pmf(single, T)
    assert mine.pessimistic is False and mine.infinity_mass == 0.0
    # The construction itself (before the round-off allowance) is dp_accounting's.
    raw = curve_from_loss_pmf(dataclasses.replace(mine, roundoff=0.0), None)
    for delta in (1e-3, 1e-5, 1e-8):
        assert float(raw.epsilon_at(delta)) == pytest.approx(theirs.get_epsilon_for_delta(delta), rel=1e-6)
    # delta(0) (= the advantage): dp_accounting also adds its 1e-15 truncation budget at +inf.
    assert float(raw.delta_at(0.0)) == pytest.approx(theirs.get_delta_for_epsilon(0.0), rel=1e-7, abs=1e-14)
    # With the allowance every delta is lowered, by at most roundoff x (atoms above the threshold).
    curve = curve_from_loss_pmf(mine, None)
    assert 0 < mine.roundoff < 1e-18 * mine.probs.size
    for eps in (0.0, 0.01, 0.05):
        lowered = float(raw.delta_at(eps)) - float(curve.delta_at(eps))
        assert 0.0 <= lowered <= mine.roundoff * mine.probs.size
    # The optimistic curve is never more private-looking... i.e. never above the pessimistic epsilon.
    pess, _ = f.subsampled_gaussian_loss_pmf(
        noise_multiplier=sigma, sampling_rate=q, steps=T, discretization=d, include_add=False
    )
    pess_curve = curve_from_loss_pmf(pess)
    for delta in (1e-3, 1e-5, 1e-8):
        assert float(curve.epsilon_at(delta)) <= float(pess_curve.epsilon_at(delta))


def test_bucket_q_weights_bound_the_bucket_q_mass_by_direct_integration():
    # Independent truth: P_k and Q_k of buckets by numerical quadrature of the two densities over their x-intervals.
    from scipy import integrate, stats

    sigma, q, d = 1.0, 0.05, 1e-3
    single = f.optimistic_single_step_pld(noise_multiplier=sigma, sampling_rate=q, discretization=d)
    w = single.bucket_q_weights
    inv = lambda loss: sigma**2 * np.log((np.expm1(loss) + q) / q) + 0.5  # noqa: E731
    heaviest = single.lower_index + int(np.argmax(single.probs))
    for k in (heaviest, heaviest + 40, heaviest + 400):
        a, b = inv(k * d), inv((k + 1) * d)
        p_k = integrate.quad(lambda x: (1 - q) * stats.norm.pdf(x, 0, sigma) + q * stats.norm.pdf(x, 1, sigma), a, b)[0]
        q_k = integrate.quad(lambda x: stats.norm.pdf(x, 0, sigma), a, b)[0]
        i = k - single.lower_index
        assert single.probs[i] == pytest.approx(p_k, rel=1e-9)
        r = np.log(p_k / q_k) - k * d
        assert 0.0 < r < d  # the bucket's loss lies in [k d, (k + 1) d)
        # w_k e^{-k d} bounds Q_k from above, and tightly (the residual bound is the residual up to round-off).
        assert q_k <= w[i] * np.exp(-k * d) <= q_k * (1 + 1e-9)
    # The residual mean is about d / 2 (bucket losses sit near the middle).
    assert 0.4 * d < single.cached("bucket_residual_mean") <= 0.5 * d * 1.01


@pytest.mark.parametrize(("sigma", "q", "T"), [(2.0, 0.01, 3000), (1.5, 0.001, 3000)])
def test_grid_lower_bounds_below_every_upper_bound(sigma, q, T):
    # eps_lower (tests on the privacy-buckets composition) is a lower bound: never above prv_accountant's upper bound nor
    # dp_accounting's pessimistic value at 1e-5; and it is far tighter than dp_accounting's optimistic twin.
    t = analyze_grid_table(
        [g.SubsampledGaussian(noise_multiplier=sigma, sampling_rate=q, steps=T)], deltas=[1e-5], fprs=[0.1]
    )
    lo_mine = t.column("epsilon_lower")[0].as_py()[0]
    up_mine = t.column("epsilon")[0].as_py()[0]
    acc = PRVAccountant(
        prvs=[PoissonSubsampledGaussianMechanism(sampling_probability=q, noise_multiplier=sigma)],
        eps_error=0.01,
        delta_error=1e-9,
        max_self_compositions=[T],
    )
    _, _, prv_up = acc.compute_epsilon(delta=1e-5, num_self_compositions=[T])
    ref = _dp_single(sigma, q, 1e-5).self_compose(T).get_epsilon_for_delta(1e-5)
    assert lo_mine <= up_mine
    assert lo_mine <= prv_up
    assert lo_mine <= ref
    assert (up_mine - lo_mine) / up_mine <= engine.DEFAULT_GRID_TOLERANCE
    opt_1e4 = _dp_single(sigma, q, 1e-4, pessimistic=False).self_compose(T).get_epsilon_for_delta(1e-5)
    assert lo_mine >= opt_1e4


# -- the twin: tests on the privacy-buckets composition (gdpcore.pld.threshold_test_masses) -----------------------------

_SG = g.SubsampledGaussian


def _certified_upper(mech, step):
    """The connect-the-dots profile at ``step`` composed with a certified round-off bound: an upper bound on any machine.

    The single step is dp_accounting's pessimistic connect-the-dots construction, which gdpcore reproduces atom for atom
    (test_single_step_matches_dp_accounting_connect_the_dots). dp_accounting composes it by ``ifft(fft(p) ** T)``
    with no account of the round-off; that error is about T u relative to the transform's peak on *every* atom, of
    either sign, and coherent over the support, so at a fine step and a small delta (1e5 atoms of 1e-14 each above
    epsilon(1e-9)) it moves the result both ways: its epsilon(1e-9) at step 1.25e-5 for sigma 0.8, q 1e-3, T 3000
    reads 1.5319272 or 1.5319207 here depending only on the FFT length, and 1.5318734 on an AMD EPYC host, below the
    lower end 1.5318936 of the bracket at step 6.25e-5, i.e. below the truth. gdpcore composes the same single step
    with a rigorous componentwise bound on the FFT's round-off (gdpcore/pld/powers.py, ``_power_roundoff``; extended
    precision where it matters) moved to the safe side (``LossPMF.with_roundoff_allowance``): the result is an upper
    bound in IEEE-754 arithmetic, not only in exact arithmetic, whatever the FFT library or CPU.
    """
    return engine.Producer(deltas=[1e-5, 1e-9], alpha_min=1e-10, tolerance=1e-2).curve_at(mech, step)


@pytest.mark.parametrize(
    ("phases", "d"),
    [
        ([(0.8, 1e-3, 3000)], 1.25e-4),
        ([(1.0, 0.01, 1000)], 1e-3),
        ([(2.0, 0.004, 10_000)], 5e-4),
        ([(0.7, 0.05, 300)], 1e-3),
        ([(1.0, 0.01, 500), (0.8, 0.02, 300)], 1e-3),  # a schedule: the phases' bucket laws convolved
    ],
)
def test_twin_stays_below_a_certified_upper_bound_at_a_10x_finer_step(phases, d):
    """The twin (the optimistic privacy-bucket composition at step d) is never above the profile.

    The oracle must be an upper bound on every machine. It is the connect-the-dots PLD at step d / 10 (pessimistic
    by construction; dp_accounting's discretisation) composed with a certified round-off bound (see
    :func:`_certified_upper` for why dp_accounting's own uncertified FFT power is not an upper bound at delta 1e-9 on
    every CPU). The two sides share no construction: the twin rounds each step's losses *down* into privacy buckets
    and reads the composed bucket law's threshold tests (gdpcore/pld/buckets.py), the oracle rounds them *up* by
    connecting the dots, so a twin above it is a twin above the truth. Checked: delta(eps), epsilon(delta), the
    supporting lines 1 - delta(eps) - e^eps alpha (a lower bound on the FNR at alpha) and mu; and the twin is close
    to the bound where it matters most (the advantage, within 0.25%: docs/references.md A-1).
    """
    mechs = [_SG(noise_multiplier=s, sampling_rate=q, steps=T) for s, q, T in phases]
    mech = mechs[0] if len(mechs) == 1 else g.Composed(mechanisms=mechs)
    deltas, alpha_min = [1e-5, 1e-9], 1e-10
    producer = engine.Producer(deltas=deltas, alpha_min=alpha_min, tolerance=1e-2)
    twin = producer.curve_at(mech, d, side="optimistic")
    upper = _certified_upper(mech, d / 10)
    assert upper.advantage * (1 - 2.5e-3) <= twin.advantage <= upper.advantage
    eps = np.linspace(0.0, 3.0 * float(twin.eps[1]), 301)
    assert np.all(twin.delta_at(eps) <= upper.delta_at(eps))
    for delta in (0.98 * twin.advantage, 0.9 * twin.advantage, *deltas):
        assert float(twin.epsilon_at(delta)) <= float(upper.epsilon_at(delta))
    grid = np.linspace(0.0, float(upper.epsilon_at(1e-9)), 2001)
    d_up = np.asarray(upper.delta_at(grid))
    alphas = np.concatenate([np.geomspace(1e-8, 0.3, 60), np.linspace(0.3, 0.5, 201)])
    fnr_floor = np.max(1.0 - d_up[None, :] - np.exp(grid)[None, :] * alphas[:, None], axis=1)
    assert np.all(twin.fnr(alphas) >= fnr_floor - 1e-12)
    assert twin.mu(alpha_min=alpha_min)[0] <= upper.mu(alpha_min=alpha_min)[0]


def test_threshold_test_masses_reject_a_pessimistic_pmf():
    single = f.single_step_pld(noise_multiplier=1.0, sampling_rate=0.01, discretization=1e-3)
    pmf = f.compose_loss_pmf(single, 10)
    with pytest.raises(ValueError, match="pmf must be an optimistic composition"):
        f.threshold_test_masses(pmf, [(single, 10)])


def test_twin_keeps_its_tail_when_the_weights_total_underflows_the_unit_cutoffs():
    # sigma 0.6, q 0.04, T 1e4 at step 8e-3: the bucket Q-weights total 0.99624 per step, so W_T carries e^-37.7 of
    # mass. The round-off bound of its composition used to cut coefficients at e^-60 of a *unit* mass, 1.7e-22 per
    # atom, above the tail masses the reads use: the twin read epsilon(1e-5) 3.5% low (docs/references.md A-3).
    # Independent truth: the connect-the-dots PLD at step d / 10 with a certified round-off bound (an upper bound on
    # the profile on any machine, see _certified_upper; dp_accounting's own composition reads 129.7567 and 157.4547).
    sigma, q, T, d = 0.6, 0.04, 10_000, 8e-3
    producer = engine.Producer(deltas=[1e-5, 1e-9], alpha_min=1e-10, tolerance=1e-2)
    mech = _SG(noise_multiplier=sigma, sampling_rate=q, steps=T)
    twin = producer.curve_at(mech, d, side="optimistic")
    ref = _certified_upper(mech, d / 10)
    for delta in (1e-5, 1e-9):
        upper = float(ref.epsilon_at(delta))
        assert upper * (1 - 1e-3) <= float(twin.epsilon_at(delta)) <= upper
