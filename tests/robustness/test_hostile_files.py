"""Hostile specs and manifests found by an adversarial probe, each reproduced and now refused clearly.

1 an 807-byte alias bomb inside ``mechanism.gdpcore``; 2 a binary manifest; 3 a name ending in a newline;
8 values accepted and then failing inside the accountant; 9 lax YAML (duplicate keys, '7' and 'yes', YAML 1.1 floats,
errors naming the wrong field or no file). The safe loader itself is checked against the YAML 1.2 core schema.
"""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import pytest

from tasks.registry import ManifestError, load_manifest_file, load_registry
from tasks.safe_yaml import MAX_BYTES, YamlError, load_yaml_file, load_yaml_text
from tasks.spec import load_grid_spec
from tests.robustness._child import load_in_child

VALID = """\
name: valid-model
version: 1
dataset_size: 10000
delta: 1.0e-5
mechanism:
  dpsgd: {noise_multiplier: 1.0, batch_size: 100, steps: 50}
"""

SPEC = """\
name: t
mechanism: subsampled_gaussian
grid:
  noise_multiplier: [1.0]
  sampling_rate: [0.01]
  steps: [10]
"""


def alias_bomb_manifest() -> str:
    """The probe's 807-byte manifest: nine levels of ``&lN {kind: composed, mechanisms: [*lN-1 x 8]}``."""
    lines = ["x0: &l0 {kind: gaussian, noise_multiplier: 1.0}"]
    for n in range(1, 10):
        lines.append(f"x{n}: &l{n} {{kind: composed, mechanisms: [{', '.join([f'*l{n - 1}'] * 8)}]}}")
    body = VALID.replace("name: valid-model", "name: bomb").replace(
        "  dpsgd: {noise_multiplier: 1.0, batch_size: 100, steps: 50}", "  gdpcore: *l9"
    )
    # anchors must come first; the x-keys are unknown top-level keys too, but the loader must refuse before that
    return "\n".join(lines) + "\n" + body


def write(folder: Path, name: str, content: str | bytes) -> Path:
    path = folder / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


# -- 1: alias bomb ------------------------------------------------------------------------------------------------------
def test_alias_bomb_manifest_is_refused_in_well_under_a_second(tmp_path):
    path = write(tmp_path, "bomb.yaml", alias_bomb_manifest())
    assert len(path.read_bytes()) < 1000
    started = time.perf_counter()
    outcome = load_in_child("tasks.registry:load_manifest_file", str(path), timeout=60)
    assert outcome.startswith(f"ValueError: {path}: not valid YAML"), outcome
    assert "alias" in outcome, outcome
    assert time.perf_counter() - started < 30  # the spawned child's imports included; the refusal itself is ms
    started = time.perf_counter()
    with pytest.raises(ManifestError):
        load_manifest_file(path)
    assert time.perf_counter() - started < 1.0


