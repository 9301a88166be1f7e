"""The README's Python examples run as tests (each ```python block, in order, in a fresh namespace)."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_readme_has_examples():
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index, capsys):
    exec(compile(BLOCKS[index], f"README.md[python block {index}]", "exec"), {})
    assert capsys.readouterr().out  # every example prints what it computes


def test_readme_quickstart_is_the_two_make_commands():
    text = README.read_text(encoding="utf-8")
    quick = text.split("## Quickstart", 1)[1].split("##", 1)[0]
    commands = [
        line.split("#")[0].strip() for line in re.findall(r"```bash\n(.*?)```", quick, flags=re.S)[0].splitlines()
    ]
    assert commands == ["make demo", "make test"]
    makefile = (README.parent / "Makefile").read_text(encoding="utf-8")
    assert "\ndemo:" in makefile and "\ntest:" in makefile
    assert "make test" in (README.parent / ".ci" / "run").read_text(encoding="utf-8")
