"""The ``gdp`` CLI behaves like a well-kept tool: --version, help on every option, every user error listed
in the issue exits 2 with one line naming the field and value (no traceback), ``| head`` is quiet, and a sweep with
nothing to compute answers from the lake without starting Prefect."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from flows.cli import _build_parser, main
from tasks.publish import publish_lake

ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("PYTHONWARNINGS", None)
    return env


def _gdp(*argv: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "flows.cli", *argv], capture_output=True, text=True, env=_env(), cwd=ROOT, **kw
    )


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("gdp-audit ")


def _parsers(parser: argparse.ArgumentParser, path: str = "gdp"):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{path} {name}")


def test_every_option_has_help():
    seen = 0
    for path, parser in _parsers(_build_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            seen += 1
            assert action.help and action.help != argparse.SUPPRESS, f"{path} {action.option_strings or action.dest}"
    assert seen > 100
    names = {p for p, _ in _parsers(_build_parser())}
    # every existing sub-command is still there (tests/pipeline and tests/registry drive them)
    for cmd in (
        "analyze",
        "sweep",
        "regret-map",
        "calibration-sweep",
        "publish",
        "sql",
        "plot",
        "demo",
        "audit",
        "card",
    ):
        assert f"gdp {cmd}" in names
    assert {"gdp analyze gaussian", "gdp analyze subsampled_gaussian", "gdp export"} <= names


@pytest.fixture
def empty_report(tmp_path) -> Path:
    report = tmp_path / "reports" / "r.duckdb"
    publish_lake(tmp_path / "lake", report)
    return report


def _cases(tmp: Path, report: Path) -> list[tuple[list[str], str]]:
    spec_file = tmp / "bad_spec.yaml"
    spec_file.write_text(
        "name: s\nmechanism: subsampled_gaussian\ngrid: {noise_multiplier: [x], sampling_rate: 0.1, steps: 10}\n"
    )
    return [
        (["analyze", "--spec", str(tmp / "missing.yaml")], "missing.yaml"),
        (["analyze", "gaussian", "--noise-multiplier", "1", "--claim", "8,1e-5,FOO"], "unknown accountant 'FOO'"),
        (["analyze", "gaussian", "--noise-multiplier", "1", "--fpr", "2"], "--fpr: must be in [0, 1], got 2"),
        (["analyze", "gaussian", "--noise-multiplier", "1", "--delta", "0"], "--delta: must be in (0, 1), got 0"),
        (["analyze", "gaussian", "--noise-multiplier", "x"], "--noise-multiplier: invalid float value: 'x'"),
        (["analyze", "gaussian"], "--noise-multiplier"),
        (["analyze", "no_such_kind"], "no_such_kind"),
        (["analyze", "--spec", "{kind: gaussian, noise_multiplier: -1}"], "noise_multiplier"),
        (["analyze", "--spec", "{kind: [unclosed"], "--spec is not valid YAML/JSON"),
        (["sweep", str(tmp / "missing.yaml")], "missing.yaml"),
        (["sweep", str(spec_file)], "noise_multiplier"),
        (["sweep", str(tmp / "missing.yaml"), "--runner", "nope"], "nope"),
        (["sql", "DROP VIEW cells", "--report", str(report)], "read-only"),
        (["sql", "SELECT nope FROM cells", "--report", str(report)], "nope"),
        (["sql", "SELECT 1", "--report", str(tmp / "none.duckdb")], "none.duckdb"),
        (["export", str(report), "--report", str(report)], "already exists"),
        (["plot", "heatmap", "--report", str(report)], "--spec NAME --x AXIS --y AXIS"),
        (["plot", "curve", "--report", str(report)], "--cell"),
        (["card", "nobody", "--report", str(report)], "nobody"),
        (["sql", "SELECT 1", "--format", "xml", "--report", str(report)], "xml"),
        (["nope"], "nope"),
    ]


@pytest.mark.subprocess  # `gdp sql` runs a query in a child process
def test_user_errors_exit_2_with_one_line_and_no_traceback(tmp_path, empty_report, capsys):
    for argv, needle in _cases(tmp_path, empty_report):
        rc = main(argv)
        out, err = capsys.readouterr()
        assert rc == 2, (argv, out, err)
        assert needle in err, (argv, err)
        assert err.startswith("gdp") and "Traceback" not in err and "np.float64" not in err, (argv, err)
        # one error line (DuckDB's own message may add its caret lines below it)
        assert sum(line.startswith("gdp") for line in err.splitlines()) == 1, (argv, err)


def test_spec_accepts_yaml_and_composed_header_is_readable(tmp_path, capsys):
    spec = tmp_path / "m.yaml"
    spec.write_text(
        textwrap.dedent(
            """\
            kind: self_composed
            count: 4
            mechanism: {kind: gaussian, noise_multiplier: 4.0}
            """
        )
    )
    assert main(["analyze", "--spec", str(spec), "--delta", "1e-5"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == (
        "Privacy report: self_composed(mechanism=gaussian(noise_multiplier=4, sensitivity=1, neighbouring=add_remove), "
        "count=4)"
    )
    # 4 compositions of a 4-Gaussian: exactly (sqrt(4)/4 = 0.5)-GDP
    assert "mu-GDP          0.5   (exact bound" in out


def test_options_before_the_kind_are_kept(capsys):
    assert main(["analyze", "--json", "gaussian", "--noise-multiplier", "2", "--delta", "1e-5"]) == 0
    assert capsys.readouterr().out.lstrip().startswith("{")


@pytest.mark.subprocess  # a `gdp` process piped into a closed reader
def test_head_closing_the_pipe_is_not_an_error(empty_report):
    """`gdp analyze ... | head -1`: the reader leaves early; no BrokenPipe traceback."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "flows.cli", "analyze", "gaussian", "--noise-multiplier", "1", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
        cwd=ROOT,
    )
    proc.stdout.readline()
    proc.stdout.close()  # like head -1
    with proc.stderr:
        err = proc.stderr.read().decode()
    proc.wait(timeout=60)
    assert "Traceback" not in err and "BrokenPipe" not in err, err


