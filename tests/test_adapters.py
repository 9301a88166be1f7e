"""gdpcore.adapters: Opacus histories and TF-Privacy statement parameters as TrainingRuns, against independent truth.

Truth used here:
* TF-Privacy's own conventions and printed numbers (tensorflow/privacy,
  ``tensorflow_privacy/privacy/analysis/compute_dp_sgd_privacy_lib.py`` and ``compute_dp_sgd_privacy_test.py``);
* Opacus's published RDP number (pytorch/opacus, its test file ``accountants_test.py``, ``test_rdp_accountant``);
* dp_accounting's PLD accountant on the same DpEvent at a 10x finer step than gdpcore's, computed in the test.
Sources and values: docs/references.md, P-7.
"""

import math

import dp_accounting
import pytest
from dp_accounting import dp_event as ev
from dp_accounting.pld import privacy_loss_distribution as pld_lib

import gdpcore
from gdpcore import adapters, kinds
from gdpcore.adapters import from_opacus_history, from_opacus_state_dict, from_tf_privacy

TWO_PHASE = [(1.1, 256 / 60000, 4688), (0.9, 512 / 60000, 586)]


def _dp_accounting_pld(mechanism, delta, step):
    acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=step)
    return acc.compose(kinds.to_dp_event(mechanism)).get_epsilon(delta)


def _bracket(run, delta, **kw):
    rep = run.analyze(deltas=[delta], **kw).report
    return float(rep.epsilon(delta, side="optimistic")), float(rep.epsilon(delta)), rep.discretization


# -- TF-Privacy -------------------------------------------------------------------------------------------------------
def test_tf_privacy_step_count_is_its_own():
    """compute_dp_sgd_privacy_lib: q = batch_size / number_of_examples, count = int(ceil(num_epochs / q))."""
    run = from_tf_privacy(number_of_examples=60_000, batch_size=256, num_epochs=60, noise_multiplier=1.1)
    assert run.steps == 14_063  # not epochs * ceil(N / B) = 14,100 (the manifest's dpsgd epochs convention)
    assert 60 * math.ceil(60_000 / 256) == 14_100
    m = run.mechanism
    assert isinstance(m, gdpcore.SubsampledGaussian) and m.sampling_rate == 256 / 60_000 and m.steps == 14_063
    assert m.noise_multiplier == 0.55  # used_microbatching=True (TF-Privacy's default) halves the noise multiplier
    assert run.neighbouring == "add_remove" and run.sampler == "poisson" and not run.is_estimate
    # TF-Privacy test's statement case: 5 epochs of 64 out of 10,000 -> ceil(781.25) = 782 steps
    assert from_tf_privacy(number_of_examples=10_000, batch_size=64, num_epochs=5.0, noise_multiplier=2.0).steps == 782


@pytest.mark.slow  # 17 s at load 8-12 on 2 cores
def test_tf_privacy_mnist_statement_reproduced():
    """N=60,000, B=256, 60 epochs, sigma=1.1, delta=1e-5 (TF-Privacy's MNIST tutorial: 256 microbatches of one
    example, i.e. used_microbatching=False). Its PLD statement is dp_accounting's PLDAccountant() (step 1e-4) on
    SelfComposed(PoissonSampled(q, Gaussian(1.1)), 14,063): our certified bracket contains dp_accounting at a step 10x
    finer than ours, and our upper bound agrees with the statement's value to its printed 3 decimals."""
    run = from_tf_privacy(
        number_of_examples=60_000, batch_size=256, num_epochs=60, noise_multiplier=1.1, used_microbatching=False
    )
    lo, hi, step = _bracket(run, 1e-5, discretization=1e-4)
    finer = _dp_accounting_pld(run.mechanism, 1e-5, step / 10)
    assert lo <= finer <= hi, (lo, finer, hi)
    statement = _dp_accounting_pld(run.mechanism, 1e-5, 1e-4)  # what compute_dp_sgd_privacy_statement prints
    lo, hi, _ = _bracket(run, 1e-5)  # default accuracy
    assert lo <= statement and abs(hi - statement) < 5e-4, (lo, hi, statement)
    assert f"{hi:.3f}" == f"{statement:.3f}" == "2.382"


