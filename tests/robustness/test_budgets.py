"""The engine's budgets and ranges under extreme parameters, each case found by an adversarial probe.

1 memory: ``subsampled_gaussian`` at sigma 1e-6, ``discrete_gaussian`` at sigma 1e-6, ``discrete_laplace`` and
``subsampled_discrete_laplace`` at a = 1e6 reached 5 GB (the RDP fallback's quadrature grid, dp_accounting's dense
single steps) and ended in a MemoryError; 2 time: a discrete Laplace of sensitivity 1e18, 5,000 composed Laplace
events and long Opacus histories ran for minutes inside dp_accounting; 3 tracebacks: tiny noise, huge epsilons,
counts of 1e18, big ints, huge mixtures and 3,000-level nesting.

Every number asserted is checked against an independent truth: the mechanism's own privacy loss (a lower bound on
the true epsilon that every valid upper bound must exceed, derived in each test), dp_accounting's RDP of the
subsampled Gaussian, or the size of dp_accounting's construction itself.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
import time

import dp_accounting
import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant as rdp

import gdpcore
from flows.cli import main
from gdpcore import closed_form, events, kinds, mechanisms
from gdpcore.accounting import build_pld, loss_pmfs
from gdpcore.engine import BudgetExceededError
from gdpcore.kinds import formulas
from tests.robustness.conftest import REPO, base_env

MEMORY_CAP_GIB = 4  # the promised budget, as the child's whole address space
DELTA = 1e-5

# -- 1: memory --------------------------------------------------------------------------------------------------------
CHILD = textwrap.dedent(
    """
    import json, resource, sys, time
    cap = int(sys.argv[1]) * 2**30
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    from flows.cli import main
    rc = main([*sys.argv[2:], "--json"])
    hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]
    print(json.dumps({"rc": rc, "maxrss_mib": int(hwm) / 1024, "cpu": time.process_time()}), file=sys.stderr)
    """
)


def _sampled_at_least_once(q: float, steps: int) -> float:
    """P(a record is sampled in at least one of ``steps`` Poisson samples of rate ``q``)."""
    return -math.expm1(steps * math.log1p(-q))


# (CLI arguments, a lower bound on the true epsilon at DELTA that every upper bound must reach). If the privacy loss
# L is >= l with probability p >= 0.9, then delta(l - 1) >= E[(1 - e^{l - 1 - L})_+] >= p (1 - 1/e) > DELTA, so
# eps(DELTA) >= l - 1:
# - the discrete Gaussian with sigma s (sensitivity 1) has loss 1/(2 s^2) at output 0, whose mass is ~1;
# - the discrete Laplace of parameter a has loss a on every output <= 0, mass ~1 at a = 1e6 (there, directly:
#   delta(eps) >= (1 - e^{eps - a}) P(L = a), so eps(delta) >= a + log(1 - 2 delta));
# - a Poisson-subsampled step of rate q has loss >= log(q) + l0 when the record is sampled (l0 the unsampled
#   mechanism's loss, >= 1/(2 s^2) - 10/s for a Gaussian within 10 sigmas of its mean) and >= log(1 - q) - (a
#   vanishing term) otherwise; a record is sampled at least once in 1000 steps at q = 0.01 with probability 0.99996,
#   and the unsampled steps cost at most 1000 log(1 - q) = -10.05.
MEMORY_CASES = [
    (
        ["subsampled_gaussian", "--noise-multiplier", "1e-6", "--sampling-rate", "0.01", "--steps", "1000"],
        0.5 / 1e-12 - 10 / 1e-6 + math.log(0.01) - 10.1 - 1,
    ),
    (["discrete_gaussian", "--sigma", "1e-6"], 0.5 / 1e-12 - 1),
    (["discrete_laplace", "--noise-parameter", "1e6"], 1e6 + math.log1p(-2 * DELTA)),
    (
        ["subsampled_discrete_laplace", "--noise-parameter", "1e6", "--sampling-rate", "0.01", "--steps", "1000"],
        1e6 + math.log(0.01) - 10.1 - 1,
    ),
]


@pytest.mark.subprocess
@pytest.mark.parametrize(("args", "eps_truth_low"), MEMORY_CASES, ids=[c[0][0] for c in MEMORY_CASES])
def test_tiny_noise_is_planned_within_the_memory_budget(tmp_path, args, eps_truth_low):
    assert _sampled_at_least_once(0.01, 1000) > 1 - 1e-4
    env = base_env(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(MEMORY_CAP_GIB), "analyze", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    usage = json.loads(proc.stderr.strip().splitlines()[-1])
    assert usage["rc"] == 0, proc.stderr[-2000:]
    # Was 5.2-5.4 GB; the planner refuses before allocating and the RDP fallback grids the two modes only.
    assert usage["maxrss_mib"] < 1024, usage
    assert usage["cpu"] < 60, usage
    report = json.loads(proc.stdout)
    assert report["status"].startswith("over_budget"), report["status"]
    eps = {row["delta"]: row for row in report["epsilon"]}[DELTA]
    assert eps["bound"] == "upper"
    assert math.isfinite(eps["value"]) and eps["value"] >= eps_truth_low, (eps, eps_truth_low)


def test_rdp_of_a_tiny_noise_is_dp_accountings_within_bounded_memory():
    """The two-window quadrature agrees with dp_accounting's own RDP of the Poisson-subsampled Gaussian (its series
    for the orders) where one grid would need 1.3e8 points, and never falls below it by more than rounding."""
    import tracemalloc

    orders = np.asarray(rdp.DEFAULT_RDP_ORDERS, dtype=float)
    for sigma in (1e-6, 1e-3, 0.01):
        tracemalloc.start()
        ours = formulas.rdp_subsampled_gaussian(0.01, sigma, orders)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        theirs = rdp._compute_rdp_poisson_subsampled_gaussian(0.01, sigma, orders)
        assert np.all(ours >= theirs * (1 - 1e-12)), sigma
        assert np.max(np.abs(ours - theirs) / theirs) < 1e-9, sigma
        assert peak < 64 * 2**20, (sigma, peak)


@pytest.mark.parametrize(
    "mechanism",
    [
        mechanisms.Laplace(scale=1e-2),
        mechanisms.RandomizedResponse(epsilon=30.0),
        mechanisms.ZCDP(rho=5.0),
        mechanisms.DiscreteGaussian(sigma=0.05),
        mechanisms.DiscreteLaplace(noise_parameter=0.5, sensitivity=3),
        mechanisms.Gaussian(noise_multiplier=0.3),
        mechanisms.MixtureOfGaussians(standard_deviation=1.0, sensitivities="0,1", probabilities="0.5,0.5"),
    ],
    ids=lambda m: m.kind,
)
def test_the_planner_sizes_a_single_step_before_dp_accounting_builds_it(mechanism):
    """``kinds.pld_points`` errs large, but not by orders of magnitude, against the PMF dp_accounting builds."""
    step = 1e-3
    predicted = kinds.pld_points(mechanism, step=step)
    remove, add = loss_pmfs(build_pld(mechanism, discretization=step), pessimistic=True)
    built = remove.probs.size + (0 if add is None else add.probs.size)
    assert built <= 2 * predicted, (built, predicted)  # both directions within twice the prediction
    assert predicted <= 60 * built + 1e5, (built, predicted)


# -- 2: time ----------------------------------------------------------------------------------------------------------
def test_a_discrete_laplace_of_sensitivity_1e18_is_refused_before_dp_accounting_builds_it():
    """Ran 300 s inside dp_accounting's construction (it enumerates every output between the two noise centres)."""
    event = dp_accounting.dp_event.DiscreteLaplaceDpEvent(1e-9, 10**18)
    m = kinds.mechanism_from_dp_event(event)
    t0 = time.process_time()
    report = gdpcore.analyze(m)
    assert time.process_time() - t0 < 20
    assert report.status.startswith("over_budget")
    # Pure (a * sensitivity)-DP with the two noise laws 1e9 scales apart: the loss is +-1e9 on all but a 1e-9
    # sliver of the outputs, so eps(delta) >= 1e9 + log(1 - 2 delta) - 1 (one scale of slack).
    assert 1e9 - 2 <= report.epsilon(DELTA) < math.inf


