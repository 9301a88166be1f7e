"""Pipeline tests: tiny grids, thread runner; flow tests use the session Prefect harness of tests/conftest.py.

The object-storage tests (test_s3_lake.py, test_s3_resume.py) share the moto S3 server fixtures below."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
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


ROOT = Path(__file__).resolve().parents[2]
KEY_ID = "AKIDgdpaudit0test42"
SECRET = "s3cr3t-gdp-audit-never-shown-0042"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def s3_server():
    """moto's S3 server (``moto[server]``, the ``test`` extra) on a free port of 127.0.0.1, for one test module."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("moto server did not start") from None
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait()


def aws_env(endpoint: str) -> dict[str, str]:
    """The standard AWS variables pointing at ``endpoint`` with the test credentials (the only way they are given)."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": KEY_ID,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_DEFAULT_REGION": "us-east-1",
    }


@pytest.fixture
def s3(s3_server, monkeypatch, tmp_path):
    """A fresh bucket; the AWS variables (and nothing else) point this process at the server."""
    import uuid

    from tasks import object_store

    for k, v in aws_env(s3_server).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("GDP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(object_store, "_CLIENT", None)
    bucket = f"gdp-{uuid.uuid4().hex[:10]}"
    object_store._client().create_bucket(Bucket=bucket)
    return bucket


def s3_env(extra: dict[str, str], *, drop: tuple[str, ...] = ()) -> dict[str, str]:
    """The environment of a ``gdp`` child process: this one without its AWS variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and k not in drop}
    env.update(PYTHONPATH=str(ROOT), AWS_EC2_METADATA_DISABLED="true", **extra)
    env.pop("PYTHONWARNINGS", None)
    return env


def run_gdp(*argv: str, cwd: Path, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess:
    """``python -m flows.cli ARGV`` to completion (bounded), output captured."""
    return subprocess.run(
        [sys.executable, "-m", "flows.cli", *argv], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout
    )