def test_alias_bomb_spec_is_refused_by_the_same_loader(tmp_path):
    lines = ["a0: &a0 [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    path = write(tmp_path, "spec.yaml", "\n".join(lines) + "\n" + SPEC)
    with pytest.raises(ValueError, match=r"spec\.yaml: line \d+, column \d+: refused YAML: more than .* alias"):
        load_grid_spec(path)


# -- 2: binary manifest --------------------------------------------------------------------------------------------------
def test_binary_manifest_fails_alone_naming_the_file(tmp_path):
    write(tmp_path, "a-valid.yaml", VALID)
    binary = write(tmp_path, "b-binary.yaml", bytes(range(256)) * 4)
    good, errors = load_registry(tmp_path)
    assert [m.key for m in good] == ["valid-model:1"]
    assert len(errors) == 1 and errors[0].file == str(binary)
    assert "not UTF-8" in str(errors[0]) and "offset 128" in str(errors[0])


def test_binary_spec_names_the_file(tmp_path):
    path = write(tmp_path, "spec.yaml", b"name: t\n\xff\xfe\x00garbage")
    with pytest.raises(ValueError, match=rf"^{path}: not UTF-8 text \(byte 0xff at offset 8\)"):
        load_grid_spec(path)


def test_oversized_yaml_is_refused_before_parsing(tmp_path):
    path = write(tmp_path, "big.yaml", "name: t\nfprs: [" + "0.1, " * (MAX_BYTES // 5 + 10) + "0.1]\n")
    started = time.perf_counter()
    with pytest.raises(ValueError, match=rf"^{path}: refused: larger than {MAX_BYTES:,} bytes"):
        load_grid_spec(path)
    assert time.perf_counter() - started < 0.5


# -- 3: names ------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ['"okname\\n"', '"ok/../../x"', '"..."', '"a b"', '"-x"', '"x\\u2028"'])
def test_manifest_names_are_full_matched(tmp_path, name):
    path = write(tmp_path, "m.yaml", VALID.replace("name: valid-model", f"name: {name}"))
    with pytest.raises(ManifestError) as info:
        load_manifest_file(path)
    assert info.value.field == "name", str(info.value)


def test_spec_name_with_trailing_newline_is_refused(tmp_path):
    path = write(tmp_path, "spec.yaml", SPEC.replace("name: t", 'name: "okname\\n"'))
    with pytest.raises(ValueError, match=r"invalid spec: name = 'okname\\n'"):
        load_grid_spec(path)


@pytest.mark.parametrize("part", ["..", "../x", "a/b", "ok\n", ".hidden", "", "a\x00b"])
def test_safe_join_refuses_non_components(tmp_path, part):
    from tasks.lake import safe_join

    with pytest.raises(ValueError, match="refusing"):
        safe_join(tmp_path, "registry", part)


def test_safe_join_refuses_a_symlink_out_of_the_root(tmp_path):
    from tasks.lake import safe_join

    (tmp_path / "root").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "root" / "model").symlink_to(tmp_path / "outside")
    with pytest.raises(ValueError, match="resolves outside"):
        safe_join(tmp_path / "root", "model", "v1")


def test_card_of_a_crafted_row_is_not_written_outside_its_folder(tmp_path):
    """A crafted lake row whose model is '../../x' must not place card.md / curve.png / model_card.yaml elsewhere."""
    from tasks.cards import write_card

    out = tmp_path / "a" / "b" / "cards"
    out.mkdir(parents=True)
    for model in ("../../x", "/tmp/x", "x\n", "..", 7):
        with pytest.raises(ValueError, match="not a model version"):
            write_card({"model": model, "version": 1, "audit_key": "k"}, out)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == ["a", "a/b", "a/b/cards"]


# -- 9: lax YAML and wrong fields -----------------------------------------------------------------------------------------
def test_duplicate_keys_are_refused_in_specs_and_manifests(tmp_path):
    spec = write(tmp_path, "spec.yaml", SPEC + "name: u\n")
    with pytest.raises(ValueError, match=r"spec\.yaml: line 7, column 1: malformed YAML: duplicate key 'name' "):
        load_grid_spec(spec)
    manifest = write(tmp_path, "m.yaml", VALID.replace("version: 1", "version: 1\nversion: 2"))
    with pytest.raises(ManifestError, match=r"m\.yaml: not valid YAML \(line 3, column 1: .*duplicate key 'version'"):
        load_manifest_file(manifest)


def test_merge_keys_still_share_fields_between_versions(tmp_path):
    text = "models:\n  - &base\n" + textwrap.indent(VALID, "    ") + "  - <<: *base\n    version: 2\n"
    got = load_manifest_file(write(tmp_path, "m.yaml", text))
    assert [m.key for m in got] == ["valid-model:1", "valid-model:2"]


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("version: 1", "version: '7'", "version"),
        ("version: 1", "version: 7.0", "version"),
        ("delta: 1.0e-5", "delta: 1.0e-5\nproduction: 'yes'", "production"),
        ("delta: 1.0e-5", "delta: 1.0e-5\nproduction: yes", "production"),  # YAML 1.2: 'yes' is a string
        ("dataset_size: 10000", "dataset_size: '10000'", "dataset_size"),
        ("noise_multiplier: 1.0", "noise_multiplier: '1.0'", "mechanism.dpsgd.noise_multiplier"),
        ("noise_multiplier: 1.0", "noise_multiplier: true", "mechanism.dpsgd.noise_multiplier"),
    ],
)
def test_manifest_scalars_are_strict(tmp_path, old, new, field):
    path = write(tmp_path, "m.yaml", VALID.replace(old, new))
    with pytest.raises(ManifestError) as info:
        load_manifest_file(path)
    assert info.value.field == field, str(info.value)


