"""``gdp analyze``: the printed numbers are gdpcore's, labelled, and bad input fails with exit 2 naming the field.

Independent truth: the Gaussian closed form (mu = 1/sigma, seed 000 Eq. 4-5, evaluated with scipy here) and the
published De et al. claim (eps = 8 at delta = 1e-5 with RDP, seed 000 Table 4).
"""

from __future__ import annotations

import json
import math
import re

import pytest
from scipy import stats

from flows.cli import main


def _run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_gaussian_report_is_the_closed_form(capsys):
    rc, out, _ = _run(capsys, "analyze", "gaussian", "--noise-multiplier", "2", "--json", "--delta", "1e-5")
    assert rc == 0
    s = json.loads(out)
    assert s["mu"]["value"] == 0.5 and s["mu"]["bound"] == "exact"
    (row,) = s["epsilon"]
    e, mu = row["value"], 0.5
    delta = stats.norm.cdf(-e / mu + mu / 2) - math.exp(e) * stats.norm.cdf(-e / mu - mu / 2)  # seed 000 Eq. 5
    assert row["delta"] == 1e-5 and delta == pytest.approx(1e-5, rel=1e-8) and row["bound"] == "exact"


def test_text_report_labels_every_number_and_rechecks_a_claim(capsys):
    rc, out, _ = _run(
        capsys,
        "analyze",
        "subsampled_gaussian",
        "--noise-multiplier",
        "9.4",
        "--sampling-rate",
        "0.32768",
        "--steps",
        "2000",
        "--claim",
        "8,1e-5,RDP",
    )
    assert rc == 0
    mu = float(re.search(r"mu-GDP +([0-9.]+) +\(upper bound; bracket \[", out).group(1))
    assert abs(mu - 1.567) <= 3e-3  # seed 000 Sec. 5: "mu = 1.57"
    assert "(upper)" in out and "Bayes security" in out and "(lower bound)" in out
    # The tight eps is the engine's default report's (refined step; 7.4244-7.4246 against 7.42439 at step 1e-4).
    import gdpcore

    tight = float(
        gdpcore.analyze(gdpcore.SubsampledGaussian(noise_multiplier=9.4, sampling_rate=0.32768, steps=2000)).epsilon(
            1e-5
        )
    )
    assert 7.4238 <= tight <= 7.4246
    assert (
        "published claim claimed eps=8 at delta=1e-05 (RDP); reproduced: rdp gives 7.998 (upper); "
        f"gdpcore's pessimistic eps {tight:.4g} certifies the claim"
    ) in out


def test_json_claim_block(capsys):
    rc, out, _ = _run(
        capsys,
        "analyze",
        "subsampled_gaussian",
        "--noise-multiplier",
        "0.7",
        "--sampling-rate",
        "0.01",
        "--steps",
        "1000",
        "--json",
        "--claim",
        "2.5,1e-5,GDP",
    )
    assert rc == 0
    claim = json.loads(out)["claim"]
    assert claim["reproduced"]["family"] == "clt" and claim["reproduced"]["bound"] == "estimate"
    assert (
        not claim["certified"] and claim["tight_epsilon"]["value"] > 2.5 and claim["tight_epsilon"]["bound"] == "upper"
    )


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["analyze", "gaussian", "--noise-multiplier", "-1"], "noise_multiplier"),
        (["analyze", "gaussian", "--noise-multiplier", "1", "--claim", "8,1e-5"], "--claim"),
        (["analyze", "gaussian", "--noise-multiplier", "1", "--claim", "x,1e-5,RDP"], "--claim"),
        (["analyze", "gaussian", "--noise-multiplier", "1", "--claim", "8,2,RDP"], "delta"),
        (["analyze", "no_such_kind"], "no_such_kind"),
        (["analyze"], "mechanism kind is required"),
    ],
)
def test_bad_input_exits_2_naming_the_field(capsys, argv, needle):
    rc, out, err = _run(capsys, *argv)
    assert rc == 2 and out == "" and needle in err and err.startswith("gdp analyze: error:")


