"""Fixed costs of ``gdp sweep`` (benchmarks/bench_cli.py measures them): what the speed-ups must not change.

* The temporary Prefect server is started early (:func:`flows.runners.start_api_server`), before the flow module is
  imported: the flow and its process-pool workers use that one server, and it is gone when the command has exited.
* The CLI process skips the interpreter's module teardown (:func:`flows.cli._exit_after_handlers`) only after every
  exit handler ran, with the command's own exit code; an uncaught error still exits the normal way. Pool workers
  likewise end after their exit handlers (:func:`flows.runners._end_worker`).
* A chunk's key is hashed once (cached), and is still the documented content hash of its cells and settings.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pickle
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PREFECT_HOME=str(tmp_path / "prefect-home"))
    for var in ("PYTHONWARNINGS", "PREFECT_API_URL", "PREFECT_LOGGING_LEVEL"):
        env.pop(var, None)
    return env


def _phases(path: Path) -> list[tuple[float, int, str]]:
    out = []
    for line in path.read_text().splitlines():
        ts, pid, label = line.split(" ", 2)
        out.append((float(ts), int(pid), label))
    return out


def _processes_with(*needles: str) -> list[int]:
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().decode(errors="replace")
        except OSError:
            continue
        if all(n in cmd for n in needles):
            found.append(int(d))
    return found


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="process checks read /proc (Linux)")
@pytest.mark.subprocess  # a `gdp sweep` process with its Prefect server
def test_sweep_uses_one_early_server_for_flow_and_workers_and_stops_it(tiny_spec, tmp_path):
    spec = tiny_spec()
    trace = tmp_path / "trace.txt"
    env = _env(tmp_path) | {"GDP_TRACE": str(trace)}
    lake, report = tmp_path / "lake", tmp_path / "r.duckdb"
    argv = ["sweep", str(spec), "--runner", "process", "--workers", "1", "--lake", str(lake), "--report", str(report)]
    out = subprocess.run(
        [sys.executable, "-m", "flows.cli", *argv, "--no-progress"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert "8 cells (8 computed, 0 already in the lake), 2 chunk(s) computed, 0 failed" in out.stdout, out.stdout
    assert "Traceback" not in out.stderr, out.stderr

    phases = _phases(trace)
    main_pid = phases[0][1]
    labels = [label for _, pid, label in phases if pid == main_pid]
    servers = [label for label in labels if label.startswith("api-server ")]
    assert len(servers) == 1, labels  # one server, started by the CLI process itself
    order = [label.split(" ")[0] for label in labels]
    for earlier, later in [("api-server", "flow-imported"), ("flow-imported", "runner+server"),
                           ("runner+server", "flow-body"), ("flow-body", "printed"), ("printed", "exit")]:  # fmt: skip
        assert order.index(earlier) < order.index(later), order
    assert order[-1] == "exit"  # the last exit handler ran after Prefect's and ours
    worker = {pid for _, pid, label in phases if label == "chunk-start"}
    assert len(worker) == 1 and main_pid not in worker  # the chunks ran in the pool worker
    # the worker's fast exit ran after the exit handlers registered since it started (a trace handler among them)
    worker_labels = [label for _, pid, label in phases if pid in worker]
    assert worker_labels[-1] == "worker-atexit" and worker_labels.count("chunk-computed") == 2, worker_labels
    assert labels.count("chunk-written") == 2, labels  # the flow wrote both chunk files (workers touch no lake)

    # the flow and the pool worker reported to that server (Prefect started none of its own)
    fields = dict(kv.split("=", 1) for kv in servers[0].split(" ")[1:])
    assert f"flow-body api={fields['url']}" in labels, labels
    # (the worker may start before the server does: each task carries the flow's settings, the server's URL included)
    assert [label for _, pid, label in phases if pid in worker and label.startswith("chunk-api")] == [
        f"chunk-api url={fields['url']}"
    ] * 2
    # ... and it is gone once the command has returned: no process left, nothing answers on its port
    assert not [p for p in _processes_with("-m\x00uvicorn\x00") if str(tmp_path) in _environ(p)]
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        urllib.request.urlopen(fields["url"] + "/health", timeout=2)


def _environ(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


_EXIT_CHILD = """
import atexit, sys
import flows.cli

flag, mode = sys.argv[1], sys.argv[2]
real = flows.cli._main


def command(argv):
    # an exit handler registered by the command (after main's own): it must still run, and see its output flushed
    atexit.register(lambda: open(flag, "w").write("handler ran"))
    if mode == "crash":
        raise RuntimeError("boom")
    return real(argv)


