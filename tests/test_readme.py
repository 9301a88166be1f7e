"""The README runs as tests: each ```python block (in order, fresh namespace) prints the numbers its comments state,
and the `gdp analyze` report it shows is the report the command prints."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
TEXT = README.read_text(encoding="utf-8")
BLOCKS = re.findall(r"```python\n(.*?)```", TEXT, flags=re.S)


def _run_block(index: int, capsys) -> str:
    exec(compile(BLOCKS[index], f"README.md[python block {index}]", "exec"), {})
    return capsys.readouterr().out


def _block(needle: str) -> int:
    (index,) = [i for i, block in enumerate(BLOCKS) if needle in block]
    return index


def _agrees(shown: str, printed: float) -> bool:
    """``printed`` is the number ``shown`` in the README, to within one unit of the README's last digit."""
    decimals = len(shown.split(".")[1]) if "." in shown else 0
    return abs(printed - float(shown)) <= 1.0001 * 10.0**-decimals


def _numbers(line: str) -> list[float]:
    return [float(x) for x in re.findall(r"\d+\.\d+(?:e-?\d+)?", line)]


def test_readme_has_examples():
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs_and_prints(index, capsys):
    out = _run_block(index, capsys)
    assert len(out.splitlines()) == BLOCKS[index].count("print(")  # one line per print, no warnings or chatter


def test_the_de_et_al_report_prints_the_tpr_the_comment_states(capsys):
    index = _block('report.tpr(0.1))  # "at most')
    percent = re.search(r'report\.tpr\(0\.1\)\)  # "at most (\d+)%"', BLOCKS[index]).group(1)
    (line,) = [line for line in _run_block(index, capsys).splitlines() if line.startswith("TPR at FPR 10% <=")]
    assert round(100 * _numbers(line)[0]) == int(percent), line


def test_the_claim_recheck_prints_the_epsilons_the_comment_states(capsys):
    index = _block("gdpcore.check_claim(")
    rdp = re.search(r"dp_accounting: (\d+\.\d+)\)", BLOCKS[index]).group(1)
    pld = re.search(r"\((\d+\.\d+) <= 8\)", BLOCKS[index]).group(1)
    summary = _run_block(index, capsys).splitlines()[-1]
    rdp_printed = float(re.search(r"rdp gives (\d+\.\d+)", summary).group(1))
    pld_printed = float(re.search(r"pessimistic eps (\d+\.\d+) certifies", summary).group(1))
    assert _agrees(rdp, rdp_printed) and _agrees(pld, pld_printed), summary


def test_the_tf_privacy_example_prints_tf_privacys_statement(capsys):
    index = _block("from_tf_privacy(")
    shown = re.search(r"its PLD statement prints (\d+\.\d+)", BLOCKS[index]).group(1)
    assert _run_block(index, capsys).strip() == f"eps(1e-5) <= {shown}"


def test_the_report_shown_is_the_report_printed(capsys):
    """Every line of the README's `gdp analyze` sample, `...` standing for elided text, is the command's output."""
    from flows.cli import main

    sample = TEXT.split("## What a report looks like", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    command, *shown = sample.rstrip("\n").splitlines()
    assert command.startswith("$ gdp ")
    assert main(shlex.split(command)[2:]) == 0
    printed = capsys.readouterr().out.splitlines()
    if shown[-1].strip() == "...":  # the README stops before the end of the report
        shown = shown[:-1]
    assert len(printed) > len(shown)
    for want, got in zip(shown, printed, strict=False):
        pattern = ".*".join(re.escape(part) for part in want.split("..."))
        assert re.fullmatch(pattern, got), f"README shows {want!r}, gdp analyze prints {got!r}"


def test_readme_quickstart_is_the_two_make_commands():
    quick = TEXT.split("## Quickstart", 1)[1].split("##", 1)[0]
    commands = [
        line.split("#")[0].strip() for line in re.findall(r"```bash\n(.*?)```", quick, flags=re.S)[0].splitlines()
    ]
    assert commands == ["make demo", "make test"]
    makefile = (README.parent / "Makefile").read_text(encoding="utf-8")
    assert "\ndemo:" in makefile
    assert "\ntest:" in makefile
    assert "make test" in (README.parent / ".ci" / "run").read_text(encoding="utf-8")