@pytest.mark.slow
@pytest.mark.parametrize(
    "params",
    [
        # Regression: killed by the kernel at 23.7 GB (dp_accounting path, no budget) before the one engine.
        ["--noise-multiplier", "0.3", "--sampling-rate", "0.5", "--steps", "100000"],
        # Regression: MemoryError at 13.4 GB before the one engine.
        ["--noise-multiplier", "0.5082", "--sampling-rate", "0.1977", "--steps", "56379"],
    ],
)
@pytest.mark.subprocess  # the CLI in a fresh interpreter (its own peak RSS)
def test_extreme_cells_answer_within_the_memory_budget(params):
    """The default 4 GiB budget is planned before allocating: the peak RSS of the CLI process stays below it and the
    answer carries labelled bounds and a status (measured on the 2-core machine: 12 s / 1.7 GB and 2 s / 0.3 GB)."""
    import subprocess
    import sys

    # The CLI in a fresh interpreter, which reports its own peak (VmHWM of its process image; ru_maxrss would include
    # the forking test process's).
    child = (
        "import sys; from flows.cli import main; rc = main(sys.argv[1:]); "
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0].split()[1]; "
        "print(hwm, file=sys.stderr); sys.exit(rc)"
    )
    out = subprocess.run(
        [sys.executable, "-c", child, "analyze", "subsampled_gaussian", *params, "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    peak = int(out.stderr.strip().splitlines()[-1]) * 1024  # VmHWM is in KiB
    assert peak < 4 * 2**30
    summary = json.loads(out.stdout)
    assert summary["status"] == "ok" or summary["status"].startswith(("tolerance_not_met", "over_budget"))
    assert summary["mu"]["bound"] == "upper" and summary["epsilon"][0]["bound"] == "upper"


# -- the curve on demand: --json carries it, --plot draws it, the text names a better representation ----------------------
def _strict(text: str):
    def refuse(constant):
        raise AssertionError(f"not JSON: bare {constant}")

    return json.loads(text, parse_constant=refuse)


def _laplace_tradeoff(alpha):
    """Laplace mechanism, scale 1, sensitivity 1 (eps = 1): the Neyman-Pearson curve of Lap(0, 1) vs Lap(1, 1) (Dong,
    Roth, Su 2022; seed 000 Sec. 2.4, Fig. 1(a)), written out here."""
    import numpy as np

    e = math.exp(-1.0)
    a = np.asarray(alpha, dtype=float)
    return np.where(a < e / 2, 1 - a / e, np.where(a <= 0.5, e / (4 * np.maximum(a, 1e-300)), e * (1 - a)))


def test_json_carries_both_sides_of_the_curve_around_the_true_one(capsys):
    import numpy as np

    import gdpcore

    rc, out, _ = _run(capsys, "analyze", "laplace", "--scale", "1", "--json")
    assert rc == 0
    s = _strict(out)
    curve = s["curve"]
    report = gdpcore.analyze(gdpcore.Laplace(scale=1.0))
    alpha = np.concatenate([np.logspace(-9, -0.01, 300), np.linspace(0.01, 0.99, 300)])
    truth = _laplace_tradeoff(alpha)
    sides = {}
    for side in ("pessimistic", "optimistic"):
        fpr, fnr = np.asarray(curve[side]["fpr"]), np.asarray(curve[side]["fnr"])
        api_fpr, api_fnr = report.breakpoints(side=side)
        assert np.array_equal(fpr, api_fpr) and np.array_equal(fnr, api_fnr)  # the API's vertices
        assert fpr[0] == 0.0 and fpr[-1] == 1.0 and np.all(np.diff(fpr) >= 0) and curve[side]["points"] == fpr.size
        sides[side] = np.interp(alpha, fpr, fnr)
    # the certified bracket holds the Laplace curve: pessimistic FNR <= true <= optimistic FNR
    assert np.all(sides["pessimistic"] <= truth + 1e-9) and np.all(truth <= sides["optimistic"] + 1e-9)
    assert "lower bound on FNR" in curve["pessimistic"]["bound"]


def test_json_representations_are_seed_000_fig_1c_and_text_names_eps_dp(capsys):
    rc, out, _ = _run(capsys, "analyze", "laplace", "--scale", "1", "--json")
    reps = _strict(out)["representations"]
    rows = {r["representation"]: r for r in reps["rows"]}
    # docs/references.md S000-5 (seed 000 Fig. 1(c), Laplace b = 1): eps-DP 3.4323%, (eps, 1e-5) 3.4322%, GDP 3.7016%
    assert rows["pure_dp"]["regret"] == pytest.approx(0.034323, abs=2e-6) and rows["pure_dp"]["parameter"] == 1.0
    assert rows["epsilon_delta"]["regret"] == pytest.approx(0.034322, abs=2e-6)
    assert rows["gdp"]["regret"] == pytest.approx(0.037016, abs=2e-6)
    assert reps["best"] == "pure_dp"  # tied with (eps, delta) within 1e-4: the simpler statement
    rc, text, _ = _run(capsys, "analyze", "laplace", "--scale", "1")
    assert rc == 0 and "best statement  eps-DP with epsilon = 1 (exact): regret 3.43% (estimate)" in text
    rc, text, _ = _run(capsys, "analyze", "gaussian", "--noise-multiplier", "1")
    assert rc == 0 and "best statement" not in text  # mu-GDP is complete: nothing better to name


def test_exact_report_curve_is_f_mu(capsys):
    import numpy as np
    from scipy import stats

    rc, out, _ = _run(capsys, "analyze", "gaussian", "--noise-multiplier", "2", "--json")
    s = _strict(out)
    side = s["curve"]["pessimistic"]
    assert side["bound"] == "exact" and s["curve"]["optimistic"] == side
    fpr = np.asarray(side["fpr"])
    assert np.allclose(side["fnr"], stats.norm.cdf(stats.norm.ppf(1 - fpr) - 0.5), rtol=1e-9, atol=1e-15)
    rows = {r["representation"]: r for r in s["representations"]["rows"]}
    assert rows["gdp"]["regret"] == 0.0 and rows["pure_dp"]["parameter"] == "inf"  # not pure DP: strict JSON "inf"


def test_json_is_strict_where_numbers_are_not_finite(capsys, tmp_path):
    """The RDP fallback printed bare NaN; null = not computed, "inf" = infinite. Its plot (eps(1e-5) = 1.6e5, mu = inf)
    has the two curve panels and no (eps, delta) curve exp(eps) cannot draw."""
    rc, out, _ = _run(
        capsys,
        "analyze",
        "subsampled_laplace",
        "--scale",
        "1",
        "--sampling-rate",
        "0.01",
        "--steps",
        "1000000000",
        "--json",
        "--plot",
        str(tmp_path / "rdp.png"),
    )
    assert rc == 0
    width, height = _png_size(tmp_path / "rdp.png")
    assert 1.5 * height < width < 2.5 * height
    s = _strict(out)
    assert s["mu"]["value"] == "inf" and s["mu"]["lower"] is None and s["advantage"]["lower"] is None
    assert s["curve"]["optimistic"] is None and s["curve"]["optimistic_reason"]


def test_json_text_convention():
    import numpy as np

    from tasks.formatting import json_text

    text = json_text({"a": math.nan, "b": [math.inf, -math.inf], "c": np.float64(0.5), "d": np.arange(2), "e": True})
    assert _strict(text) == {"a": None, "b": ["inf", "-inf"], "c": 0.5, "d": [0, 1], "e": True}


def _png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_plot_writes_the_three_panel_figure_and_refuses_to_overwrite(capsys, tmp_path):
    out = tmp_path / "laplace.png"
    rc, text, err = _run(capsys, "analyze", "laplace", "--scale", "1", "--plot", str(out))
    assert rc == 0, err
    width, height = _png_size(out)
    assert width > 2.5 * height  # three panels side by side: linear, log-log, |f - f_mu|
    assert f"plot            {out}" in text
    before = out.read_bytes()
    rc, text, err = _run(capsys, "analyze", "laplace", "--scale", "1", "--plot", str(out))
    assert rc == 2 and text == "" and "--overwrite" in err and out.read_bytes() == before
    assert _run(capsys, "analyze", "laplace", "--scale", "1", "--plot", str(out), "--overwrite")[0] == 0
    rc, _, err = _run(capsys, "analyze", "laplace", "--scale", "1", "--plot", str(tmp_path / "x.pdf"))
    assert rc == 2 and ".png" in err and not (tmp_path / "x.pdf").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["laplace.png"]  # no temporary file left behind


def test_text_report_ends_with_the_table_when_gdp_is_complete(capsys):
    rc, out, _ = _run(capsys, "analyze", "gaussian", "--noise-multiplier", "1")
    lines = out.splitlines()
    # the last rows: FPR 0.1, then alpha* (seed 000: FPR = FNR); no trailing blank line
    assert rc == 0 and lines[-2].strip().startswith("0.1 ") and "alpha*" in lines[-1]


def test_text_report_shows_the_rule_of_thumb_and_alpha_star(capsys):
    # seed 000 Sec. 6: sigma >= 2 and T >= 400 give regret < 0.01; outside it the text says so under the regret.
    code, out, _ = _run(
        capsys, "analyze", "subsampled_gaussian", "--noise-multiplier", "1", "--sampling-rate", "0.01", "--steps", "300"
    )
    assert code == 0
    assert "sigma = 1 < 2 and T = 300 < 400" in out
    code, out, _ = _run(
        capsys, "analyze", "subsampled_gaussian", "--noise-multiplier", "2", "--sampling-rate", "0.01", "--steps", "400"
    )
    assert code == 0 and "rule of thumb" not in out
    # alpha* of G_mu is Phi(-mu/2) (f_mu(alpha*) = alpha*): for mu = 1, 0.308538, with TPR 1 - alpha*.
    code, out, _ = _run(capsys, "analyze", "gaussian", "--noise-multiplier", "1")
    row = next(line for line in out.splitlines() if "alpha*" in line)
    fpr, tpr = (float(x) for x in row.split()[:2])
    assert fpr == pytest.approx(stats.norm.cdf(-0.5), rel=1e-5)
    assert tpr == pytest.approx(1 - stats.norm.cdf(-0.5), rel=1e-5)