def test_yaml_12_numbers(tmp_path):
    data = load_yaml_text("[1e-5, 1E-5, .5, 1.0e-5, -2e3, 7, 017, 0o17, 0x1f, yes, on, true, 2026-01-01, 1_000]", "t")
    assert data == [1e-5, 1e-5, 0.5, 1e-5, -2000.0, 7, 17, 15, 31, "yes", "on", True, "2026-01-01", "1_000"]
    path = write(tmp_path, "spec.yaml", SPEC + "deltas: [1e-5, 1E-6]\nfprs: [.5, 1e-3]\n")
    spec = load_grid_spec(path)
    assert spec.deltas == [1e-5, 1e-6] and spec.fprs == [0.5, 1e-3]


def test_wrong_axis_is_named(tmp_path):
    """``sampling_rate: [1.5]`` was reported as ``grid.noise_multiplier[0] = 1.0``."""
    path = write(tmp_path, "spec.yaml", SPEC.replace("sampling_rate: [0.01]", "sampling_rate: [1.5]"))
    with pytest.raises(ValueError, match=r"grid\.sampling_rate\[0\] = 1\.5: sampling_rate must be in \(0, 1\]"):
        load_grid_spec(path)


def test_negative_logspace_names_the_file(tmp_path):
    path = write(tmp_path, "spec.yaml", SPEC.replace("sampling_rate: [0.01]", "sampling_rate: {logspace: [-1, 1, 3]}"))
    with pytest.raises(ValueError, match=rf"^{path}: invalid spec: grid\.sampling_rate\.logspace needs start and stop"):
        load_grid_spec(path)


def test_unreadable_yaml_names_the_file(tmp_path):
    with pytest.raises(YamlError, match=rf"^{tmp_path / 'missing.yaml'}: cannot read"):
        load_yaml_file(tmp_path / "missing.yaml")


def test_recursive_and_deep_yaml_are_refused():
    with pytest.raises(YamlError, match="recursive alias"):
        load_yaml_text("a: &a [1, *a]\n", "t")
    with pytest.raises(YamlError, match="nested more than 64 levels"):
        load_yaml_text("[" * 200 + "]" * 200, "t")
    chain = "\n".join([f"a{i}: &a{i} [*a{i - 1}]" if i else "a0: &a0 [1]" for i in range(100)])
    with pytest.raises(YamlError, match="once aliases are expanded"):
        load_yaml_text(chain, "t")


# -- 8: values accepted, then failing in the accountant ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("steps: 50", "steps: 1e23", "mechanism.dpsgd.steps"),
        ("steps: 50", "steps: 100000000000000000000000", "mechanism.dpsgd.steps"),
        ("steps: 50", "epochs: 1e300", "mechanism.dpsgd.epochs"),
        ("delta: 1.0e-5", "delta: 1.0e-5\naccounting: {discretization: 1e-300}", "accounting.discretization"),
        ("dataset_size: 10000", "dataset_size: 100000000000000000000000", "dataset_size"),
    ],
)
def test_manifest_overflowing_values_name_the_field(tmp_path, old, new, field):
    path = write(tmp_path, "m.yaml", VALID.replace(old, new))
    with pytest.raises(ManifestError) as info:
        load_manifest_file(path)
    assert info.value.field == field, str(info.value)