flows.cli._main = command
sys.argv = ["gdp", *sys.argv[3:]]
sys.exit(flows.cli.main())
"""


@pytest.mark.parametrize(
    ("mode", "argv", "code", "stdout"),
    [
        ("ok", ["--version"], 0, "gdp-audit"),
        ("ok", ["sql", "SELECT 1", "--report", "no-such-report.duckdb"], 2, ""),
        ("crash", ["--version"], 1, ""),
    ],
)
@pytest.mark.subprocess  # `gdp` in a child interpreter
def test_fast_exit_keeps_exit_codes_output_and_exit_handlers(tmp_path, mode, argv, code, stdout):
    flag = tmp_path / "flag"
    out = subprocess.run(
        [sys.executable, "-c", _EXIT_CHILD, str(flag), mode, *argv],
        capture_output=True, text=True, env=_env(tmp_path), cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert out.returncode == code, (out.stdout, out.stderr)
    assert out.stdout.startswith(stdout)
    assert flag.read_text() == "handler ran"
    if mode == "crash":
        assert "RuntimeError: boom" in out.stderr  # an uncaught error: traceback, normal interpreter exit
    elif code == 2:
        assert out.stderr.startswith("gdp sql: error:") and "Traceback" not in out.stderr


def test_chunk_key_is_cached_and_is_the_content_hash(tiny_spec, tmp_path):
    from tasks.plan import Chunk, build_plan
    from tasks.spec import load_grid_spec

    chunk = build_plan(load_grid_spec(tiny_spec()), tmp_path / "lake", workers=1).chunks[0]
    # the documented definition (tasks.plan.Chunk.key): sha256 of the canonical JSON of cells + settings, 32 hex
    canonical = json.dumps(
        {"mechanisms": list(chunk.mechanisms), "settings": dataclasses.asdict(chunk.settings)},
        sort_keys=True,
        separators=(",", ":"),
    )
    assert chunk.key == hashlib.sha256(canonical.encode()).hexdigest()[:32]
    assert "key" in vars(chunk)  # computed once, then cached on the instance
    again = pickle.loads(pickle.dumps(chunk))  # what a pool worker receives
    assert again == chunk and again.key == chunk.key
    fresh = Chunk(spec_name=chunk.spec_name, kind=chunk.kind, mechanisms=chunk.mechanisms, settings=chunk.settings)
    assert fresh == chunk and fresh.key == chunk.key
    fewer = dataclasses.replace(chunk, mechanisms=chunk.mechanisms[:1])
    assert fewer.key != chunk.key  # a replaced chunk does not inherit the cached key
    assert chunk.settings.eval_key == dataclasses.replace(chunk.settings).eval_key


def test_rows_of_a_chunk_carry_its_key(tiny_spec, tmp_path):
    from tasks.evaluate import compute_chunk_table
    from tasks.plan import build_plan
    from tasks.spec import load_grid_spec

    chunk = build_plan(load_grid_spec(tiny_spec()), tmp_path / "lake", workers=1).chunks[0]
    started = time.perf_counter()
    table = compute_chunk_table(chunk, "run")
    assert time.perf_counter() - started < 60
    assert set(table.column("chunk_key").to_pylist()) == {chunk.key}
    assert set(table.column("eval_key").to_pylist()) == {chunk.settings.eval_key}


_PROFILE_CHILD = """
import os, sys, time
from flows import runners

runners.start_api_server()
children = []
for d in os.listdir("/proc"):
    try:
        with open(f"/proc/{d}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{d}/cmdline", "rb") as f:
            cmd = f.read()
    except (OSError, ValueError):
        continue
    if int(fields[1]) == os.getpid() and fields[0] != "Z" and b"uvicorn" in cmd:
        children.append(d)
from prefect.settings import get_current_settings

print(f"boot={bool(runners._server_boot)} env={os.environ.get('PREFECT_API_URL')} "
      f"settings={get_current_settings().api.url} children={children}")
"""


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="process checks read /proc (Linux)")
@pytest.mark.subprocess  # `gdp` in a child interpreter
def test_a_server_named_by_the_profile_wins_over_the_temporary_one(tmp_path):
    """The temporary server is launched before Prefect's configuration is read; when the active profile names a
    server (Prefect's profiles.toml), that one is used and the launched one is stopped at once."""
    home = tmp_path / "prefect-home"
    home.mkdir()
    (home / "profiles.toml").write_text(
        'active = "remote"\n\n[profiles.remote]\nPREFECT_API_URL = "http://127.0.0.1:9/api"\n'
    )
    out = subprocess.run(
        [sys.executable, "-c", _PROFILE_CHILD], capture_output=True, text=True, env=_env(tmp_path), timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "boot=False env=None settings=http://127.0.0.1:9/api children=[]" in out.stdout, out.stdout


def test_flow_runs_against_the_temporary_server_only_have_no_heartbeats(monkeypatch):
    """flows.runners.flow_run_settings: no flow-run heartbeats against the temporary server this process started
    (nothing outlives it to read them); Prefect's own setting (180 s by default) with a configured server."""
    from prefect.settings import get_current_settings

    from flows import runners

    default = get_current_settings().flows.heartbeat_frequency
    assert default is not None
    monkeypatch.setattr(runners, "_server_boot", {})
    with runners.flow_run_settings():
        assert get_current_settings().flows.heartbeat_frequency == default
    monkeypatch.setattr(runners, "_server_boot", {"port": 0})
    with runners.flow_run_settings():
        assert get_current_settings().flows.heartbeat_frequency is None
    assert get_current_settings().flows.heartbeat_frequency == default
