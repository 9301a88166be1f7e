"""The site shows which sampler and which bound: a shuffled run's proven lower bound beside its Poisson estimate,
a tuned version's best-of-K bound beside the single run's, and a sampler sweep's lower ends (tasks.site, pure
render_pages; the numbers in the rows are the page's input, so the test checks what is shown and how it is
labelled, not how it was computed - tests/registry/test_samplers_in_registry.py and test_tuned_registry.py do that)."""

from __future__ import annotations

import json

from tasks.site import render_pages
from tests.pipeline.test_site import _tables, _version

SHUFFLED = {
    "sampler": "shuffle",
    "estimate_reason": "the batches were shuffled, not Poisson-sampled",
    "mu_bound": "estimate",
    "epsilon_bound": "estimate",
    "epsilon": 2.102,
    "shuffle_epsilon_lower": 11.23,
    "shuffle_mu_lower": 2.157,
    "shuffle_label": "lower (proven, Chua et al. 2024)",
    "shuffle_analysis": "Chua et al. 2024",
}
TUNED = {
    "sampler": "poisson",
    "epsilon": 1.636,
    "epsilon_single_run": 1.636,
    "tuning_epsilon": 3.62,
    "tuning_bound": "upper",
    "tuning_analysis": "Papernot & Steinke 2022, Thm 2 (RDP of best-of-K, K truncated negative binomial)",
    "tuning_distribution": json.dumps({"distribution": "geometric", "mean": 10}),
    "tuning_expected_runs": 10.0,
}


def test_shuffled_run_lower_bound_on_the_overview_and_version_page():
    pages = render_pages(_tables(versions=[_version("s", **SHUFFLED)]))
    index, page = pages["index.html"], pages["site/models/s/v1/index.html"]
    assert "shuffled run: ≥ 11.23" in index and 'data-value="11.23"' in index
    assert "the shuffled run&#39;s ε ≥ 11.23 (proven lower bound) &gt; the Poisson estimate 2.102" in index
    assert 'id="shuffle-lower"' in page and "≥ 11.23" in page and "lower (proven, Chua et al. 2024)" in page
    assert "the Poisson figure 2.102 (estimate) understates the risk" in page
    assert "μ ≥ 2.157 (lower)" in page


def test_a_lower_bound_below_the_estimate_is_shown_but_not_flagged():
    pages = render_pages(_tables(versions=[_version("s", **{**SHUFFLED, "shuffle_epsilon_lower": 1.5})]))
    index, page = pages["index.html"], pages["site/models/s/v1/index.html"]
    assert "shuffled run: ≥ 1.5" in index and "the Poisson estimate" not in index
    assert "understates" not in page and "beside the Poisson estimate 2.102" in page


def test_tuned_version_shows_best_of_k_next_to_one_run():
    pages = render_pages(_tables(versions=[_version("t", **TUNED)]))
    index, page = pages["index.html"], pages["site/models/t/v1/index.html"]
    assert "best of K (K random, E[K] = 10): 3.62" in index
    assert 'id="tuning"' in page and "ε at δ = 1e-05, best of K runs" in page and "ε at δ = 1e-05, one run" in page
    assert "K random, E[K] = 10; one run: 1.636" in page and "Papernot &amp; Steinke 2022, Thm 2" in page


def test_untuned_unshuffled_version_has_neither():
    pages = render_pages(_tables(versions=[_version("p", sampler="poisson")]))
    page = pages["site/models/p/v1/index.html"]
    assert 'id="shuffle-lower"' not in page and 'id="tuning"' not in page and ", one run" not in page


def test_sampler_sweep_cells_show_epochs_batches_and_the_lower_end():
    sweep = {"spec": "samplers", "cells": 2, "ok_cells": 1, "min_mu": 1.0, "max_mu": 1.0, "max_regret": 0.0}
    common = {"noise_multiplier": 1.0, "sampling_rate": None, "steps": None, "steps_per_epoch": 100, "epochs": 1}
    cells = [
        {"spec": "samplers", "cell_id": "a" * 16, "mechanism_kind": "shuffled_gaussian", **common, "mu": 1.0,
         "mu_bound": "upper", "mu_lower": 0.95, "status": "tolerance_not_met: certified gap 5e-2 > tolerance 0.01",
         "gdp_regret": 0.0, "advantage": 0.38, "advantage_bound": "upper"},
        {"spec": "samplers", "cell_id": "b" * 16, "mechanism_kind": "cyclic_gaussian", **common, "mu": 1.0,
         "mu_bound": "exact", "mu_lower": 1.0, "status": "ok", "gdp_regret": 0.0, "advantage": 0.38,
         "advantage_bound": "exact"},
    ]  # fmt: skip
    axes = {"spec": "samplers", "noise_multiplier": 1, "steps_per_epoch": 1, "epochs": 1, "regret_cells": 2}
    html = render_pages(_tables(sweeps=[sweep], worst_cells=cells, sweep_axes=[axes]))["site/sweeps/samplers.html"]
    assert html.count("1 × 100") == 2 and "shuffled_gaussian" in html and "cyclic_gaussian" in html
    assert '0.95 <span class="bound">lower</span>' in html and ">tolerance_not_met</td>" in html
