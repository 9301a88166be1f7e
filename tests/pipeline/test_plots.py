"""One curve convention: every trade-off plot shows attack TPR vs FPR on a linear and a log-log panel, with
the mu-GDP and (eps, delta) curves as closed forms and a published claim's allowed region shaded."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from tasks.plots import tradeoff_figure


def _line(ax, label: str):
    return next(line for line in ax.get_lines() if line.get_label() == label)


def test_tradeoff_figure_plots_tpr_on_linear_and_log_panels():
    import matplotlib.pyplot as plt

    mu = 1.0
    fpr = np.linspace(0, 1, 11)
    fnr = norm.cdf(norm.ppf(1 - fpr) - mu)  # the exact mu-GDP curve as the "audited" curve
    fig = tradeoff_figure(
        "a title that is long " * 12,
        fpr,
        fnr,
        curve_label="audited",
        mu=mu,
        eps_deltas=[(2.0, 1e-5)],
        claimed=(3.0, 1e-5, "RDP"),
    )
    try:
        lin, log = fig.axes[:2]
        assert (lin.get_xscale(), lin.get_yscale()) == ("linear", "linear")
        assert (log.get_xscale(), log.get_yscale()) == ("log", "log")
        for ax in (lin, log):
            audited = _line(ax, "audited")
            np.testing.assert_allclose(audited.get_ydata(), 1 - fnr)  # TPR, not FNR
            g = _line(ax, "1-GDP")
            x, y = g.get_xdata(), g.get_ydata()
            np.testing.assert_allclose(y, norm.cdf(norm.ppf(x) + mu), atol=1e-9)  # TPR of mu-GDP (Dong et al.)
            e = _line(ax, "(2, 1e-05)-DP")
            x, y = e.get_xdata(), e.get_ydata()
            # (eps, delta)-DP: TPR <= min(1, e^eps FPR + delta, 1 - e^-eps (1 - delta - FPR))
            bound = np.minimum.reduce([np.ones_like(x), np.exp(2.0) * x + 1e-5, 1 - np.exp(-2.0) * (1 - 1e-5 - x)])
            np.testing.assert_allclose(y, bound, atol=1e-9)
            assert any("claimed (3, 1e-05)-DP (RDP)" in str(c.get_label()) for c in ax.collections)
        title = fig._suptitle.get_text()
        assert "\n" in title and max(len(line) for line in title.splitlines()) <= 110  # wrapped, not cut
    finally:
        plt.close(fig)


@pytest.mark.parametrize(("fixed", "name"), [({"steps": 1000.0}, "steps=1000"), ({}, "max-over-others")])
def test_heatmap_filenames_name_the_plot(fixed, name):
    from tasks.plots import heatmap_filename

    assert heatmap_filename("mu", "sampling_rate", "noise_multiplier", fixed, "max") == (
        f"mu_noise_multiplier_vs_sampling_rate__{name}.png"
    )
