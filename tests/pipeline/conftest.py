"""Pipeline tests: tiny grids, thread runner; flow tests use the session Prefect harness of tests/conftest.py."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

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
