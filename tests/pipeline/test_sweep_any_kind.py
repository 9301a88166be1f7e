"""`gdp sweep` over non-Gaussian kinds and compositions (docs/references.md section S), end to end: the repo's specs
``data/specs/laplace-composition.yaml``, ``randomized-response.yaml`` and ``dpsgd-plus-release.yaml`` (plus a flat
randomized-response spec) are swept by the CLI into one lake and report, and the report, read with DuckDB, is
checked against independent truth:

* k-fold binary randomized response: its exact privacy profile, the binomial sum of Kairouz, Oh & Viswanath, "The
  Composition Theorem for Differential Privacy" (ICML 2015), Theorem 3.3, evaluated here with mpmath;
* one Laplace mechanism: delta(eps) = 1 - exp((eps - eps0)/2), derived below from its piecewise-linear privacy loss;
* k-fold Laplace: dp_accounting's PLD at a 10x finer step than the report's (the bracket contains it), the pure
  composition bound eps <= k eps0 (Dwork & Roth 2014, Thm 3.16) and Kairouz et al.'s Thm 3.3 (k-fold RR is the worst
  composition of eps0-DP mechanisms, so Laplace's lower end cannot exceed RR's exact epsilon);
* randomized response's mu: f_{eps,0} is exactly GDP-dominated at mu = -2 Phi^{-1}(1/(1+e^eps)) (Dong, Roth & Su
  2022, JRSS-B, Prop. 2.11 / the pure-DP to GDP conversion);
* a DP-SGD phase composed with a Gaussian release: dp_accounting's composed PLD at a 10x finer step.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import duckdb
import mpmath
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from scipy.stats import norm

import gdpcore
from flows.cli import main
from tasks.lake import members_path

ROOT = Path(__file__).resolve().parents[2]
SPECS = ("laplace-composition", "randomized-response", "dpsgd-plus-release")
FLAT_RR = """\
name: rr-flat
mechanism: randomized_response
grid:
  epsilon: [0.5, 2.0]
deltas: [1.0e-5, 1.0e-6]
fprs: [1.0e-3, 0.1]
"""
REL = 1e-9  # float slack on "lower <= truth <= upper"

pytestmark = pytest.mark.usefixtures("prefect_server")


@pytest.fixture(scope="module")
def swept(prefect_server, tmp_path_factory):
    """The three repo specs and a flat RR spec, swept by `gdp sweep` (in process, thread runner) into one report."""
    import prefect.settings

    root = tmp_path_factory.mktemp("anykind")
    lake, report = root / "lake", root / "reports" / "privacy.duckdb"
    flat = root / "rr-flat.yaml"
    flat.write_text(FLAT_RR, encoding="utf-8")
    paths = [ROOT / "data" / "specs" / f"{name}.yaml" for name in SPECS] + [flat]
    with pytest.MonkeyPatch.context() as mp:
        # The CLI's quiet defaults go into os.environ: keep them (and the test server's URL) to this fixture.
        mp.setenv("PREFECT_API_URL", str(prefect.settings.PREFECT_API_URL.value()))
        for var in ("PREFECT_LOGGING_LEVEL", "TF_CPP_MIN_LOG_LEVEL"):
            mp.setenv(var, "ERROR" if var.startswith("PREFECT") else "2")
        mp.setenv("PREFECT_LOGGING_LOGGERS_PREFECT_FLOW_RUNS_LEVEL", "CRITICAL")
        mp.setenv("PREFECT_LOGGING_LOGGERS_PREFECT_TASK_RUNS_LEVEL", "CRITICAL")
        for path in paths:
            rc = main(["sweep", str(path), "--lake", str(lake), "--report", str(report), "--runner", "thread"])
            assert rc == 0, path
    return lake, report


def _query(report: Path, sql: str, *params) -> list[dict]:
    """Any DuckDB client: open the report read-only and resolve its views against the report's folder."""
    con = duckdb.connect(str(report), read_only=True)
    try:
        con.execute(f"SET file_search_path = '{report.parent}'")
        cur = con.execute(sql, list(params))
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    finally:
        con.close()