@pytest.mark.slow  # 23 s at load 8-12 on 2 cores
def test_manifest_composition_size_is_bounded(tmp_path):
    inner = ", ".join(["{kind: gaussian, noise_multiplier: 1.0}"] * 20_001)
    text = VALID.replace(
        "  dpsgd: {noise_multiplier: 1.0, batch_size: 100, steps: 50}",
        f"  gdpcore: {{kind: composed, mechanisms: [{inner}]}}",
    )
    with pytest.raises(ManifestError, match="mechanisms in one composition") as info:
        load_manifest_file(write(tmp_path, "m.yaml", text))
    assert info.value.field == "mechanism.gdpcore"


@pytest.mark.parametrize("value", ["1e23", "1.0e+23", "100000000000000000000000", "1000000001"])
def test_spec_integer_parameters_are_bounded(tmp_path, value):
    """``steps: [1e23]`` passed validation, then the chunk failed with OverflowError and left no status row."""
    path = write(tmp_path, "spec.yaml", SPEC.replace("steps: [10]", f"steps: [{value}]"))
    with pytest.raises(ValueError, match=r"grid\.steps\[0\] = .*: must be at most 1,000,000,000"):
        load_grid_spec(path)


def test_spec_discretization_is_bounded(tmp_path):
    path = write(tmp_path, "spec.yaml", SPEC + "discretization: 1e-300\n")
    with pytest.raises(ValueError, match=r"discretization = 1e-300"):
        load_grid_spec(path)


def test_every_cell_of_a_chunk_gets_a_status_row_even_when_the_accountant_fails(monkeypatch):
    """'every cell has exactly one row': a cell the accountant cannot handle is a row with an error status."""
    import gdpcore
    from tasks.evaluate import Chunk, EvalSettings, compute_chunk_table

    settings = EvalSettings((1e-5,), (0.1,), ("gdp",), None, 1e-10, "test")
    mechs = [gdpcore.SubsampledGaussian(noise_multiplier=s, sampling_rate=0.01, steps=10).to_json() for s in (1.0, 2.0)]
    real = gdpcore.analyze_grid

    def flaky(ms, **kw):
        if any(m.noise_multiplier == 2.0 for m in ms):
            raise MemoryError("the accountant's grid does not fit")
        return real(ms, **kw)

    monkeypatch.setattr(gdpcore, "analyze_grid", flaky)
    table = compute_chunk_table(Chunk("t", "subsampled_gaussian", tuple(mechs), settings), "run")
    status = table.column("status").to_pylist()
    assert table.num_rows == 2 and status[0] == "ok" and status[1].startswith("error: MemoryError"), status


# -- done means: the valid manifest beside the hostile ones is audited and published within 60 s ------------------------
@pytest.mark.slow  # a real `gdp audit` + `gdp publish` (Prefect start-up included): about 30 s on 2 cores
@pytest.mark.subprocess  # `gdp audit` + `gdp publish` processes
def test_valid_manifest_beside_hostile_ones_is_audited_and_published_within_60_s(tmp_path):
    """gdp audit on a folder holding the alias bomb, a binary file, a newline name and one valid manifest."""
    import json

    from tests.robustness.conftest import base_env, gdp, temporaries

    reg = tmp_path / "registry"
    reg.mkdir()
    write(reg, "a-bomb.yaml", alias_bomb_manifest())
    write(reg, "b-binary.yaml", bytes(range(256)) * 4)
    write(reg, "c-newline.yaml", VALID.replace("name: valid-model", 'name: "okname\\n"'))
    write(reg, "d-valid.yaml", VALID)
    lake, report = tmp_path / "lake", tmp_path / "reports" / "r.duckdb"
    env = base_env(tmp_path / "prefect-home")
    started = time.perf_counter()
    res = gdp(["audit", str(reg), "--lake", str(lake), "--report", str(report)], env, timeout=120)
    elapsed = time.perf_counter() - started
    assert res.returncode == 1, res.stdout + res.stderr[-3000:]  # 1: some manifests failed, the rest published
    assert elapsed < 60, elapsed
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    for name in ("a-bomb.yaml", "b-binary.yaml", "c-newline.yaml"):
        assert f"FAILED {reg / name}" in res.stderr, res.stderr
    out = gdp(["sql", "SELECT model, version FROM models", "--report", str(report), "--format", "json"], env)
    assert json.loads(out.stdout) == [{"model": "valid-model", "version": 1}], out.stderr
    assert not [p for p in lake.rglob("*") if "\n" in str(p) or "okname" in str(p)]
    # the lake is not poisoned: a later publish works
    pub = gdp(["publish", "--lake", str(lake), "--report", str(report)], env)
    assert pub.returncode == 0, pub.stderr[-3000:]
    assert not temporaries(lake, report.parent)


