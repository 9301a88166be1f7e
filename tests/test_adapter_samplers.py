"""The libraries' batch options as samplers (gdpcore.adapters.opacus_sampler / keras_sampler), and what a shuffled
TF-Privacy / Keras run gets: Poisson numbers labelled estimates, and - when the batch size divides the dataset, so
that q = 1/T - the proven lower bound of its shuffled mechanism (gdpcore.kinds.samplers.shuffled_counterpart).

Independent truth: the counterpart's batches per epoch and epochs are the arithmetic of the run (N / B batches,
TF-Privacy's ceil(epochs / q) steps, Opacus's 1 / len(data_loader)); the cyclic run's guarantee is the closed form
sqrt(epochs)/sigma (Dong, Roth, Su 2022, Cor. 3.3)."""

from __future__ import annotations

import math

import pytest

import gdpcore
from gdpcore.adapters import SHUFFLE_REASON, from_opacus_history, from_tf_privacy, keras_sampler, opacus_sampler
from gdpcore.kinds.samplers import shuffled_counterpart


@pytest.mark.parametrize(("flag", "sampler"), [(True, "poisson"), (False, "shuffle")])
def test_opacus_poisson_sampling_flag(flag, sampler):
    assert opacus_sampler(flag) == sampler
    run = from_opacus_history([[1.0, 1 / 100, 300]], poisson_sampling=flag)
    assert run.sampler == sampler and run.is_estimate == (not flag)
    assert run.estimate_reason == (None if flag else SHUFFLE_REASON)


@pytest.mark.parametrize(("shuffle", "sampler"), [(True, "shuffle"), ("batch", "shuffle"), (False, "cyclic")])
def test_keras_shuffle_option(shuffle, sampler):
    assert keras_sampler(shuffle) == sampler


@pytest.mark.parametrize("bad", [1, 0, "yes", None, 2.0])
def test_bad_options_name_the_option(bad):
    with pytest.raises(ValueError, match="shuffle must be true, false or 'batch'"):
        keras_sampler(bad)
    with pytest.raises(ValueError, match="poisson_sampling must be true or false"):
        opacus_sampler(bad)


def test_shuffled_keras_run_with_a_dividing_batch_size_gets_its_lower_bound():
    # 60,000 examples in batches of 250: q = 1/240, TF-Privacy's steps = ceil(3 / q) = 720 = 3 epochs of 240.
    run = from_tf_privacy(
        number_of_examples=60000,
        batch_size=250,
        num_epochs=3,
        noise_multiplier=1.0,
        used_microbatching=False,
        sampler=keras_sampler(True),
    )
    assert run.estimate_reason == SHUFFLE_REASON
    counterpart = shuffled_counterpart(run.mechanism)
    assert counterpart is not None
    assert counterpart.to_dict()["kind"] == "shuffled_gaussian"
    assert (counterpart.steps_per_epoch, counterpart.epochs, counterpart.noise_multiplier) == (240, 3, 1.0)


def test_shuffled_keras_run_with_a_short_last_batch_has_no_lower_bound():
    # 60,000 / 256 is not whole: q = 256/60000 is not 1/T, and the lower bound's construction does not apply.
    run = from_tf_privacy(
        number_of_examples=60000, batch_size=256, num_epochs=3, noise_multiplier=1.0, sampler=keras_sampler(True)
    )
    assert run.estimate_reason == SHUFFLE_REASON and shuffled_counterpart(run.mechanism) is None


def test_unshuffled_keras_run_is_the_cyclic_closed_form():
    mech = gdpcore.mechanism_from_dict(
        {"kind": keras_sampler(False) + "_gaussian", "noise_multiplier": 2.0, "steps_per_epoch": 240, "epochs": 9}
    )
    assert gdpcore.analyze(mech).mu == pytest.approx(math.sqrt(9) / 2.0, rel=1e-9)
