"""Sweeping the batch samplers: a grid key ``kind`` that puts each (noise, batches per epoch, epochs) cell under
every listed sampler kind (tasks.spec, KIND_AXIS), chunked one kind per lake partition (tasks.plan), and the sample
spec data/specs/samplers.yaml.

Prefect-free: specs are loaded and planned; the numbers of the sample spec's cells are checked against the
closed form of the deterministic-batch guarantee (Dong, Roth, Su 2022, Cor. 3.3: E epochs of a Gaussian of
sensitivity 1 and noise sigma compose to exactly sqrt(E)/sigma-GDP)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import gdpcore
from flows.cli import main
from tasks.plan import build_plan
from tasks.spec import load_grid_spec

ROOT = Path(__file__).resolve().parents[2]

SAMPLERS = """\
name: sampler-compare
mechanism: shuffled_gaussian
grid:
  kind: [shuffled_gaussian, cyclic_gaussian, balls_in_bins_gaussian]
  noise_multiplier: [1.0, 2.0]
  steps_per_epoch: [10]
  epochs: [1, 3]
"""


def test_kind_axis_puts_every_cell_under_every_sampler(write_spec):
    spec = load_grid_spec(write_spec(SAMPLERS))
    cells = list(spec.iter_cells_with_axes())
    assert spec.n_cells == len(cells) == 12
    kinds = [c["kind"] for c, _ in cells]
    assert kinds == ["shuffled_gaussian"] * 4 + ["cyclic_gaussian"] * 4 + ["balls_in_bins_gaussian"] * 4
    params = {(c["noise_multiplier"], c["steps_per_epoch"], c["epochs"]) for c, _ in cells}
    assert params == {(s, 10, e) for s in (1.0, 2.0) for e in (1, 3)}
    # The same parameters under each kind: the comparison is at equal (sigma, batches per epoch, epochs).
    by_kind: dict[str, set[tuple[float, int, int]]] = {}
    for c, _ in cells:
        by_kind.setdefault(c["kind"], set()).add((c["noise_multiplier"], c["steps_per_epoch"], c["epochs"]))
    assert all(v == params for v in by_kind.values())
    assert cells[0][1] == ("shuffled_gaussian", 1.0, 10, 1)  # the kind is an axis value (the report's axes view)
    assert len({gdpcore.mechanism_from_dict(c).content_hash for c, _ in cells}) == 12


def test_plan_cuts_one_kind_per_chunk(write_spec, tmp_path):
    spec = load_grid_spec(write_spec(SAMPLERS.replace("name: sampler-compare", "name: s\nchunk_size: 3")))
    plan = build_plan(spec, tmp_path / "lake", workers=1)
    assert sum(len(c.mechanisms) for c in plan.chunks) == 12
    for chunk in plan.chunks:
        assert {json.loads(m)["kind"] for m in chunk.mechanisms} == {chunk.kind}
    assert {c.kind for c in plan.chunks} == {"shuffled_gaussian", "cyclic_gaussian", "balls_in_bins_gaussian"}


@pytest.mark.parametrize(
    ("kinds", "expected"),
    [
        ("[cyclic_gaussian, gaussian]", "grid.kind[1] = 'gaussian': its parameters"),  # other parameters
        ("[cyclic_gaussian, nope]", "grid.kind[1] = 'nope': must be one of"),
        ("[cyclic_gaussian, cyclic_gaussian]", "a kind is listed twice"),
        ("[cyclic_gaussian, 3]", "grid.kind[1] = 3: must be one of"),
    ],
    ids=["other-parameters", "unknown", "twice", "number"],
)
def test_kind_axis_errors_name_the_key_and_value(write_spec, kinds, expected):
    path = write_spec(SAMPLERS.replace("[shuffled_gaussian, cyclic_gaussian, balls_in_bins_gaussian]", kinds))
    with pytest.raises(ValueError) as info:
        load_grid_spec(path)
    assert expected in str(info.value) and str(path) in str(info.value)


def test_kind_axis_needs_a_flat_kind_as_mechanism(write_spec):
    text = """\
    name: x
    mechanism: {kind: self_composed, count: 2, mechanism: {kind: gaussian}}
    grid:
      kind: [self_composed]
      mechanism.noise_multiplier: [1.0]
    """
    with pytest.raises(ValueError, match="sweeping the kind needs a flat kind's name as mechanism"):
        load_grid_spec(write_spec(text))


def test_cli_rejects_a_bad_kind_axis_before_any_work(write_spec, tmp_path, capsys):
    path = write_spec(SAMPLERS.replace("balls_in_bins_gaussian]", "subsampled_gaussian]"), "bad.yaml")
    lake, report = tmp_path / "lake", tmp_path / "reports" / "r.duckdb"
    rc = main(["sweep", str(path), "--lake", str(lake), "--report", str(report), "--runner", "thread"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "grid.kind[2] = 'subsampled_gaussian'" in err and "Traceback" not in err
    assert not lake.exists() and not report.parent.exists()


def test_sample_spec_compares_the_samplers_and_cyclic_cells_are_the_closed_form():
    spec = load_grid_spec(ROOT / "data" / "specs" / "samplers.yaml")
    cells = [gdpcore.mechanism_from_dict(c) for c in spec.iter_cells()]
    kinds = {m.kind for m in cells}
    assert kinds == {"shuffled_gaussian", "cyclic_gaussian", "balls_in_bins_gaussian"}
    cyclic = [m for m in cells if m.kind == "cyclic_gaussian"][:2]
    for m in cyclic:
        rep = gdpcore.analyze(m)
        assert rep.mu == pytest.approx(math.sqrt(m.epochs) / m.noise_multiplier, rel=1e-9)


@pytest.mark.prefect
def test_sweep_of_the_samplers_stores_each_kind_with_both_ends(prefect_server, write_spec, tmp_path, monkeypatch):
    """Swept by `gdp sweep` (thread runner): every cell's row names its sampler (mechanism_kind, its chunk's
    partition), the upper end is the closed-form deterministic-batch guarantee sqrt(E)/sigma for cyclic (exact) and
    shuffled (upper) and at most it for balls-in-bins (upper), each lower end at most its upper end; the kind axis is
    in the report's axes view as text."""
    import duckdb
    import prefect.settings

    monkeypatch.setenv("PREFECT_API_URL", str(prefect.settings.PREFECT_API_URL.value()))
    text = SAMPLERS.replace("[1.0, 2.0]", "[1.5]").replace("[1, 3]", "[2]")
    path = write_spec(text)
    lake, report = tmp_path / "lake", tmp_path / "reports" / "privacy.duckdb"
    assert main(["sweep", str(path), "--lake", str(lake), "--report", str(report), "--runner", "thread"]) == 0
    partitions = {p.name for p in (lake / "staging" / "spec=sampler-compare").iterdir()}
    assert partitions == {f"mechanism={k}" for k in ("shuffled_gaussian", "cyclic_gaussian", "balls_in_bins_gaussian")}
    con = duckdb.connect(str(report), read_only=True)
    try:
        con.execute(f"SET file_search_path = '{report.parent}'")
        rows = con.execute(
            "SELECT c.mechanism_kind, c.mu, c.mu_bound, c.mu_lower, a.value_text FROM cells c JOIN axes a "
            "USING (spec, cell_id) WHERE c.spec = 'sampler-compare' AND a.axis = 'kind'"
        ).fetchall()
    finally:
        con.close()
    closed_form = math.sqrt(2) / 1.5
    assert {r[0] for r in rows} == {"shuffled_gaussian", "cyclic_gaussian", "balls_in_bins_gaussian"}
    for kind, mu, bound, mu_lower, axis_text in rows:
        assert json.loads(axis_text) == kind
        if kind == "balls_in_bins_gaussian":  # at most the guarantee that dominates it (amplification may lower it)
            assert mu <= closed_form * (1 + 1e-6)
        else:
            assert mu == pytest.approx(closed_form, rel=1e-6)
        assert bound == ("exact" if kind == "cyclic_gaussian" else "upper")
        assert mu_lower <= mu * (1 + 1e-9)
