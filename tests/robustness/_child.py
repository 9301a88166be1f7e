"""Run a loader on a hostile file in a spawned child with a timeout (resource-attack tests share this)."""

from __future__ import annotations

import importlib
import multiprocessing as mp
from typing import Any


def _call(loader: str, path: str, q: Any) -> None:
    module, name = loader.split(":")
    try:
        getattr(importlib.import_module(module), name)(path)
        q.put("accepted")
    except ValueError as exc:
        q.put(f"ValueError: {str(exc)[:300]}")
    except BaseException as exc:
        q.put(f"{type(exc).__name__}: {exc}"[:300])


def load_in_child(loader: str, path: str, *, timeout: float = 60.0) -> str:
    """``loader`` ("module:function") applied to ``path`` in a spawned child: "accepted", "ValueError: ..." or
    another exception's text. Fails the test if the child is still running after ``timeout`` seconds."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    child = ctx.Process(target=_call, args=(loader, path, q))
    child.start()
    try:
        child.join(timeout=timeout)
        assert not child.is_alive(), f"{loader} still running on {path} after {timeout:g} s"
        return q.get(timeout=5)
    finally:
        if child.is_alive():
            child.kill()
            child.join(timeout=10)
