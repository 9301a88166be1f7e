"""Grid spec validation: errors name file, key and value; nothing is written; no Prefect needed."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from flows.cli import main
from tasks.spec import load_grid_spec

GOOD = """\
name: dpsgd-cifar-map
mechanism: subsampled_gaussian
grid:
  noise_multiplier: {linspace: [0.6, 2.0, 8]}
  sampling_rate: {logspace: [0.001, 0.1, 6]}
  steps: [100, 1000, 10000]
deltas: [1.0e-5, 1.0e-6, 1.0e-9]
fprs: [1.0e-4, 1.0e-3, 1.0e-2, 0.1]
representations: [epsilon_delta, zcdp, gdp]
"""


def test_issue_example_spec_expands(write_spec):
    spec = load_grid_spec(write_spec(GOOD))
    axes = spec.axes()
    assert axes["noise_multiplier"] == [0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8, 2.0]
    assert axes["sampling_rate"][0] == 0.001 and axes["sampling_rate"][-1] == 0.1
    assert axes["sampling_rate"][1] == pytest.approx(0.001 * 100 ** (1 / 5), rel=1e-11)  # geometric, not exponents
    assert axes["steps"] == [100, 1000, 10000]
    assert spec.n_cells == 144
    cells = list(spec.iter_cells())
    assert cells[0] == {"kind": "subsampled_gaussian", "noise_multiplier": 0.6, "sampling_rate": 0.001, "steps": 100}
    assert cells[1]["steps"] == 1000  # first key outermost


def test_repo_specs_are_valid():
    root = Path(__file__).resolve().parents[2] / "data" / "specs"
    grids = [p for p in root.glob("*.yaml") if "calibration" not in p.name]
    assert grids
    for path in grids:
        load_grid_spec(path)


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("mechanism: subsampled_gaussian", "mechanism: subsampled_gausian", "mechanism = 'subsampled_gausian'"),
        ("{linspace: [0.6, 2.0, 8]}", "[1.0, -2.0]", "grid.noise_multiplier[1] = -2.0: noise_multiplier must be > 0"),
        ("[100, 1000, 10000]", "[]", "grid.steps = []"),
        ("[100, 1000, 10000]", "[100, 0.5]", "grid.steps[1] = 0.5"),
        ("steps:", "stepz:", "grid.stepz: not a parameter of subsampled_gaussian"),
        ("1.0e-9]", "1.5]", "deltas = [1e-05, 1e-06, 1.5]"),
        ("representations: [", "representations: [ecdp, ", "representations.0 = 'ecdp'"),
        ("name: dpsgd-cifar-map", "name: ../escape", "name = '../escape'"),
        ("fprs:", "fprz: [0.1]\nfprs:", "fprz = [0.1]: unknown key"),
    ],
)
def test_invalid_spec_names_file_key_and_value(write_spec, old, new, expected):
    assert old in GOOD
    path = write_spec(GOOD.replace(old, new, 1), "bad.yaml")
    with pytest.raises(ValueError) as info:
        load_grid_spec(path)
    message = str(info.value)
    assert message.startswith(f"{path}:"), message
    assert expected in message, message


def test_malformed_yaml_names_line(write_spec):
    path = write_spec(GOOD.replace("steps: [100, 1000, 10000]", "steps: [100,, 1000"), "bad.yaml")
    with pytest.raises(ValueError, match=r"bad\.yaml: line \d+, column \d+: malformed YAML"):
        load_grid_spec(path)


def test_yaml_is_loaded_safely(write_spec):
    path = write_spec("name: !!python/object/apply:os.system ['echo pwned']\n", "evil.yaml")
    with pytest.raises(ValueError, match="malformed YAML"):
        load_grid_spec(path)


def test_billion_cells_refused_without_force_and_without_allocating(write_spec):
    path = write_spec(GOOD.replace("[100, 1000, 10000]", "{linspace: [1, 1000000000, 1000000000]}"), "huge.yaml")
    started = time.perf_counter()
    with pytest.raises(ValueError, match=r"grid has 48,000,000,000 cells .* --force"):
        load_grid_spec(path)
    assert time.perf_counter() - started < 2.0  # sized from the declaration, nothing expanded


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("mechanism: subsampled_gaussian", "mechanism: composed"),
        ("{linspace: [0.6, 2.0, 8]}", "[-1]"),
        ("[100, 1000, 10000]", "[]"),
        ("[100, 1000, 10000]", "{linspace: [1, 1000000000, 1000000000]}"),
        ("steps: [100, 1000, 10000]", "steps: [100,, 1000"),
    ],
)
def test_cli_rejects_invalid_spec_before_any_work(write_spec, tmp_path, capsys, old, new):
    path = write_spec(GOOD.replace(old, new, 1), "bad.yaml")
    lake, report = tmp_path / "lake", tmp_path / "reports" / "r.duckdb"
    rc = main(["sweep", str(path), "--lake", str(lake), "--report", str(report), "--runner", "thread"])
    assert rc == 2
    err = capsys.readouterr().err
    assert err.startswith("gdp sweep: error: ") and str(path) in err
    assert not lake.exists() and not report.parent.exists()  # nothing written, not even directories
