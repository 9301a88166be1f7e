"""Flow-run names people can read in the Prefect UI: ``<flow>-<input>-<UTC time>`` instead of random adjectives."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from pathlib import Path

__all__ = ["run_name"]


def run_name(prefix: str, parameter: str | None = None) -> Callable[[], str]:
    """A ``flow_run_name`` callable: ``prefix``, the stem of the ``parameter`` value (a spec / registry / report path)
    and the start time, e.g. ``sweep-demo-20260101-020000``."""

    def name() -> str:
        from prefect.runtime import flow_run

        value = (flow_run.parameters or {}).get(parameter) if parameter else None
        label = re.sub(r"[^A-Za-z0-9_.-]+", "-", Path(str(value)).stem) if value else "default"
        return f"{prefix}-{label}-{dt.datetime.now(dt.UTC):%Y%m%d-%H%M%S}"

    return name