def _composed_laplace_lower_bound(eps0: np.ndarray, delta: float) -> float:
    """A lower bound on eps(delta) of the composition of Laplace mechanisms with pure epsilons ``eps0``.

    The privacy loss L is a sum of independent terms in [-eps_i, eps_i] with mean sum(eps_i + e^-eps_i - 1) (the KL
    divergence of two Laplace laws eps_i apart). Hoeffding: P(L < mean - t) <= exp(-t^2 / (2 sum eps_i^2)) = 1/2 at
    t = sqrt(2 ln 2 sum eps_i^2). delta(eps) >= E[(1 - e^{eps - L})_+] >= P(L >= eps + 1)(1 - 1/e) >= 0.31 > delta
    at eps = mean - t - 1, so eps(delta) >= mean - t - 1."""
    mean = float(np.sum(eps0 + np.expm1(-eps0)))
    t = math.sqrt(2 * math.log(2) * float(np.sum(eps0**2)))
    assert 0.31 > delta
    return mean - t - 1.0


@pytest.mark.parametrize("via", ["api", "cli"])
def test_5000_composed_laplace_events_answer_within_the_time_budget(tmp_path, capsys, via):
    """Ran 150 s: the single steps' construction time is predicted before any is built."""
    scales = 1.0 + 1e-3 * np.arange(5000)
    event = dp_accounting.ComposedDpEvent([dp_accounting.LaplaceDpEvent(float(b)) for b in scales])
    truth_low = _composed_laplace_lower_bound(1.0 / scales, DELTA)
    t0 = time.process_time()
    if via == "api":
        report = gdpcore.analyze(kinds.mechanism_from_dp_event(event))
        eps = report.epsilon(DELTA)
    else:
        path = tmp_path / "laplace5000.json"
        path.write_text(json.dumps(events.dp_event_to_dict(event)))
        assert main(["analyze", "--dp-event", str(path), "--json"]) == 0
        rows = json.loads(capsys.readouterr().out)["epsilon"]
        eps = {r["delta"]: r for r in rows}[DELTA]["value"]
    assert time.process_time() - t0 < 45
    assert truth_low <= eps < math.inf, (truth_low, eps)