@pytest.mark.slow  # 15 s at load 8-12 on 2 cores
def test_tf_privacy_published_statement_pld():
    """compute_dp_sgd_privacy_test.py, test_dp_sgd_privacy_statement_no_user_dp_with_pld: 10,000 examples, batch 64,
    5 epochs, noise 2.0, microbatching, delta=1e-6 -> "Epsilon assuming Poisson sampling (*): 1.199" (PLD) and 1.616
    (RDP, test_dp_sgd_privacy_statement_no_user_dp_with_rdp)."""
    run = from_tf_privacy(number_of_examples=10_000, batch_size=64, num_epochs=5.0, noise_multiplier=2.0)
    lo, hi, step = _bracket(run, 1e-6)
    assert lo <= 1.1995 and hi >= 1.1985 and f"{hi:.3f}" == "1.199", (lo, hi)
    finer = _dp_accounting_pld(run.mechanism, 1e-6, step / 10)
    assert lo <= finer <= hi
    check = gdpcore.check_claim(run.mechanism, epsilon=1.616, delta=1e-6, accountant="RDP", tight_epsilon=hi)
    assert f"{check.reproduced_epsilon:.3f}" == "1.616" and check.status == "reproduced" and check.certified


@pytest.mark.slow  # 9 s at load 8-12 on 2 cores
def test_tf_privacy_published_example_privacy_microbatching():
    """compute_dp_sgd_privacy_test.py, test_compute_dp_sgd_example_privacy: 1.2 epochs, noise 0.7, q = 1e-2,
    delta=1e-5, PLD: 18.6977407 with microbatching, 2.4612381 without (q = 100 / 10,000; ceil(1.2 / q) = 120 steps)."""
    for micro, published in ((True, 18.6977407), (False, 2.4612381)):
        run = from_tf_privacy(
            number_of_examples=10_000, batch_size=100, num_epochs=1.2, noise_multiplier=0.7, used_microbatching=micro
        )
        assert run.steps == 120
        lo, hi, step = _bracket(run, 1e-5, discretization=1e-3)
        assert lo <= _dp_accounting_pld(run.mechanism, 1e-5, step / 10) <= hi
        assert lo <= published <= hi + 1e-3 * published, (micro, lo, hi, published)


def test_tf_privacy_bad_input_names_the_field():
    with pytest.raises(ValueError, match="batch_size 70000 exceeds number_of_examples 60000"):
        from_tf_privacy(number_of_examples=60_000, batch_size=70_000, num_epochs=1, noise_multiplier=1.0)
    with pytest.raises(ValueError, match="num_epochs must be > 0"):
        from_tf_privacy(number_of_examples=60_000, batch_size=256, num_epochs=0, noise_multiplier=1.0)
    with pytest.raises(ValueError, match="used_microbatching must be true or false"):
        from_tf_privacy(number_of_examples=10, batch_size=2, num_epochs=1, noise_multiplier=1.0, used_microbatching=1)
    with pytest.raises(
        ValueError, match="sampler must be one of poisson, shuffle, fixed, cyclic, balls_in_bins, got 'random'"
    ):
        from_tf_privacy(number_of_examples=10, batch_size=2, num_epochs=1, noise_multiplier=1.0, sampler="random")
    with pytest.raises(ValueError, match="replace_one' needs sampler 'fixed'"):
        from_tf_privacy(
            number_of_examples=10, batch_size=2, num_epochs=1, noise_multiplier=1.0, neighbouring="replace_one"
        )


