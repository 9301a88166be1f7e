"""Plain misuse of the command line: every path argument given something that is not the file it wants.

Each ``gdp`` command that reads a file is given a missing path, a folder, a path through a file, a name too long for
the file system, an empty file, binary garbage and (where a size limit applies) ``/dev/zero``. Each must end with one
line on stderr naming the path or the option, exit 2, no traceback - before Prefect starts and before anything is
written (these run in-process: a spawned process would fail the spawn guard of tests/conftest.py).
"""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

import pytest

from flows.cli import main

_KINDS = ("missing", "folder", "through_a_file", "too_long", "empty", "garbage", "dev_zero")


def _path(tmp: Path, kind: str, suffix: str) -> str:
    if kind == "missing":
        return str(tmp / f"missing{suffix}")
    if kind == "folder":
        (tmp / f"folder{suffix}").mkdir(exist_ok=True)
        return str(tmp / f"folder{suffix}")
    if kind == "through_a_file":
        (tmp / "plain").write_text("x")
        return str(tmp / "plain" / f"x{suffix}")
    if kind == "too_long":
        return str(tmp / ("n" * 5000 + suffix))
    if kind == "empty":
        (tmp / f"empty{suffix}").write_bytes(b"")
        return str(tmp / f"empty{suffix}")
    if kind == "garbage":
        (tmp / f"garbage{suffix}").write_bytes(bytes(range(256)) * 16)
        return str(tmp / f"garbage{suffix}")
    return "/dev/zero"


_COMMANDS = {
    "analyze --spec": (lambda p, t: ["analyze", "--spec", p], ".yaml"),
    "analyze --opacus": (lambda p, t: ["analyze", "--opacus", p], ".pt"),
    "analyze --dp-event": (lambda p, t: ["analyze", "--dp-event", p], ".json"),
    "sweep": (lambda p, t: ["sweep", p, "--lake", f"{t}/lake", "--report", f"{t}/r.duckdb"], ".yaml"),
    "regret-map": (lambda p, t: ["regret-map", p, "--lake", f"{t}/lake", "--report", f"{t}/r.duckdb"], ".yaml"),
    "calibration-sweep": (
        lambda p, t: ["calibration-sweep", p, "--lake", f"{t}/lake", "--report", f"{t}/r.duckdb"],
        ".yaml",
    ),
    "sql --report": (lambda p, t: ["sql", "SELECT 1", "--report", p], ".duckdb"),
    "export --report": (lambda p, t: ["export", f"{t}/out.duckdb", "--report", p], ".duckdb"),
    "card --report": (lambda p, t: ["card", "m", "--report", p], ".duckdb"),
    "evidence --scores": (lambda p, t: ["evidence", "--scores", p, "gaussian", "--noise-multiplier", "1"], ".npz"),
    "evidence --spec": (lambda p, t: ["evidence", "--scores", f"{t}/s.npz", "--spec", p], ".yaml"),
}


def _case(command: str, kind: str) -> object:
    # `gdp sql` runs its query in a child process (tasks/report_query.py: the process-level limits)
    marks = [pytest.mark.subprocess] if command.startswith("sql") else []
    return pytest.param(command, kind, marks=marks, id=f"{command}-{kind}")


@pytest.mark.parametrize(("command", "kind"), [_case(c, k) for c in _COMMANDS for k in _KINDS])
def test_a_bad_path_is_one_line_and_exit_2(tmp_path, command, kind):
    build, suffix = _COMMANDS[command]
    path = _path(tmp_path, kind, suffix)
    before = sorted(os.listdir(tmp_path))
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(build(path, str(tmp_path)))
    text = err.getvalue()
    assert rc == 2, text[:2000]
    assert "Traceback" not in text
    lines = text.strip().splitlines()
    assert len(lines) == 1 and len(text) < 1500, text[:2000]
    option = command.split()[-1]
    named = [path[:60], option] if option.startswith("--") else [path[:60]]
    assert any(n in text for n in named) or "report" in text, text
    assert sorted(os.listdir(tmp_path)) == before  # nothing written
