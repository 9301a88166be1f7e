"""The calibration subpackage's structure ("modules of one concern"): every public name is defined, documented and
listed by exactly one of its modules, every name the repository imports from it exists, named errors stay
ValueError / RuntimeError subclasses, and no module reads another's privates."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
import subprocess
from pathlib import Path

import pytest

import gdpcore as g
import gdpcore.calibration as calibration
from gdpcore.calibration import CalibrationInfeasibleError, CalibrationSearchError

PACKAGE = Path(calibration.__file__).parent
ROOT = PACKAGE.parents[1]
MODULES = {m.name: importlib.import_module(f"{calibration.__name__}.{m.name}") for m in pkgutil.iter_modules([PACKAGE])}


def test_every_public_name_is_defined_documented_and_listed_by_one_module():
    for name in calibration.__all__:
        obj = getattr(calibration, name)
        owners = [mod for mod, module in MODULES.items() if name in getattr(module, "__all__", ())]
        assert len(owners) == 1, f"{name} is listed by {owners}"
        assert getattr(MODULES[owners[0]], name) is obj, f"gdpcore.calibration.{name} is not {owners[0]}.{name}"
        if callable(obj):
            assert obj.__module__ == f"{calibration.__name__}.{owners[0]}", name
            assert (obj.__doc__ or "").strip(), f"{name} has no docstring"
    assert calibration.DISCRETIZATION_LADDER_START == 4e-3


def test_gdpcore_reexports_the_same_objects():
    shared = set(g.__all__) & set(calibration.__all__)
    assert shared, "gdpcore re-exports nothing from gdpcore.calibration"
    assert all(getattr(g, name) is getattr(calibration, name) for name in shared)


def _imported_from_the_package() -> set[str]:
    """Names the repository's .py / .md files take from ``gdpcore.calibration`` (``from ... import`` and attributes)."""
    files = subprocess.run(["git", "ls-files", "*.py", "*.md"], cwd=ROOT, capture_output=True, text=True).stdout
    names: set[str] = set()
    for rel in files.split():
        text = (ROOT / rel).read_text(encoding="utf-8")
        for group in re.findall(r"from gdpcore\.calibration import \(?([\w\s,#]+?)\)?\n(?!\s)", text):
            names |= {n.split(" as ")[0].strip() for n in re.sub(r"#.*", "", group).split(",")} - {""}
        names |= set(re.findall(r"gdpcore\.calibration\.(\w+)", text))
    return names


def test_every_name_the_repository_imports_exists():
    names = _imported_from_the_package()
    assert "calibrate_noise" in names  # gdpcore/__init__.py's re-export is read
    missing = sorted(n for n in names if n not in calibration.__all__ and n not in MODULES)
    assert missing == [], f"imported from gdpcore.calibration but not exported: {missing}"


def test_every_module_declares_all():
    for path in PACKAGE.glob("*.py"):
        tree = ast.parse(path.read_text())
        names = {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets if hasattr(t, "id")}
        assert "__all__" in names, path.name


def test_no_module_reads_another_modules_privates():
    """No ``from gdpcore.x import _private`` and no ``module._private`` attribute access into gdpcore."""
    offenders = []
    for path in PACKAGE.glob("*.py"):
        tree = ast.parse(path.read_text())
        gdp_modules = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gdpcore"):
                offenders += [f"{path.name}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
                gdp_modules |= {a.asname or a.name for a in node.names}
            if isinstance(node, ast.Import):
                gdp_modules |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.startswith("gdpcore")}
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and isinstance(node.value, ast.Name)
                and node.value.id in gdp_modules
            ):
                offenders.append(f"{path.name}:{node.lineno}: {node.value.id}.{node.attr}")
    assert offenders == []


@pytest.mark.parametrize(
    "call",
    [
        # In range: sigma <= 10 cannot hold TPR at 0.0101 @ FPR 0.01 for q=0.01, T=1000 (pessimistic and optimistic).
        lambda: g.calibrate_noise(sampling_rate=0.01, steps=1000, target_tpr=0.0101, fpr=0.01, noise_max=10.0),
        # Closed form: one plain Gaussian step at sigma=1 is 1-GDP, advantage 2 Phi(1/2) - 1 = 0.383 > 0.1.
        lambda: g.calibrate_steps(noise_multiplier=1.0, sampling_rate=1, target_advantage=0.1),
        # No mechanism at all: every mechanism allows TPR >= FPR.
        lambda: g.calibrate_noise(sampling_rate=0.01, steps=10, target_tpr=0.01, fpr=0.05),
        # Seed 001 Table 1, row 3: precision 0.5 gives the FNR target 1 - FPR (random guessing reaches it).
        lambda: g.fnr_target_from_precision(precision=0.5, fpr=0.01),
    ],
)
def test_infeasible_targets_raise_the_named_error(call):
    with pytest.raises(CalibrationInfeasibleError, match="infeasible") as info:
        call()
    assert isinstance(info.value, ValueError)  # callers that catch ValueError keep working


def test_malformed_input_is_a_plain_value_error():
    with pytest.raises(ValueError, match="target_advantage") as info:
        g.calibrate_noise(sampling_rate=0.01, steps=10, target_advantage=1.5)
    assert not isinstance(info.value, CalibrationInfeasibleError)


def test_search_error_is_a_runtime_error():
    assert issubclass(CalibrationSearchError, RuntimeError)
