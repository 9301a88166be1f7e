"""Hostile input to the one-point commands (``gdp calibrate / compare / convert / bayes-security``): huge values are
refused in one bounded line (exit 2), never echoed whole; a mechanism argument that is not one is an error, not a
traceback."""

from __future__ import annotations

import pytest

from flows.cli import main


def _run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize(
    "argv",
    [
        ["convert", "--mu", "x" * 100_000],
        ["compare", "gaussian --noise-multiplier " + "9" * 100_000, "laplace --scale 1"],
        ["compare", "x" * 100_000, "laplace --scale 1"],
        ["calibrate", "--steps", "1" * 100_000, "--sampling-rate", "0.1", "--target-mu", "1"],
    ],
)
def test_errors_echo_bounded_values(capsys, argv):
    rc, _, err = _run(capsys, *argv)
    assert rc == 2 and len(err) < 2000


@pytest.mark.parametrize(
    "mechanism",
    ["", "   ", "--spec", "--spec ''", "--spec {not: [yaml", "gaussian --noise-multiplier 1e-400", "gaussian --help"],
)
def test_a_mechanism_argument_that_is_not_one_exits_2(capsys, mechanism):
    rc, out, err = _run(capsys, "compare", mechanism, "laplace --scale 1")
    assert rc == 2 and out == "" and err.startswith("gdp compare: error: ") and len(err.strip().splitlines()) == 1