def _opacus_zip(tmp_path, phases: int):
    import io
    import pickle
    import zipfile

    history = [(1.0 + 1e-4 * i, 0.01, 10) for i in range(phases)]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("archive/data.pkl", pickle.dumps({"history": history, "mechanism": "rdp"}, protocol=2))
        zf.writestr("archive/version", b"3\n")
    path = tmp_path / f"opacus_{phases}.pt"
    path.write_bytes(buf.getvalue())
    return path


@pytest.mark.parametrize("phases", [1000, 10000])
def test_a_long_opacus_history_ends_within_the_time_budget(tmp_path, phases):
    """A 1,000-phase history answered after 156 s, a 10,000-phase one used 7.7 GB over 257 s: the engine now gives a
    row (or a one-line refusal) within the (here 8 s) budget plus one bounded piece of work; memory stays small."""
    import resource

    from tasks.training_runs import load_opacus_file

    run = load_opacus_file(_opacus_zip(tmp_path, phases))
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    try:
        report = gdpcore.analyze(run.mechanism, time_budget_seconds=8.0)
    except BudgetExceededError as exc:
        assert "budget_exceeded" in str(exc) and "\n" not in str(exc)
    else:
        assert report.status.startswith("over_budget") and report.bound_types["epsilon"] == "upper"
        # Every phase is a Poisson-subsampled Gaussian with q = 0.01 and sigma <= sigma_max, so the history is at
        # least as risky as all its steps at sigma_max (more noise is post-processing): dp_accounting's optimistic
        # PLD of that (privacy buckets rounded down, a lower estimate) bounds the truth, hence the fallback, below.
        from dp_accounting.pld import privacy_loss_distribution as pld_lib

        sigma_max = 1.0 + 1e-4 * (phases - 1)
        single = pld_lib.from_gaussian_mechanism(
            sigma_max, sampling_prob=0.01, pessimistic_estimate=False, value_discretization_interval=1e-3
        )
        low = single.self_compose(10 * phases).get_epsilon_for_delta(DELTA)
        assert low <= report.epsilon(DELTA) < math.inf, (low, report.epsilon(DELTA))
    wall = time.perf_counter() - t0
    assert wall < 8 + 20, wall  # generous for a loaded machine: the overrun is one single step or one RDP leaf
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0 < 1024 * 1024  # KiB: < 1 GiB grown


