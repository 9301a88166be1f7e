"""Shared test configuration for every suite under tests/.

* Single-threaded numerics, so CPU-heavy tests don't oversubscribe the 2 cores.
* The one Prefect test harness (``prefect_server``), used by tests/pipeline and tests/registry.
* Hypothesis profiles: ``ci`` when ``CI`` is set, ``dev`` otherwise; ``HYPOTHESIS_PROFILE`` overrides either.
* Markers the Makefile selects on (``make test-quick`` = ``-m "not slow and not prefect and not subprocess"``):
  ``prefect`` is added here to every test whose fixtures start a Prefect server, ``subprocess`` to every test whose
  fixtures start processes; tests that start them in their own body carry the marker in their file. A guard checks
  the selection: a test that spawns a process without the ``prefect`` or ``subprocess`` marker fails.
"""

from __future__ import annotations

import os
import sys

import pytest
from hypothesis import settings

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")  # the test server must not phone home
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")

# Hypothesis profiles. Each property test asks `max_examples=min(N, settings.default.max_examples)`: N is what CI
# has always run for it (12 to 300), so `ci`'s ceiling (300, the largest N) leaves every count as it was, and `dev`
# (the inner loop) caps them all at 10, same strategies. No deadline in either: examples build PLDs whose time
# depends on the shared machine's load, not on the code.
settings.register_profile("ci", max_examples=300, deadline=None, print_blob=True)
settings.register_profile("dev", max_examples=10, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


def pytest_configure(config: pytest.Config) -> None:
    # absl (imported by dp_accounting) keeps one logging handler, bound to the sys.stderr of the moment absl is first
    # imported. Prefect's logging set-up closes every existing handler, and absl's closes its stream unless that is
    # the current sys.stderr or stdout. A test run alone that first imports dp_accounting under pytest's capture
    # bound it to the capture's file, which Prefect then closed: the session lost its stderr at the end
    # (tests/pipeline/test_cli.py::test_calibration_at_the_search_limit_is_flagged selected alone). Bound to the
    # process's own stderr, it is never closed.
    import absl.logging

    absl.logging.get_absl_handler().python_handler.stream = sys.__stderr__


@pytest.fixture(scope="session")
def prefect_server():
    """Session-scoped Prefect test harness (temporary SQLite, no network); only flow tests request it."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


# Fixtures that start a Prefect server (directly or through another fixture) and fixtures that start processes.
PREFECT_FIXTURES = {"prefect_server", "prefect_api", "sample_audit", "dask_cluster"}
SUBPROCESS_FIXTURES = {"prefect_api", "dask_cluster"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        # tests/test_contract.py checks every public function on 3 random draws of every registered kind (~580 items,
        # most of the pure suite's time): the inner loop checks the first draw of each kind, `make test` all three.
        # The mixture-of-Gaussians kind is the slowest to account (one analyze: 18-34 s on the shared 2 cores), so
        # its draws are all left to `make test`.
        params = getattr(getattr(item, "callspec", None), "params", {})
        if item.path.name == "test_contract.py" and isinstance(params.get("i"), int):
            if params["i"] > 0 or params.get("kind") == "mixture_of_gaussians":
                item.add_marker(pytest.mark.slow)
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & PREFECT_FIXTURES:
            item.add_marker(pytest.mark.prefect)
        if fixtures & SUBPROCESS_FIXTURES:
            item.add_marker(pytest.mark.subprocess)


# The guard: process creation is an audited event (PEP 578). While a test that carries neither `prefect` nor
# `subprocess` runs (setup and call), any spawn is recorded and fails that phase, so `make test-quick` cannot
# quietly start servers again. Exempt: `git ls-files` (tests/test_docs.py), the one-shot probes the standard
# library's `platform` module runs on first use inside third-party imports (`uname`, `file`), and matplotlib's
# `fc-list`, run once when it builds its font cache (a fresh machine or user: it failed the first plot test there):
# milliseconds, no server.
_SPAWN_EVENTS = frozenset({"subprocess.Popen", "os.posix_spawn", "os.spawn", "os.system", "os.exec", "os.fork"})
_ALLOWED_EXECUTABLES = frozenset({"git", "uname", "file", "fc-list"})
_watch: list[str] | None = None  # the spawns of the running unmarked test; None while no unmarked test runs


def _audit(event: str, args: tuple) -> None:
    if _watch is None or event not in _SPAWN_EVENTS:
        return
    what = args[0] if args else event
    if event == "subprocess.Popen" and isinstance(args[1], list | tuple) and args[1]:
        what = os.fspath(args[1][0])
    if os.path.basename(str(what)) not in _ALLOWED_EXECUTABLES:
        _watch.append(f"{event}: {what}")


sys.addaudithook(_audit)


def _watched(item: pytest.Item):
    """Record the spawns of an unmarked test while one of its phases runs; fail the phase if there were any."""
    global _watch
    unmarked = item.get_closest_marker("prefect") is None and item.get_closest_marker("subprocess") is None
    _watch = [] if unmarked else None
    try:
        result = yield
    finally:
        spawned, _watch = _watch, None
    if spawned:
        pytest.fail(
            f"{item.nodeid} started processes without a `prefect` or `subprocess` marker "
            f"(make test-quick would run it): {sorted(set(spawned))[:5]}",
            pytrace=False,
        )
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    return (yield from _watched(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    return (yield from _watched(item))