def _cells(report: Path, spec: str) -> list[dict]:
    """Each cell of ``spec`` with its swept values (from the axes view) and its epsilons by delta."""
    cells = _query(report, "SELECT * FROM cells WHERE spec = ? ORDER BY grid_index", spec)
    for c in cells:
        axes = _query(
            report, "SELECT axis, value, value_text FROM axes WHERE spec = ? AND cell_id = ?", spec, c["cell_id"]
        )
        c["axes"] = {a["axis"]: a["value"] for a in axes}
        c["axis_texts"] = {a["axis"]: a["value_text"] for a in axes}
        eps = _query(
            report,
            "SELECT delta, epsilon, epsilon_lower FROM epsilons WHERE spec = ? AND cell_id = ?",
            spec,
            c["cell_id"],
        )
        c["eps"] = {e["delta"]: (e["epsilon_lower"], e["epsilon"]) for e in eps}
    return cells


def _follow(mechanism: dict, path: str):
    node = mechanism
    for part in path.split("."):
        m = re.fullmatch(r"(\w+)(?:\[(\d+)\])?", part)
        node = node[m.group(1)]
        if m.group(2) is not None:
            node = node[int(m.group(2))]
    return node


def _brackets(lower: float, truth: float, upper: float) -> bool:
    return lower <= truth * (1 + REL) + 1e-12 and truth <= upper * (1 + REL) + 1e-12


# -- independent truth ---------------------------------------------------------------------------------------------------
def rr_delta(eps: float, eps0: float, k: int) -> mpmath.mpf:
    """delta(eps) of k-fold binary RR (Kairouz et al. 2015, Thm 3.3): with a ~ Bin(k, p) answers agreeing with the
    truth, p = e^eps0/(1+e^eps0), the privacy loss is (2a - k) eps0, and delta(eps) = sum over a with loss > eps of
    C(k,a) (p^a q^(k-a) - e^eps q^a p^(k-a))."""
    with mpmath.workdps(60):
        e0 = mpmath.mpf(eps0)
        p = mpmath.exp(e0) / (1 + mpmath.exp(e0))
        q = 1 - p
        total = mpmath.mpf(0)
        for a in range(k + 1):
            if (2 * a - k) * e0 > eps:
                total += mpmath.binomial(k, a) * (p**a * q ** (k - a) - mpmath.exp(eps) * q**a * p ** (k - a))
        return total


def rr_epsilon(delta: float, eps0: float, k: int) -> float:
    """Smallest eps >= 0 with rr_delta(eps) <= delta (bisection; delta(eps) is continuous and decreasing)."""
    if rr_delta(0.0, eps0, k) <= delta:
        return 0.0
    lo, hi = 0.0, k * eps0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if rr_delta(mid, eps0, k) > delta else (lo, mid)
    return hi


def laplace_epsilon(delta: float, eps0: float) -> float:
    """One Laplace mechanism, eps0 = sensitivity/scale. Its privacy loss is (|x - D| - |x|)/b, so for |eps| < eps0 the
    event {loss > eps} is {x < t} with t/b = (eps0 - eps)/2, and delta(eps) = P(X < t) - e^eps Q(X < t)
    = 1 - e^{(eps - eps0)/2}; inverted: eps(delta) = eps0 + 2 log(1 - delta)."""
    return eps0 + 2.0 * math.log1p(-delta)


def _dp_accounting_pld(mechanism: gdpcore.Mechanism, step: float):
    """dp_accounting's own PLD (pessimistic, connect-the-dots) of the few shapes these specs produce."""

    def leaf(m):
        if isinstance(m, gdpcore.Laplace):
            return pld_lib.from_laplace_mechanism(
                m.scale, sensitivity=m.sensitivity, value_discretization_interval=step, use_connect_dots=True
            )
        if isinstance(m, gdpcore.Gaussian):
            return pld_lib.from_gaussian_mechanism(
                m.noise_multiplier, value_discretization_interval=step, use_connect_dots=True
            )
        assert isinstance(m, gdpcore.SubsampledGaussian)
        single = pld_lib.from_gaussian_mechanism(
            m.noise_multiplier, sampling_prob=m.sampling_rate, value_discretization_interval=step, use_connect_dots=True
        )
        return single.self_compose(m.steps)

    if isinstance(mechanism, gdpcore.SelfComposed):
        return leaf(mechanism.mechanism).self_compose(mechanism.count)
    parts = [leaf(m) for m in mechanism.mechanisms]
    out = parts[0]
    for p in parts[1:]:
        out = out.compose(p)
    return out