@pytest.mark.slow  # 55 s at load 8 on the 2 shared cores
def test_tf_privacy_user_level_is_the_mixture_of_gaussians():
    """max_examples_per_user = 1 is the example-level statement (TF-Privacy returns it unchanged); k > 1: each of the
    user's k examples is Poisson-sampled, so a step's sensitivity is Binomial(k, q) - dp_accounting's
    MixtureOfGaussiansDpEvent (sensitivities 0..k, binomial weights); its PLD at a 10x finer step lies in our bracket.
    TF-Privacy's group-privacy conversion (Vadhan 2017, Lemma 2.2) of the example-level eps is an upper bound on it."""
    kw = dict(number_of_examples=10_000, batch_size=64, num_epochs=0.5, noise_multiplier=2.0)
    one = from_tf_privacy(**kw, max_examples_per_user=1)
    assert one.mechanism == from_tf_privacy(**kw).mechanism and one.privacy_unit == "example"
    run = from_tf_privacy(**kw, max_examples_per_user=2)
    assert run.privacy_unit == "user" and run.neighbouring == "add_remove" and run.steps == 79
    event = kinds.to_dp_event(run.mechanism)  # microbatching halves sigma = 2 -> 1; q = 64 / 10,000 = 0.0064
    assert event.count == 79 and event.event.standard_deviation == 1.0 and list(event.event.sensitivities) == [0, 1, 2]
    q = 0.0064
    assert list(event.event.sampling_probs) == pytest.approx([(1 - q) ** 2, 2 * q * (1 - q), q**2], rel=1e-12)
    lo, hi, step = _bracket(run, 1e-6, discretization=1e-3)
    assert lo <= _dp_accounting_pld(run.mechanism, 1e-6, step / 10) <= hi


# -- Opacus -----------------------------------------------------------------------------------------------------------
def test_opacus_published_rdp_number_and_dp_accounting():
    """pytorch/opacus, accountants_test.py in its test suite, test_rdp_accountant: sigma 1.5, sample rate 0.04, int(90 / 0.04) = 2250 steps,
    delta 1e-5 -> RDPAccountant eps 7.32911117143. The tight PLD bracket is below that RDP bound, contains
    dp_accounting's PLD at a 10x finer step, and the RDP claim is reproduced by the named accountant."""
    run = from_opacus_history([(1.5, 0.04, int(90 / 0.04))])
    assert run.steps == 2250 and run.mechanism == gdpcore.SubsampledGaussian(
        noise_multiplier=1.5, sampling_rate=0.04, steps=2250
    )
    lo, hi, step = _bracket(run, 1e-5)
    assert lo <= _dp_accounting_pld(run.mechanism, 1e-5, step / 10) <= hi
    assert hi < 7.32911117143
    check = gdpcore.check_claim(run.mechanism, epsilon=7.32911117143, delta=1e-5, accountant="RDP", tight_epsilon=hi)
    assert check.status == "reproduced" and check.certified


def test_opacus_two_phase_history_against_dp_accounting():
    run = from_opacus_history(TWO_PHASE)
    assert isinstance(run.mechanism, gdpcore.Composed) and run.steps == 5274
    delta = 60_000**-1.1
    lo, hi, step = _bracket(run, delta, discretization=1e-3)
    assert lo <= _dp_accounting_pld(run.mechanism, delta, step / 10) <= hi


def test_opacus_state_dict_and_flags():
    state = {"history": [list(p) for p in TWO_PHASE], "mechanism": "prv"}
    run = from_opacus_state_dict(state)
    assert run.mechanism == from_opacus_history(TWO_PHASE).mechanism and "PRVAccountant" in run.source
    shuffled = from_opacus_state_dict(state, poisson_sampling=False)
    assert shuffled.sampler == "shuffle" and shuffled.estimate_reason == adapters.SHUFFLE_REASON
    assert shuffled.mechanism == run.mechanism  # same accounting, other label
    with pytest.raises(ValueError, match="needs a 'history' key"):
        from_opacus_state_dict({"mechanism": "rdp"})
    with pytest.raises(ValueError, match=r"history\[1\]\[1\] \(sample_rate\) must be in \(0, 1\], got 1.5"):
        from_opacus_history([(1.0, 0.1, 10), (1.0, 1.5, 10)])
    with pytest.raises(ValueError, match=r"history\[0\]\[2\] \(num_steps\) must be a positive integer, got 2.5"):
        from_opacus_history([(1.0, 0.1, 2.5)])
    with pytest.raises(ValueError, match="history is empty"):
        from_opacus_history([])
    with pytest.raises(ValueError, match="mechanism must be one of rdp, prv, gdp"):
        from_opacus_state_dict({"history": [], "mechanism": "zcdp"})