_NO_PREFECT = """
import sys, time
from flows.cli import main
t = time.perf_counter()
rc = main(sys.argv[1:])
print(f"RESULT rc={rc} prefect={'prefect' in sys.modules} seconds={time.perf_counter() - t:.2f}")
"""


@pytest.mark.usefixtures("prefect_server")
def test_nothing_to_compute_answers_without_prefect(tiny_spec, tmp_path):
    from flows.grid_sweep import grid_sweep
    from flows.runners import make_task_runner

    spec = tiny_spec()
    lake, report = tmp_path / "lake", tmp_path / "reports" / "r.duckdb"
    grid_sweep.with_options(task_runner=make_task_runner("thread", max_workers=2))(
        spec_path=str(spec), lake=str(lake), report=str(report), workers=2
    )
    before = report.stat().st_mtime_ns
    args = ["sweep", str(spec), "--lake", str(lake), "--report", str(report)]
    out = subprocess.run(
        [sys.executable, "-c", _NO_PREFECT, *args], capture_output=True, text=True, env=_env(), cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    assert "8 cells (0 computed, 8 already in the lake); nothing to compute, report up to date" in out.stdout
    assert "RESULT rc=0 prefect=False" in out.stdout, out.stdout
    assert report.stat().st_mtime_ns == before  # nothing rewritten
    # publish needs no flow server either
    pub = subprocess.run(
        [sys.executable, "-c", _NO_PREFECT, "publish", "--lake", str(lake), "--report", str(report)],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=tmp_path,
    )
    assert pub.returncode == 0 and "RESULT rc=0 prefect=False" in pub.stdout, (pub.stdout, pub.stderr)
    # an edited spec is not "up to date": the flow runs
    edited = tiny_spec(steps=200, file="edited.yaml")
    from flows.command_common import _up_to_date

    ns = argparse.Namespace(lake=str(lake), report=str(report), workers=None)
    from tasks.spec import load_grid_spec

    assert _up_to_date(load_grid_spec(edited), ns) is None
    assert _up_to_date(load_grid_spec(spec), ns) is not None


@pytest.mark.usefixtures("prefect_server")
def test_calibration_at_the_search_limit_is_flagged(write_spec, tmp_path, capsys):
    """q = 0.001, T = 1: even sigma = 0.1 (the search's lower end) keeps the advantage far below 0.5, so the answer is
    only an upper bound on the minimal sigma: the row says so and the command lists it."""
    spec = write_spec("name: lim\ngrid: {sampling_rate: [0.001], steps: [1]}\ntarget: {advantage: 0.5}\n")
    lake, report = tmp_path / "lake", tmp_path / "r.duckdb"
    argv = ["calibration-sweep", str(spec), "--runner", "thread", "--lake", str(lake), "--report", str(report)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    from tasks.publish import query_report

    _, rows = query_report(report, "SELECT noise_multiplier, achieved, status FROM calibrations")
    ((sigma, achieved, status),) = rows
    assert sigma == 0.1 and achieved <= 0.5 and status.startswith("at_search_limit:")
    assert "0 without a solution" in out and "sampling_rate=0.001, steps=1: at_search_limit:" in out
    # a re-run is planned before Prefect: nothing to compute, the flagged row is still named
    before = report.stat().st_mtime_ns
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "0 computed; nothing to compute, report up to date" in out and "at_search_limit:" in out
    assert report.stat().st_mtime_ns == before


@pytest.mark.slow  # one real `gdp audit` process with its temporary Prefect server (~25 s)
@pytest.mark.subprocess  # a `gdp audit` process with its ephemeral Prefect server
def test_audit_is_quiet_and_reports_an_invalid_manifest_once(tmp_path):
    reg = tmp_path / "registry"
    reg.mkdir()
    (reg / "a.yaml").write_text(
        "name: tiny-a\nversion: 1\nprivacy_unit: example\ndataset_size: 10000\ndelta: 1.0e-5\n"
        "mechanism:\n  dpsgd: {noise_multiplier: 1.0, batch_size: 100, steps: 20}\n"
    )
    (reg / "bad.yaml").write_text("name: bad\nversion: x\n")
    env = _env()
    env.pop("PREFECT_API_URL", None)
    env.pop("PREFECT_LOGGING_LEVEL", None)
    env["PREFECT_HOME"] = str(tmp_path / "prefect-home")
    out = subprocess.run(
        [sys.executable, "-m", "flows.cli", "audit", str(reg), "--lake", str(tmp_path / "lake"), "--report",
         str(tmp_path / "r.duckdb")],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert out.returncode == 1, out.stderr  # one manifest failed
    assert out.stderr.count("bad.yaml") == 1, out.stderr  # once, in the command's own summary
    assert "| ERROR" not in out.stderr and "| WARNING" not in out.stderr and "absl" not in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    assert "1 model versions (1 computed, 0 unchanged)" in out.stdout
