"""`gdp sql` is bounded as a process, not only by DuckDB's settings.

``SELECT list(range(1000000000))`` with ``--timeout 5 --memory-limit 200MB`` ran 53 s and reached 19.8 GB: DuckDB's
``memory_limit`` does not count one huge vector and its interrupt is not checked inside one. The query now runs in
a child whose address space may grow by at most ``--memory-limit`` + 128 MiB (tasks/report_query.py,
``limit_address_space``) and which a watchdog kills 2 s after ``--timeout`` (``run_bounded``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tasks.publish import publish_lake
from tasks.report_query import SQL_KILL_GRACE_SECONDS, SQL_PROCESS_SLACK, memory_bytes, run_bounded

pytestmark = pytest.mark.subprocess  # every test here starts a query process

REPO = Path(__file__).resolve().parents[2]

# `gdp sql` in a fresh interpreter that prints, after it, the largest resident size any of its children reached
# (getrusage(RUSAGE_CHILDREN).ru_maxrss, KiB on Linux): the pytest process has had bigger children before.
_MEASURE = textwrap.dedent(
    """
    import json, resource, sys, time
    from flows.cli import main
    started = time.monotonic()
    rc = main(sys.argv[1:])
    took = time.monotonic() - started
    kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(json.dumps({"rc": rc, "seconds": took, "child_max_rss": kib * 1024}), file=sys.stderr)
    """
)


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("sql")
    out = tmp / "reports" / "r.duckdb"
    publish_lake(tmp / "lake", out)
    return out


def _gdp_sql(report: Path, sql: str, *args: str) -> tuple[dict, str, str]:
    argv = [sys.executable, "-c", _MEASURE, "sql", sql, "--report", str(report), *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=REPO)
    *lines, last = done.stderr.rstrip("\n").splitlines()
    return json.loads(last), "\n".join(lines), done.stdout


# The child's resident size can never pass its address-space cap: its size at the query's start (an interpreter
# with DuckDB and rich loaded: ~70 MB resident here; 400 MB allowed) + the limit + the slack.
_INTERPRETER = 400 * 2**20


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT list(range(1000000000))",  # one 8 GiB vector: DuckDB's memory_limit does not count it
        "SELECT range, repeat('x', 100) FROM range(3000000)",  # rows as Python objects: outside DuckDB's limit
    ],
)
def test_the_query_process_stays_within_the_memory_limit(report, sql):
    status, err, out = _gdp_sql(report, sql, "--timeout", "5", "--memory-limit", "200MB")
    assert status["rc"] == 2 and out == ""
    assert err.count("\n") == 0 and err.startswith("gdp sql: error:") and "Traceback" not in err, err
    assert "memory limit 200MB (--memory-limit)" in err
    assert status["child_max_rss"] < _INTERPRETER + memory_bytes("200MB") + SQL_PROCESS_SLACK, status
    assert status["seconds"] < 60, status  # refused at the allocation, not after a minute of growth


def test_a_legitimate_query_still_answers_through_the_child(report):
    status, err, out = _gdp_sql(report, "SELECT 41 + 1 AS answer, 'é' AS text", "--format", "csv")
    assert status["rc"] == 0 and err == ""
    assert out == "answer,text\n42,é\n"


def _stub(code: str) -> list[str]:
    """A child that speaks run_bounded's protocol but ignores every limit (what a query deaf to DuckDB's interrupt
    looks like from the parent)."""
    prologue = "import json, os, sys, time\nreq = json.loads(sys.stdin.read())\nfd = req['status_fd']\n"
    return [sys.executable, "-c", prologue + textwrap.dedent(code)]


def test_the_watchdog_kills_a_query_that_ignores_its_timeout():
    child = _stub('os.write(fd, b\'{"phase": "query"}\\n\')\nwhile True:\n    time.sleep(1)\n')
    started = time.monotonic()
    with pytest.raises(ValueError, match=r"^query stopped after the 0.5 s time limit \(--timeout\)"):
        run_bounded(child, {}, timeout=0.5, memory_limit="200MB", out=sys.stdout)
    took = time.monotonic() - started
    assert 0.5 + SQL_KILL_GRACE_SECONDS <= took < 0.5 + SQL_KILL_GRACE_SECONDS + 10


def test_writing_the_output_is_not_timed_and_is_relayed_whole():
    child = _stub(
        """
        os.write(fd, b'{"phase": "query"}\\n')
        os.write(fd, b'{"phase": "output"}\\n')
        time.sleep(1.5)  # past timeout + grace, but the answer is already computed
        sys.stdout.write("x" * 300000 + "\\n")
        """
    )

    class Sink:
        text = ""

        def write(self, s: str) -> None:
            self.text += s

    sink = Sink()
    run_bounded(child, {}, timeout=0.01, memory_limit="200MB", out=sink)  # type: ignore[arg-type]
    assert sink.text == "x" * 300000 + "\n"


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("os.kill(os.getpid(), 6)", r"^the query's process was ended by SIGABRT \(a query outgrowing the memory limit"),
        ("os.write(fd, json.dumps({'error': 'E' * 10**4}).encode() + b'\\n'); sys.exit(2)", r"E… \(10,000 chars\)$"),
        ("os.write(fd, b'E' * 10**6); sys.exit(2)", r"^\(an error message of more than 65,536 bytes, not shown\)$"),
        ("sys.exit(3)", r"^the query's process failed with exit code 3"),
    ],
)
def test_every_way_the_child_ends_is_one_line(code, message):
    with pytest.raises(ValueError, match=message) as info:
        run_bounded(_stub(code), {}, timeout=5, memory_limit="200MB", out=sys.stdout)
    assert "\n" not in str(info.value) and len(str(info.value)) < 2100
