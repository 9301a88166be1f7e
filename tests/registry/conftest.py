"""Registry-audit tests: tiny registries; flow tests use the session Prefect harness of tests/conftest.py."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

# Importing MLflow's SQLAlchemy store runs sqlalchemy.orm.configure_mappers() over every ORM registry in the process.
# Under SQLAlchemy 2.1 that warns about MLflow's own `lazy="noload"` relationships and about Prefect's server UUID
# column type (no operator_classes). Both are third-party deprecations, not ours: ignored by message in the MLflow tests.
MLFLOW_ORM_WARNINGS = [
    pytest.mark.filterwarnings(
        "ignore:The ``noload`` loader strategy is deprecated:sqlalchemy.exc.SADeprecationWarning"
    ),
    pytest.mark.filterwarnings(
        "ignore:Type object <class 'prefect.server.utilities.database.UUID'> does not refer to an OperatorClass"
        ":sqlalchemy.exc.SADeprecationWarning"
    ),
]

REPO = Path(__file__).resolve().parents[2]
SAMPLE_REGISTRY = REPO / "data" / "registry"


TINY_A = """\
name: tiny-a
version: {version}
privacy_unit: example
neighbouring: add_remove
dataset_size: 10000
delta: 1.0e-5
mechanism:
  dpsgd: {{noise_multiplier: {sigma}, batch_size: 100, steps: 50}}
"""

TINY_B = """\
name: tiny-b
version: 1
privacy_unit: person
dataset_size: 1000
delta: 1/N^1.1
mechanism:
  gdpcore: {kind: self_composed, count: 4, mechanism: {kind: gaussian, noise_multiplier: 4.0}}
"""


@pytest.fixture
def tiny_registry(tmp_path: Path):
    """A registry folder with two small models; returns (folder, write(name, text))."""
    reg = tmp_path / "registry"
    reg.mkdir()

    def write(name: str, text: str) -> Path:
        path = reg / name
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path

    write("a.yaml", TINY_A.format(version=1, sigma=1.0))
    write("b.yaml", TINY_B)
    return reg, write


@pytest.fixture(scope="session")
def sample_audit(prefect_server, tmp_path_factory):
    """The sample registry audited once per session (about a minute on 2 cores), then re-run unchanged."""
    from flows.privacy_audit import privacy_audit

    root = tmp_path_factory.mktemp("sample")
    kwargs = dict(registry=str(SAMPLE_REGISTRY), lake=str(root / "lake"), report=str(root / "privacy.duckdb"))
    first = privacy_audit(**kwargs)
    before = sorted(p.name for p in (root / "lake" / "registry").rglob("*.parquet") if "published" not in p.parts)
    second = privacy_audit(**kwargs)
    after = sorted(p.name for p in (root / "lake" / "registry").rglob("*.parquet") if "published" not in p.parts)
    return {
        "root": root,
        "first": first,
        "second": second,
        "files_before": before,
        "files_after": after,
        "report": root / "privacy.duckdb",
    }
