"""Grid specs over any registered kind and over compositions: templates, paths, validation.

Prefect-free: every case loads a spec (or runs the CLI up to its validation) and checks the cells it expands to or
the error it raises (file, key and value named; exit 2; nothing written)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import ClassVar

import pytest

import gdpcore
from flows.cli import main
from gdpcore import kinds
from gdpcore._validation import Choice, Positive
from gdpcore.mechanisms import Mechanism, param
from tasks.plan import _sharing_key
from tasks.spec import load_grid_spec

COMPOSED = """\
name: dpsgd-plus-release
mechanism:
  kind: composed
  mechanisms:
    - {kind: subsampled_gaussian, sampling_rate: 0.05, steps: 50}
    - {kind: gaussian}
grid:
  mechanisms[0].noise_multiplier: [0.8, 1.2]
  mechanisms[1].noise_multiplier: [2.0, 4.0]
representations: [gdp, epsilon_delta]
"""

SELF_COMPOSED = """\
name: laplace-k
mechanism: {kind: self_composed, mechanism: {kind: laplace, sensitivity: 2.0}}
grid:
  count: {linspace: [1, 4, 3]}
  mechanism.scale: [1.0, 2.0]
"""


def test_composition_template_expands_in_grid_order(write_spec):
    spec = load_grid_spec(write_spec(COMPOSED))
    assert spec.kind == "composed" and spec.n_cells == 4
    cells = list(spec.iter_cells_with_axes())
    first, values = cells[0]
    assert values == (0.8, 2.0)
    assert first == {
        "kind": "composed",
        "mechanisms": [
            {"kind": "subsampled_gaussian", "sampling_rate": 0.05, "steps": 50, "noise_multiplier": 0.8},
            {"kind": "gaussian", "noise_multiplier": 2.0},
        ],
    }
    assert [v for _, v in cells] == [(0.8, 2.0), (0.8, 4.0), (1.2, 2.0), (1.2, 4.0)]  # first key outermost
    mechs = [gdpcore.mechanism_from_dict(c) for c, _ in cells]
    assert len({m.content_hash for m in mechs}) == 4
    assert mechs[3] == gdpcore.Composed(
        mechanisms=(
            gdpcore.SubsampledGaussian(noise_multiplier=1.2, sampling_rate=0.05, steps=50),
            gdpcore.Gaussian(noise_multiplier=4.0),
        )
    )
    # The template is not shared between cells (a deep copy per cell).
    assert cells[0][0]["mechanisms"][0]["noise_multiplier"] == 0.8


def test_integer_parameters_are_rounded_wherever_they_sit(write_spec):
    spec = load_grid_spec(write_spec(SELF_COMPOSED))
    assert spec.axes() == {"count": [1, 2, 4], "mechanism.scale": [1.0, 2.0]}  # linspace 1, 2.5, 4 -> integers
    cell = next(spec.iter_cells())
    assert cell == {
        "kind": "self_composed",
        "mechanism": {"kind": "laplace", "sensitivity": 2.0, "scale": 1.0},
        "count": 1,
    }


def test_flat_kind_specs_expand_exactly_as_before(write_spec):
    text = "name: lap\nmechanism: laplace\ngrid: {scale: [1.0, 2.0], sensitivity: 2.0}\n"
    cells = list(load_grid_spec(write_spec(text)).iter_cells())
    assert cells == [
        {"kind": "laplace", "scale": 1.0, "sensitivity": 2.0},
        {"kind": "laplace", "scale": 2.0, "sensitivity": 2.0},
    ]
    # A flat kind may also be given as a template with fixed parameters.
    text = "name: lap\nmechanism: {kind: laplace, sensitivity: 2.0}\ngrid: {scale: [1.0, 2.0]}\n"
    assert list(load_grid_spec(write_spec(text)).iter_cells()) == cells


def test_repo_composition_specs_are_valid():
    root = Path(__file__).resolve().parents[2] / "data" / "specs"
    kinds_seen = {load_grid_spec(root / f"{n}.yaml").kind for n in ("laplace-composition", "randomized-response")}
    assert kinds_seen == {"self_composed"}
    assert load_grid_spec(root / "dpsgd-plus-release.yaml").kind == "composed"


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("[0.8, 1.2]", "[0.8, -1.0]", "grid.mechanisms[0].noise_multiplier[1] = -1.0: noise_multiplier must be > 0"),
        ("mechanisms[1].noise_multiplier", "mechanisms[2].noise_multiplier", "mechanisms[2] does not exist"),
        ("mechanisms[1].noise_multiplier", "mechanisms.noise_multiplier", "pick one as mechanisms[i]"),
        (
            "mechanisms[1].noise_multiplier",
            "mechanisms[1].noise_multiplyer",
            "grid.mechanisms[1].noise_multiplyer: not a parameter of gaussian at mechanisms[1] (parameters:",
        ),
        ("mechanisms[1].noise_multiplier", "mechanisms[1]..x", "is not a parameter path"),
        (
            "mechanisms[1].noise_multiplier: [2.0, 4.0]",
            "mechanisms[0].steps: [10]",
            "grid.mechanisms[0].steps: also set in the mechanism template",
        ),
        (
            "mechanisms[1].noise_multiplier: [2.0, 4.0]",
            "mechanisms[0].sensitivity: [1.0]",
            "mechanism.mechanisms[1]: missing required parameter(s) noise_multiplier of gaussian",
        ),
        ("- {kind: gaussian}", "- {kind: gausian}", "mechanism.mechanisms[1].kind = 'gausian': must be one of"),
        ("kind: composed", "kind: compose", "mechanism.kind = 'compose'"),
        (
            "- {kind: gaussian}",
            "- {kind: gaussian, neighbouring: replace_one}",
            "mechanisms must share one neighbouring relation",
        ),
        ("representations: [gdp, epsilon_delta]", "plot: {x: a, y: b}", "plot: heat maps read the typed parameter"),
        (
            "sampling_rate: 0.05",
            "sampling_rate: 1.5",
            "mechanism.mechanisms[0].sampling_rate = 1.5: sampling_rate must be in (0, 1]",
        ),
        ("steps: 50}", "steps: 50, noise_multiplyer: 1}", "has unknown field(s) ['noise_multiplyer']"),
    ],
)
def test_invalid_composition_spec_names_file_key_and_value(write_spec, old, new, expected):
    assert old in COMPOSED
    path = write_spec(COMPOSED.replace(old, new, 1), "bad.yaml")
    with pytest.raises(ValueError) as info:
        load_grid_spec(path)
    message = str(info.value)
    assert message.startswith(f"{path}:"), message
    assert expected in message, message


def test_composed_kind_by_name_needs_a_template(write_spec):
    path = write_spec("name: c\nmechanism: self_composed\ngrid: {count: [2]}\n", "bad.yaml")
    with pytest.raises(
        ValueError,
        match=r"mechanism = 'self_composed': got 'self_composed': must be a mechanism template mapping .* flat kinds gaussian, ",
    ):
        load_grid_spec(path)


# -- kinds registered later are picked up; kinds that cannot be accounted are refused at validation ---------------------
@dataclasses.dataclass(frozen=True, kw_only=True)
class _SweepDummy(Mechanism):
    """A throw-away kind with a parameter no built-in kind has (a Gaussian under another name)."""

    kind: ClassVar[str] = "sweep_dummy"
    dummy_sigma: float = param("noise multiplier", Positive())
    neighbouring: str = param("relation", Choice(("add_remove",)), default="add_remove")


def _dummy_spec(**overrides) -> kinds.KindSpec:
    gauss = kinds.get("gaussian")
    hooks = {h: gauss.hook(h) for h in kinds.HOOKS}
    hooks.update(
        draw=lambda rng: _SweepDummy(dummy_sigma=1.0),
        pld=lambda m, *, step, pessimistic: gauss.pld(
            gdpcore.Gaussian(noise_multiplier=m.dummy_sigma), step=step, pessimistic=pessimistic
        ),
        exact_mu=lambda m: 1.0 / m.dummy_sigma,
    )
    hooks.update(overrides)
    return kinds.KindSpec(cls=_SweepDummy, summary="test kind", **hooks)


@pytest.fixture
def dummy_kind():
    kinds.register(_dummy_spec())
    try:
        yield
    finally:
        kinds.unregister("sweep_dummy")


def test_a_kind_registered_later_is_swept_with_no_edit(write_spec, dummy_kind):
    flat = load_grid_spec(write_spec("name: d\nmechanism: sweep_dummy\ngrid: {dummy_sigma: [1.0, 2.0]}\n"))
    assert [gdpcore.mechanism_from_dict(c).dummy_sigma for c in flat.iter_cells()] == [1.0, 2.0]
    nested = load_grid_spec(
        write_spec(
            "name: d2\nmechanism: {kind: composed, mechanisms: [{kind: sweep_dummy}, {kind: gaussian, "
            "noise_multiplier: 3.0}]}\ngrid: {'mechanisms[0].dummy_sigma': [1.0, 2.0]}\n"
        )
    )
    m = gdpcore.mechanism_from_dict(next(nested.iter_cells()))
    assert m.mechanisms[0].dummy_sigma == 1.0
    assert kinds.exact_mu(m) == pytest.approx((1.0 + 1.0 / 9.0) ** 0.5)  # exact: sqrt(1/1^2 + 1/3^2)


def test_a_kind_that_cannot_be_accounted_is_refused_at_validation(write_spec, tmp_path, capsys, monkeypatch):
    # Forced into the registry past register() (which refuses an unsupported required hook): a kind whose zCDP
    # parameter is unsupported cannot give the zcdp regret a spec asks for.
    monkeypatch.setitem(kinds._REGISTRY, "sweep_dummy", _dummy_spec(rho=kinds.Unsupported("no zCDP for this kind")))
    text = (
        "name: d3\nmechanism: {kind: self_composed, mechanism: {kind: sweep_dummy}}\n"
        "grid: {count: [1, 2], mechanism.dummy_sigma: [1.0]}\nrepresentations: [gdp, zcdp]\n"
    )
    path = write_spec(text, "bad.yaml")
    with pytest.raises(ValueError) as info:
        load_grid_spec(path)
    message = str(info.value)
    assert message.startswith(f"{path}: invalid spec: mechanism = 'self_composed': cannot be accounted"), message
    assert "regret.zcdp needs rho, which sweep_dummy does not support (no zCDP for this kind)" in message
    # Without the zcdp representation the same spec is fine.
    assert load_grid_spec(write_spec(text.replace(", zcdp]", "]"), "ok.yaml")).n_cells == 2
    lake, report = tmp_path / "lake", tmp_path / "reports" / "r.duckdb"
    rc = main(["sweep", str(path), "--lake", str(lake), "--report", str(report), "--runner", "thread"])
    assert rc == 2
    err = capsys.readouterr().err
    assert err.startswith("gdp sweep: error: ") and "cannot be accounted" in err
    assert not lake.exists() and not report.parent.exists()


def test_cli_rejects_invalid_composition_spec_before_any_work(write_spec, tmp_path, capsys):
    path = write_spec(COMPOSED.replace("[0.8, 1.2]", "[0.8, 0.0]"), "bad.yaml")
    lake, report = tmp_path / "lake", tmp_path / "reports" / "r.duckdb"
    rc = main(["sweep", str(path), "--lake", str(lake), "--report", str(report), "--runner", "thread"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "grid.mechanisms[0].noise_multiplier[1] = 0.0" in err and str(path) in err
    assert not lake.exists() and not report.parent.exists()


def test_sharing_key_groups_compositions_that_differ_only_in_step_counts():
    a = gdpcore.Composed(
        mechanisms=(
            gdpcore.SubsampledGaussian(noise_multiplier=1.0, sampling_rate=0.01, steps=100),
            gdpcore.SubsampledGaussian(noise_multiplier=2.0, sampling_rate=0.1, steps=10),
        )
    )
    b = dataclasses.replace(
        a, mechanisms=(dataclasses.replace(a.mechanisms[0], steps=300), a.mechanisms[1])
    )  # same phases, more steps
    ka, kb = _sharing_key(a.to_json()), _sharing_key(b.to_json())
    assert ka[0] == kb[0] and (ka[1], kb[1]) == (110.0, 310.0)


# -- hostile templates: rejected with a ValueError naming the file, or fully valid ---------------------------------------
_BASE_DOC = {
    "name": "fuzz",
    "mechanism": {
        "kind": "composed",
        "mechanisms": [{"kind": "subsampled_gaussian", "sampling_rate": 0.05, "steps": 5}, {"kind": "gaussian"}],
    },
    "grid": {"mechanisms[0].noise_multiplier": [0.8, 1.2], "mechanisms[1].noise_multiplier": [2.0]},
}
_PATHS = [
    ("mechanism",),
    ("mechanism", "kind"),
    ("mechanism", "mechanisms"),
    ("mechanism", "mechanisms", 0),
    ("mechanism", "mechanisms", 0, "kind"),
    ("mechanism", "mechanisms", 0, "steps"),
    ("mechanism", "mechanisms", 1, "neighbouring"),
    ("mechanism", "extra"),
    ("grid",),
    ("grid", "mechanisms[0].noise_multiplier"),
    ("grid", "mechanisms[1].noise_multiplier", 0),
    ("grid", "count"),
    ("grid", "mechanisms[5].x"),
    ("grid", "mechanism.scale"),
]


def _set(doc, path, value):
    if not path:
        return value
    head, *rest = path
    if isinstance(doc, dict):
        doc[head] = _set(doc.get(head, {}), tuple(rest), value)
    elif isinstance(doc, list) and isinstance(head, int) and head < len(doc):
        doc[head] = _set(doc[head], tuple(rest), value)
    return doc


def test_mutated_templates_are_rejected_clearly_or_fully_valid(tmp_path):
    import copy

    import yaml
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(10**20), 10**20),
        st.floats(allow_nan=True, allow_infinity=True),
        st.sampled_from(["composed", "self_composed", "laplace", "gaussian", "replace_one", "", "kind", 0.5, 3]),
        st.text(max_size=8),
    )
    values = st.recursive(
        scalars,
        lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
        max_leaves=6,
    )

    @settings(
        max_examples=min(150, settings.default.max_examples),
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(mutations=st.lists(st.tuples(st.sampled_from(_PATHS), values), min_size=1, max_size=3))
    def check(mutations):
        doc = copy.deepcopy(_BASE_DOC)
        for p, v in mutations:
            doc = _set(doc, p, v)
        path = tmp_path / "spec.yaml"
        path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
        try:
            spec = load_grid_spec(path)
        except ValueError as exc:
            assert str(exc).startswith(f"{path}:") and len(str(exc)) < 20_000, str(exc)[:500]
            return
        for cell in spec.iter_cells():  # accepted: every cell is a valid mechanism
            assert gdpcore.mechanism_from_dict(cell).content_hash

    check()