def test_ten_million_cells_are_refused_even_with_force(tmp_path):
    """10^7 cells with --force used more than 6 GB while planning."""
    text = SPEC.replace("noise_multiplier: [1.0]", "noise_multiplier: {linspace: [0.5, 5, 10000]}").replace(
        "steps: [10]", "steps: {linspace: [10, 10000, 1000]}"
    )
    path = write(tmp_path, "spec.yaml", text)
    started = time.perf_counter()
    with pytest.raises(ValueError, match=r"grid has 10,000,000 cells .* > 2,000,000, the most one spec can hold"):
        load_grid_spec(path, force=True)
    assert time.perf_counter() - started < 1.0


@pytest.mark.slow  # waits out a 3 s loading deadline per hostile manifest: 10-11 s
def test_each_manifest_loads_in_isolation_with_a_deadline(tmp_path):
    """A file whose loading hangs or kills its loader fails alone; the files after it are still loaded."""
    from tasks.registry import iter_registry_isolated

    write(tmp_path, "a-valid.yaml", VALID)
    write(tmp_path, "b-slow.yaml", VALID.replace("valid-model", "slow-model"))
    write(tmp_path, "c-crash.yaml", VALID.replace("valid-model", "crash-model"))
    write(tmp_path, "d-bomb.yaml", alias_bomb_manifest())
    write(tmp_path, "e-valid.yaml", VALID.replace("version: 1", "version: 2"))
    started = time.perf_counter()
    got = dict(iter_registry_isolated(tmp_path, 3.0, loader="tests.robustness._slow_loader:load"))
    assert time.perf_counter() - started < 45
    out = {p.name: (r if isinstance(r, ManifestError) else [m.key for m in r]) for p, r in got.items()}
    assert out["a-valid.yaml"] == ["valid-model:1"] and out["e-valid.yaml"] == ["valid-model:2"]
    assert "refused: loading took longer than 3 s" in str(out["b-slow.yaml"])
    assert "refused: its loader died (exit code 3)" in str(out["c-crash.yaml"])
    assert "alias" in str(out["d-bomb.yaml"]) and out["d-bomb.yaml"].file == str(tmp_path / "d-bomb.yaml")


def test_a_chunk_whose_table_cannot_be_built_still_gives_one_row_per_cell(tmp_path, monkeypatch):
    """The probe: the chunk failed with OverflowError, `cells` had 0 rows while `members` listed 1."""
    import pyarrow.parquet as pq

    import gdpcore
    import tasks.chunk_rows as chunk_rows
    import tasks.evaluate as evaluate
    from tasks.evaluate import Chunk, EvalSettings

    settings = EvalSettings((1e-5,), (0.1,), ("gdp",), None, 1e-10, "test")
    mechs = tuple(gdpcore.Gaussian(noise_multiplier=s).to_json() for s in (1.0, 2.0))
    chunk = Chunk("t", "gaussian", mechs, settings)

    def overflow(*a, **kw):
        raise OverflowError("Python int too large to convert to C long")

    monkeypatch.setattr(chunk_rows, "compute_chunk_table", overflow)
    manifest = evaluate.write_chunk(tmp_path, chunk, evaluate.evaluate_chunk.fn(chunk))
    table = pq.read_table(tmp_path / manifest.path)
    assert table.num_rows == 2 and manifest.cells == 2 and manifest.cells_ok == 0
    assert set(table.column("status").to_pylist()) == {
        "error: OverflowError: Python int too large to convert to C long"
    }
    want = [gdpcore.Gaussian(noise_multiplier=s).content_hash for s in (1.0, 2.0)]
    assert sorted(table.column("cell_id").to_pylist()) == sorted(want)