# -- the report ----------------------------------------------------------------------------------------------------------
def test_every_cell_has_one_ok_row_and_its_swept_values(swept):
    _, report = swept
    expected = {
        "laplace-composition": (6, 2),
        "randomized-response": (6, 2),
        "dpsgd-plus-release": (4, 2),
        "rr-flat": (2, 1),
    }
    for spec, (n, n_axes) in expected.items():
        cells = _cells(report, spec)
        assert len(cells) == n and len({c["cell_id"] for c in cells}) == n, spec
        assert {c["status"] for c in cells} == {"ok"}, spec
        for c in cells:
            mech = json.loads(c["mechanism_json"])
            assert (
                gdpcore.mechanism_from_dict({k: v for k, v in mech.items() if k != "schema"}).content_hash
                == c["cell_id"]
            )
            assert len(c["axes"]) == n_axes
            for axis, value in c["axes"].items():  # the axes view says what the mechanism holds
                assert _follow(mech, axis) == value, (spec, axis)
                assert json.loads(c["axis_texts"][axis]) == value
    # The swept grid, read back as columns: one row per cell in grid order, first key outermost.
    rows = _query(
        report,
        "SELECT c.grid_index, first(a.value) FILTER (WHERE a.axis = 'mechanisms[0].noise_multiplier') AS sgd_sigma, "
        "first(a.value) FILTER (WHERE a.axis = 'mechanisms[1].noise_multiplier') AS release_sigma "
        "FROM cells c JOIN axes a USING (spec, cell_id) WHERE spec = 'dpsgd-plus-release' "
        "GROUP BY c.grid_index ORDER BY c.grid_index",
    )
    assert [(r["sgd_sigma"], r["release_sigma"]) for r in rows] == [(0.8, 2.0), (0.8, 4.0), (1.2, 2.0), (1.2, 4.0)]
    kinds = {
        r["spec"]: (r["mechanism"], r["neighbouring"])
        for r in _query(report, "SELECT DISTINCT spec, mechanism, neighbouring FROM cells")
    }
    assert kinds == {
        "laplace-composition": ("self_composed", "add_remove"),
        "randomized-response": ("self_composed", "replace_one"),
        "dpsgd-plus-release": ("composed", "add_remove"),
        "rr-flat": ("randomized_response", "replace_one"),
    }
    # A flat kind keeps its typed parameter column (randomized response's epsilon is stored as rr_epsilon).
    flat = _cells(report, "rr-flat")
    assert [c["rr_epsilon"] for c in flat] == [0.5, 2.0] and [c["axes"]["epsilon"] for c in flat] == [0.5, 2.0]
    # Compositions have no typed parameter columns (their parameters are in mechanism_json and the axes view).
    assert all(c["noise_multiplier"] is None and c["steps"] is None for c in _cells(report, "dpsgd-plus-release"))


def test_k_fold_randomized_response_against_the_binomial_closed_form(swept):
    _, report = swept
    worst = 0.0
    for c in _cells(report, "randomized-response"):
        eps0, k = c["axes"]["mechanism.epsilon"], int(c["axes"]["count"])
        for delta, (lower, upper) in c["eps"].items():
            truth = rr_epsilon(delta, eps0, k)
            assert _brackets(lower, truth, upper), (eps0, k, delta, lower, truth, upper)
            assert upper <= truth * 1.02 + 1e-3  # a 1%-tolerance sweep is tight, not just valid
            worst = max(worst, (upper - truth) / max(truth, 1e-3))
        if k == 1:  # one RR: f_{eps,0}, exactly GDP-dominated at mu = -2 Phi^-1(1/(1+e^eps)) (Dong, Roth, Su 2022)
            mu = -2.0 * norm.ppf(1.0 / (1.0 + math.exp(eps0)))
            assert _brackets(c["mu_lower"], mu, c["mu"]), (eps0, c["mu_lower"], mu, c["mu"])
    assert worst < 0.02
    # The flat kind: k = 1, eps(delta) = log((p - delta)/q) on the same closed form.
    for c in _cells(report, "rr-flat"):
        eps0 = c["axes"]["epsilon"]
        p = math.exp(eps0) / (1 + math.exp(eps0))
        for delta, (lower, upper) in c["eps"].items():
            truth = math.log((p - delta) / (1 - p))
            assert abs(truth - rr_epsilon(delta, eps0, 1)) < 1e-9
            assert _brackets(lower, truth, upper), (eps0, delta, lower, truth, upper)