def test_the_fallback_coarsens_a_long_schedule_to_a_valid_upper_bound():
    """Past 64 distinct steps the fallback rounds sigma down and q up (a 10,000-phase history then answers in
    seconds): its RDP curve stays above the schedule's exact RDP (its epsilon within 5%): dp_accounting's at the integer orders
    (its binomial sum is exact there; at fractional orders it is an upper bound), the kinds' own quadrature at every
    order (exact to 1e-10 against an mpmath integral at orders 1.1-3.5, sigma 1, q 0.01)."""
    from gdpcore.engine.rdp import kind_rdp_curve

    phases = [(1.0 + 3e-3 * i, 0.01 * (1 + 1e-3 * i), 7 + i % 5) for i in range(100)]
    m = mechanisms.Composed(
        mechanisms=tuple(
            mechanisms.SubsampledGaussian(noise_multiplier=s, sampling_rate=q, steps=t) for s, q, t in phases
        )
    )
    orders, coarse = kind_rdp_curve(m, coarsen=True)
    _, exact = kind_rdp_curve(m)
    assert np.all(coarse >= exact)
    eps_coarse, eps_exact = (float(rdp.compute_epsilon(orders, c, DELTA)[0]) for c in (coarse, exact))
    assert eps_exact <= eps_coarse <= 1.05 * eps_exact  # measured 1.6% looser
    whole = orders == np.round(orders)
    dpa = sum(t * rdp._compute_rdp_poisson_subsampled_gaussian(q, s, orders[whole]) for s, q, t in phases)
    assert np.all(coarse[whole] >= dpa * (1 - 1e-9))


def test_the_rdp_fallback_reads_the_deadline():
    """A fallback that cannot start within the budget refuses with no number (a ValueError: one line, exit 2 from
    the CLI) instead of running past it."""
    parts = tuple(
        mechanisms.SubsampledGaussian(noise_multiplier=1 + 1e-2 * i, sampling_rate=0.01, steps=10) for i in range(100)
    )
    t0 = time.perf_counter()
    with pytest.raises(BudgetExceededError, match="budget_exceeded"):
        gdpcore.analyze(mechanisms.Composed(mechanisms=parts), time_budget_seconds=1e-3)
    assert time.perf_counter() - t0 < 10


# -- 3: one line, never a traceback -------------------------------------------------------------------------------------
def _eps_row(out: str) -> dict:
    return {r["delta"]: r for r in json.loads(out)["epsilon"]}[DELTA]


@pytest.mark.parametrize(
    ("args", "field", "value"),
    [
        (["gaussian", "--noise-multiplier", "1e-200"], "noise_multiplier", "1e-200"),
        (
            ["subsampled_gaussian", "--noise-multiplier", "1e300", "--sampling-rate", "0.5", "--steps", "10"],
            "noise_multiplier",
            "1e+300",
        ),
        (["laplace", "--scale", "1e-300"], "scale", "1e-300"),
        (["zcdp", "--rho", "1e300"], "rho", "1e+300"),
    ],
)
def test_values_beyond_double_precision_are_refused_with_the_supported_range(capsys, args, field, value):
    assert main(["analyze", *args]) == 2
    _, err = capsys.readouterr()
    assert err.count("\n") == 1 and "Traceback" not in err
    assert field in err and value in err and "[1e-100, 1e+100]" in err, err


