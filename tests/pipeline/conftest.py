"""Pipeline tests: one Prefect test server for the session (temporary SQLite, no network), tiny grids, thread runner."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")  # the test server must not phone home
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")


@pytest.fixture(scope="session")
def prefect_server():
    """Session-scoped Prefect test harness; only the flow tests request it (spec tests stay Prefect-free)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


TINY_SPEC = """\
name: {name}
mechanism: subsampled_gaussian
grid:
  noise_multiplier: [0.8, 1.5]
  sampling_rate: [0.02, 1.0]     # 1.0: plain Gaussians, exactly (sqrt(T)/sigma)-GDP
  steps: [10, {steps}]
deltas: [1.0e-5, 1.0e-6]
fprs: [1.0e-3, 0.1]
representations: [gdp]
chunk_size: 4
"""


@pytest.fixture
def write_spec(tmp_path: Path):
    def _write(text: str, name: str = "spec.yaml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path

    return _write


@pytest.fixture
def tiny_spec(write_spec):
    def _tiny(name: str = "tiny", steps: int = 100, file: str = "tiny.yaml") -> Path:
        return write_spec(TINY_SPEC.format(name=name, steps=steps), file)

    return _tiny