def test_laplace_compositions_against_closed_forms_and_dp_accounting(swept):
    _, report = swept
    for c in _cells(report, "laplace-composition"):
        scale, k = c["axes"]["mechanism.scale"], int(c["axes"]["count"])
        eps0 = 1.0 / scale  # sensitivity 1 (fixed in the template)
        m = gdpcore.mechanism_from_dict({k_: v for k_, v in json.loads(c["mechanism_json"]).items() if k_ != "schema"})
        fine = _dp_accounting_pld(m, c["discretization"] / 10.0)
        for delta, (lower, upper) in c["eps"].items():
            assert upper <= k * eps0 * (1 + REL)  # pure composition: (k eps0, 0)-DP
            assert lower <= rr_epsilon(delta, eps0, k) * (1 + REL)  # k-fold RR is the worst eps0-DP composition
            if k == 1:
                assert _brackets(lower, laplace_epsilon(delta, eps0), upper), (scale, delta, lower, upper)
            ref = fine.get_epsilon_for_delta(delta)
            assert _brackets(lower, ref, upper), (scale, k, delta, lower, ref, upper)
        # pure_dp regret is reported for every cell (the kind's pure-eps hook, composed over the count)
        regrets = _query(
            report,
            "SELECT representation FROM regrets WHERE spec = 'laplace-composition' AND cell_id = ?",
            c["cell_id"],
        )
        assert {r["representation"] for r in regrets} == {"gdp", "pure_dp"}


def test_dpsgd_plus_release_against_dp_accounting_at_a_finer_step(swept):
    _, report = swept
    cells = _cells(report, "dpsgd-plus-release")
    for c in cells[-1:]:  # one corner: dp_accounting at step 1e-5 takes 3-6 s per cell
        m = gdpcore.mechanism_from_dict({k: v for k, v in json.loads(c["mechanism_json"]).items() if k != "schema"})
        fine = _dp_accounting_pld(m, c["discretization"] / 10.0)
        for delta, (lower, upper) in c["eps"].items():
            ref = fine.get_epsilon_for_delta(delta)
            assert _brackets(lower, ref, upper), (c["axes"], delta, lower, ref, upper)
    # More noise in either part never increases epsilon.
    eps = {
        (c["axes"]["mechanisms[0].noise_multiplier"], c["axes"]["mechanisms[1].noise_multiplier"]): c["eps"][1e-5][1]
        for c in cells
    }
    assert eps[(0.8, 2.0)] > eps[(0.8, 4.0)] > eps[(1.2, 4.0)] and eps[(0.8, 2.0)] > eps[(1.2, 2.0)] > eps[(1.2, 4.0)]


def test_a_rerun_computes_nothing_and_keeps_the_members(swept, capsys):
    lake, report = swept
    path = ROOT / "data" / "specs" / "dpsgd-plus-release.yaml"
    members = members_path(lake, "dpsgd-plus-release")
    before = members.stat().st_mtime_ns, report.stat().st_mtime_ns
    assert main(["sweep", str(path), "--lake", str(lake), "--report", str(report), "--runner", "thread"]) == 0
    assert "4 cells (0 computed, 4 already in the lake); nothing to compute" in capsys.readouterr().out
    assert (members.stat().st_mtime_ns, report.stat().st_mtime_ns) == before


def test_regret_map_refuses_a_composition_before_any_work(tmp_path):
    from flows.regret_map import choose_axes
    from tasks.spec import load_grid_spec

    spec = load_grid_spec(ROOT / "data" / "specs" / "dpsgd-plus-release.yaml")
    with pytest.raises(ValueError, match="query its swept values in the report's axes view"):
        choose_axes(spec, None, None)


def test_members_written_before_the_axis_columns_still_publish(swept, tmp_path):
    """A lake from before this layout (members without axis columns): the report publishes, its axes view is empty
    for those specs, and the next sweep of a spec rewrites its members once with them."""
    import shutil

    import pyarrow.parquet as pq

    from tasks.lake import members_current
    from tasks.publish import publish_lake

    lake = tmp_path / "lake"
    shutil.copytree(swept[0], lake, ignore=shutil.ignore_patterns("curated", "_cache", "*.lock"))
    for path in lake.glob("members/spec=*/members.parquet"):
        table = pq.read_table(path)
        pq.write_table(table.select(["cell_id", "eval_key", "grid_index", "spec_hash"]), path)
    report = tmp_path / "reports" / "old.duckdb"
    publish_lake(lake, report)
    assert _query(report, "SELECT count(*) AS n FROM cells")[0]["n"] == 18
    assert _query(report, "SELECT count(*) AS n FROM axes")[0]["n"] == 0
    old = pq.read_table(members_path(lake, "dpsgd-plus-release"))
    ids, key, spec_hash = (old.column(c).to_pylist() for c in ("cell_id", "eval_key", "spec_hash"))
    assert not members_current(lake, "dpsgd-plus-release", spec_hash[0], ids, key[0])  # the next sweep rewrites it