# -- Sampler honesty ------------------------------------------------------------------------------------------------
def test_shuffled_run_numbers_are_estimates_everywhere_in_the_summary():
    run = from_opacus_history([(1.1, 0.01, 200)], poisson_sampling=False)
    rr = run.analyze()
    assert set(rr.bound_types.values()) == {"estimate"}
    s = rr.summary()
    bounds = [s["mu"]["bound"], s["advantage"]["bound"], s["bayes_security"]["bound"], s["gdp_regret"]["bound"]]
    bounds += [r["bound"] for r in s["epsilon"] + s["tpr"]]
    assert set(bounds) == {"estimate"}
    assert (
        s["training_run"]["estimate_reason"] == adapters.SHUFFLE_REASON and s["training_run"]["numbers"] == "estimate"
    )
    # the numbers themselves are the Poisson accounting's
    plain = gdpcore.analyze(run.mechanism)
    assert rr.report.epsilon(1e-5) == plain.epsilon(1e-5) and rr.mu == plain.mu
    poisson = from_opacus_history([(1.1, 0.01, 200)]).analyze()
    assert poisson.bound_types == plain.bound_types and poisson.summary()["training_run"]["estimate_reason"] is None


def test_fixed_size_batches():
    """Fixed-size batches under replace-one: accounted exactly (dp_accounting's replace-one subsampled-Gaussian PLD,
    q = B/N, at a 10x finer step lies in the bracket; microbatching does not halve the noise under replace-one);
    under add/remove: the Poisson numbers, labelled estimate (FIXED_REASON)."""
    run = from_tf_privacy(
        number_of_examples=1000,
        batch_size=10,
        num_epochs=1,
        noise_multiplier=1.0,
        sampler="fixed",
        neighbouring="replace_one",
    )
    exact = adapters.fixed_batch_mechanism(noise_multiplier=1.0, dataset_size=1000, batch_size=10, steps=100)
    assert run.mechanism == exact and run.neighbouring == "replace_one" and not run.is_estimate
    lo, hi, step = _bracket(run, 1e-5, discretization=1e-3)
    # dp_accounting's PLDAccountant does not take the event; its replace-one subsampled Gaussian with q = B/N is the
    # same pair (the construction tests/test_dpevent_kinds.py checks the kind against)
    ref = pld_lib.from_gaussian_mechanism(
        1.0,
        value_discretization_interval=step / 10,
        sampling_prob=10 / 1000,
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE,
    ).self_compose(100)
    assert lo <= ref.get_epsilon_for_delta(1e-5) <= hi
    add_remove = from_tf_privacy(
        number_of_examples=1000, batch_size=10, num_epochs=1, noise_multiplier=1.0, sampler="fixed"
    )
    assert add_remove.estimate_reason == adapters.FIXED_REASON and add_remove.neighbouring == "add_remove"


def test_training_run_refuses_inconsistent_relation():
    with pytest.raises(ValueError, match="differs from the mechanism's 'add_remove'"):
        adapters.TrainingRun(
            mechanism=gdpcore.Gaussian(noise_multiplier=1.0),
            sampler=None,
            neighbouring="replace_one",
            steps=None,
            source="x",
        )


def test_dp_event_round_trip_of_an_adapter_mechanism():
    """The adapters' mechanisms are dp_accounting's events (what TF-Privacy composes), both ways."""
    run = from_tf_privacy(number_of_examples=10_000, batch_size=64, num_epochs=5.0, noise_multiplier=2.0)
    event = ev.SelfComposedDpEvent(ev.PoissonSampledDpEvent(64 / 10_000, ev.GaussianDpEvent(1.0)), 782)
    assert kinds.to_dp_event(run.mechanism) == event
    assert gdpcore.from_dp_event(event, neighboring_relation="add_remove") == run.mechanism
