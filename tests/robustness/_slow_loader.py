"""A manifest loader that hangs on ``*slow*.yaml`` and dies on ``*crash*.yaml`` (tests of the per-file deadline)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tasks.registry import load_manifest_file


def load(path: str | Path):
    name = Path(path).name
    if "slow" in name:
        time.sleep(600)
    if "crash" in name:
        os._exit(3)
    return load_manifest_file(path)