# (CLI arguments, a lower bound on the true epsilon at DELTA):
# Laplace: eps(delta) = eps0 + 2 log(1 - delta) (its profile 1 - e^{(eps - eps0)/2}); randomized response:
# eps(delta) = log(e^eps0 - delta (1 + e^eps0)) >= eps0 + log(1 - 2 delta); a rho-zCDP statement is satisfied by the
# sqrt(2 rho)-GDP Gaussian, whose closed-form epsilon bounds the statement's from below; a subsampled Laplace step
# adds loss >= eps0 - 20 + log(q) on a sampled record (x within 1e-5 of the centre: all but e^-10 of the mass), the
# unsampled steps >= -10.05 in all (the margin argument of MEMORY_CASES).
NUMERIC_CASES = [
    (["laplace", "--scale", "1e-6"], 1e6 + 2 * math.log1p(-DELTA)),
    (["randomized_response", "--epsilon", "1e6"], 1e6 + math.log1p(-2 * DELTA)),
    (["randomized_response", "--epsilon", "800"], 800 + math.log1p(-2 * DELTA)),
    (["zcdp", "--rho", "1e6"], closed_form.get_epsilon_from_gdp(mu=math.sqrt(2e6), delta=DELTA)),
    (
        ["subsampled_laplace", "--scale", "1e-6", "--sampling-rate", "0.01", "--steps", "1000"],
        1e6 - 20 + math.log(0.01) - 10.1 - 1,
    ),
    (
        [
            "sampled_without_replacement_gaussian",
            "--noise-multiplier",
            "1e-6",
            "--dataset-size",
            "1000",
            "--batch-size",
            "10",
            "--steps",
            "100",
        ],
        0.0,
    ),
    (
        [
            "truncated_subsampled_gaussian",
            "--noise-multiplier",
            "1e-6",
            "--sampling-rate",
            "0.01",
            "--dataset-size",
            "1000",
            "--truncated-batch-size",
            "20",
            "--steps",
            "100",
        ],
        0.0,
    ),
    (["discrete_gaussian", "--sigma", "1e100"], 0.0),
    # k-ary RR with p = 1e-300: the true category's probability ratio to another's is 1 + k (1 - p) / p, pure
    # eps0 = log(1 + k (1 - p)/p) attained on an output of mass ~1, so eps(delta) >= eps0 - 1 (margin argument).
    # (Reading this curve, gdpcore.curve's e^eps passes the float range above eps = 709 and warns; the CLI shows the
    # number, the overflow to +inf only steepens the pessimistic hull.)
    pytest.param(
        ["kary_randomized_response", "--noise-parameter", "1e-300", "--num-buckets", "1000000000000000000"],
        math.log(1e18) - math.log(1e-300) - 1,
        marks=pytest.mark.filterwarnings("ignore:overflow encountered in divide:RuntimeWarning"),
    ),
    (["kary_randomized_response", "--noise-parameter", "1e-300", "--num-buckets", "4"], math.log(4e300) - 1),
]


@pytest.mark.parametrize(("args", "eps_truth_low"), NUMERIC_CASES)
def test_extreme_values_give_a_labelled_upper_bound(capsys, args, eps_truth_low):
    t0 = time.process_time()
    assert main(["analyze", *args, "--json"]) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    row = _eps_row(out)
    assert row["bound"] == "upper"
    assert math.isfinite(row["value"]) and row["value"] >= eps_truth_low, (row, eps_truth_low)
    assert time.process_time() - t0 < 60


