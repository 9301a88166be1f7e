"""Huge values in user input give short errors that name the field.

A 30 MB string used to come back on stderr whole. Every place a value is echoed formats it with
``gdpcore._validation.bounded_repr`` (keys in a field path with ``tasks.safe_yaml.shown_key``), and the one line
``gdp`` prints is cut to ``tasks.safe_yaml.MAX_MESSAGE_CHARS`` as a last guard. Checked on each surface: a grid spec
file, a registry manifest, a command-line argument. A YAML file is read only up to 2 MB (``tasks.safe_yaml``), so a
30 MB file is refused by size; the values inside files are as large as that limit lets them be (the manifests' are
200 kB: each manifest is validated in a child process with a 30 s deadline, and PyYAML scans ~100 kB/s on a loaded
2-core machine).
"""

from __future__ import annotations

import contextlib
import io

import pytest
import yaml

from flows.cli import main

HUGE = "y" * 30_000_000  # the size of the reported reproduction
BIG = "x" * 500_000  # a spec file holds up to 2 MB; PyYAML scans ~100 kB/s on the loaded 2 cores
MANIFEST_BIG = "x" * 200_000
SHORT = 1500  # an error line longer than this is not "short"


def _gdp(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(argv)
    return rc, err.getvalue()


def _assert_short_and_named(rc: int, err: str, *fields: str) -> None:
    assert rc == 2, err[:2000]
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err[:2000]
    assert len(err) < SHORT, f"{len(err):,} chars: {err[:300]}"
    assert "x" * 1000 not in err and "y" * 1000 not in err
    for field in fields:
        assert field in err, (field, err[:SHORT])


# -- a grid spec file ---------------------------------------------------------------------------------------------------

_SPEC = {"name": "s", "mechanism": "gaussian", "grid": {"noise_multiplier": [1.0, 2.0]}}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"name": BIG}, "name = "),
        ({"mechanism": BIG}, "mechanism = "),
        ({"mechanism": {"kind": BIG}}, "mechanism.kind = "),
        ({"grid": {BIG: [1.0]}}, "grid."),
        ({"grid": {"noise_multiplier": [BIG]}}, "grid.noise_multiplier[0] = "),
        ({"deltas": [BIG]}, "deltas.0 = "),
        ({"representations": [BIG]}, "representations.0 = "),
        ({BIG: 1}, "unknown key"),
        ({"max_cells": BIG}, "max_cells = "),
    ],
)
def test_a_huge_value_in_a_spec_file(tmp_path, change, field):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({**_SPEC, **change}, width=10**9))
    rc, err = _gdp(["sweep", str(path), "--lake", str(tmp_path / "lake"), "--report", str(tmp_path / "r.duckdb")])
    _assert_short_and_named(rc, err, str(path), field)
    assert not (tmp_path / "lake").exists()  # nothing written


def test_a_30_mb_spec_file_is_refused_by_size(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(f"name: {HUGE}\n")
    rc, err = _gdp(["sweep", str(path), "--lake", str(tmp_path / "lake"), "--report", str(tmp_path / "r.duckdb")])
    _assert_short_and_named(rc, err, str(path), "larger than")


def test_a_huge_target_key_in_a_calibration_spec(tmp_path):
    path = tmp_path / "cal.yaml"
    spec = {"name": "c", "grid": {"sampling_rate": [0.01], "steps": [100]}, "target": {BIG: 0.1}}
    path.write_text(yaml.safe_dump(spec, width=10**9))
    rc, err = _gdp(["calibration-sweep", str(path), "--lake", str(tmp_path / "l"), "--report", str(tmp_path / "r")])
    _assert_short_and_named(rc, err, "target.")


# -- a registry manifest ------------------------------------------------------------------------------------------------

_MANIFEST = {
    "name": "m",
    "version": 1,
    "dataset_size": 1000,
    "delta": 1e-5,
    "mechanism": {"dpsgd": {"noise_multiplier": 1.0, "sampling_rate": 0.02, "steps": 100}},
}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"name": MANIFEST_BIG}, "models[0].name: "),
        ({"delta": MANIFEST_BIG}, "models[0].delta: "),
        ({MANIFEST_BIG: 1}, "models[0].'xxx"),
        ({"mechanism": {MANIFEST_BIG: {}}}, "models[0].mechanism"),
        ({"evidence": {"scores": MANIFEST_BIG}}, "models[0].evidence.scores"),
        ({"version": 10**4000}, "models[0].version: "),
    ],
)
def test_a_huge_value_in_a_manifest(tmp_path, change, field):
    from tasks.registry import ManifestError, load_manifest_file

    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump({"models": [{**_MANIFEST, **change}]}, width=10**9))
    with pytest.raises(ManifestError) as info:
        load_manifest_file(path)
    text = str(info.value)
    assert len(text) < SHORT and "x" * 1000 not in text, text[:300]
    assert text.startswith(f"{path}: ") and field in text, text[:SHORT]


def test_a_30_mb_manifest_is_refused_by_size(tmp_path):
    from tasks.registry import ManifestError, load_manifest_file

    path = tmp_path / "m.yaml"
    path.write_text(f"name: {HUGE}\n")
    with pytest.raises(ManifestError, match="larger than") as info:
        load_manifest_file(path)
    assert len(str(info.value)) < SHORT


@pytest.mark.subprocess  # gdp audit validates each manifest in a child process
def test_gdp_audit_of_a_manifest_with_a_huge_key(tmp_path):
    registry = tmp_path / "registry"
    registry.mkdir()
    (registry / "a.yaml").write_text(yaml.safe_dump({"models": [{**_MANIFEST, MANIFEST_BIG: 1}]}, width=10**9))
    rc, err = _gdp(["audit", str(registry), "--lake", str(tmp_path / "lake"), "--report", str(tmp_path / "r.duckdb")])
    _assert_short_and_named(rc, err, "a.yaml: models[0].'xxx")


# -- a command-line argument --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["analyze", "gaussian", "--noise-multiplier", HUGE], "--noise-multiplier"),
        (["analyze", HUGE], "KIND"),
        (["analyze", "gaussian", "--noise-multiplier", "1", "--claim", HUGE], "--claim"),
        (["analyze", "gaussian", "--noise-multiplier", "1", "--delta", HUGE], "--delta"),
        (["analyze", "--spec", HUGE], "--spec"),
        (["analyze", "--spec", '{"kind": "' + "y" * 1_000_000 + '"}'], "--spec: mechanism.kind"),
        (["analyze", "--opacus", HUGE], "--opacus: File name too long"),
        (["sweep", HUGE], "cannot read"),
        (["sweep", "data/specs/demo.yaml", "--workers", HUGE], "--workers"),
        (["sweep", "data/specs/demo.yaml", "--runner", "dask", "--dask-address", HUGE], "--dask-address"),
        (["audit", HUGE], "registry"),
        (["audit", "--evidence-level", HUGE], "--evidence-level"),
        (["card", "m:" + HUGE], "VERSION"),
        (["sql", "SELECT 1", "--report", HUGE], "File name too long"),
        (["evidence", "--confidence", HUGE], "--confidence"),
        (["evidence", "--scores", HUGE, "gaussian", "--noise-multiplier", "1"], "--scores: File name too long"),
        (["plot", HUGE], "argument what"),
    ],
    ids=lambda v: v[0] if isinstance(v, list) else None,
)
def test_a_30_mb_argument(argv, field):
    rc, err = _gdp(argv)
    _assert_short_and_named(rc, err, field)