def test_dp_events_with_huge_counts_and_big_ints(tmp_path, capsys):
    # 1e18 runs of Laplace(1): the loss has mean k (1 + e^-1 - 1) = 0.3679 k (see _composed_laplace_lower_bound).
    k = 10**18
    path = tmp_path / "count.json"
    count = dp_accounting.SelfComposedDpEvent(dp_accounting.LaplaceDpEvent(1.0), k)
    path.write_text(json.dumps(events.dp_event_to_dict(count)))
    assert main(["analyze", "--dp-event", str(path), "--json"]) == 0
    truth_low = 0.3678 * k - math.sqrt(2 * math.log(2) * k) - 1
    assert truth_low <= _eps_row(capsys.readouterr().out)["value"] < math.inf
    for data, field in [
        ({"type": "GaussianDpEvent", "noise_multiplier": 10**400}, "noise_multiplier"),
        ({"type": "GaussianDpEvent", "noise_multiplier": 1e-300}, "noise_multiplier"),
        (
            {
                "type": "SelfComposedDpEvent",
                "event": {"type": "LaplaceDpEvent", "noise_multiplier": 1.0},
                "count": 10**400,
            },
            "count",
        ),
    ]:
        path.write_text(json.dumps(data))
        assert main(["analyze", "--dp-event", str(path)]) == 2
        _, err = capsys.readouterr()
        assert err.count("\n") == 1 and field in err and len(err) < 400, err


def test_a_huge_mixture_is_planned_not_allocated(tmp_path, capsys):
    """A mixture of 20,001 components: the vectorised inverse would hold components x losses floats (152 GiB at
    200,001). It is a Poisson-subsampled Gaussian (q = 1/2, sigma = 1) in disguise, whose epsilon dp_accounting's
    optimistic PLD (privacy buckets rounded down) bounds from below: the fallback's upper bound must reach it."""
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    n = 20000
    event = dp_accounting.dp_event.MixtureOfGaussiansDpEvent(1.0, [0.0] + [1.0] * n, [0.5] + [0.5 / n] * n)
    path = tmp_path / "mixture.json"
    path.write_text(json.dumps(events.dp_event_to_dict(event)))
    t0 = time.process_time()
    assert main(["analyze", "--dp-event", str(path), "--json"]) == 0
    assert time.process_time() - t0 < 60
    eps = _eps_row(capsys.readouterr().out)["value"]
    low = pld_lib.from_gaussian_mechanism(1.0, sampling_prob=0.5, pessimistic_estimate=False).get_epsilon_for_delta(
        DELTA
    )
    assert low <= eps < math.inf, (low, eps)


def test_3000_levels_of_nesting_are_refused_in_one_line(tmp_path, capsys):
    event = dp_accounting.GaussianDpEvent(1.0)
    for _ in range(3000):
        event = dp_accounting.SelfComposedDpEvent(event, 2)
    with pytest.raises(ValueError, match="nested more than 100 levels"):
        kinds.mechanism_from_dp_event(event)
    m = mechanisms.Gaussian(noise_multiplier=1.0)
    with pytest.raises(ValueError, match="nested more than 100 levels"):
        for _ in range(3000):
            m = mechanisms.SelfComposed(mechanism=m, count=2)
    spec: dict = {"kind": "gaussian", "noise_multiplier": 1.0}
    for _ in range(3000):
        spec = {"kind": "composed", "mechanisms": [spec]}
    with pytest.raises(ValueError, match="nested more than 100 levels"):
        mechanisms.mechanism_from_dict(spec)
    path = tmp_path / "nested.json"
    leaf = json.dumps({"type": "GaussianDpEvent", "noise_multiplier": 1.0})
    path.write_text('{"type": "SelfComposedDpEvent", "count": 2, "event": ' * 3000 + leaf + "}" * 3000)
    assert main(["analyze", "--dp-event", str(path)]) == 2
    _, err = capsys.readouterr()
    assert err.count("\n") == 1 and "nested" in err, err
    # 200 levels: read by the JSON parser, refused by the nesting limit.
    path.write_text('{"type": "SelfComposedDpEvent", "count": 2, "event": ' * 200 + leaf + "}" * 200)
    assert main(["analyze", "--dp-event", str(path)]) == 2
    _, err = capsys.readouterr()
    assert err.count("\n") == 1 and "nested more than 100 levels" in err, err
