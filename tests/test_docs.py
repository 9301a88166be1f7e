"""Every citation resolves inside the repository, so a reader of a fresh clone can follow each one.

Reference numbers live in docs/references.md with their sources. No tracked .py / .md file may point at material
that is not in the repository (a digest, the peer-benchmark notes, the workspace folder beside the checkout) or at
a test file that does not exist, and every section id cited next to docs/references.md must exist there.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REFERENCES = ROOT / "docs" / "references.md"

# Material outside the repository. (Built from parts so that this file does not match itself.)
FORBIDDEN = [
    ("a digest", re.compile(r"(?<![.a-z])" + "digest" + r"(?!\()", re.IGNORECASE)),
    ("the peer-benchmark notes", re.compile("peer_" + "benchmarks")),
    ("the ecosystem / accounting anchors notes", re.compile(r"anchors[_ ](report|ecosystem|accounting)", re.I)),
    ("the workspace folder beside the checkout", re.compile(r"\.\./" + "sha" + "red")),
]
TEST_FILE = re.compile(r"\btests/[\w/]+\.py\b")
SECTION_ID = re.compile(r"\b(S00[0-4](?:-\d+)?|[PCM]-\d+)\b")


def _tracked_files() -> list[Path]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "*.py", "*.md"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout
        files = [ROOT / line for line in out.splitlines() if line]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout (e.g. an sdist): walk the tree
        skip = {".git", ".venv", "build", "node_modules"}
        files = [
            p
            for p in ROOT.rglob("*")
            if p.suffix in (".py", ".md") and not skip.intersection(p.relative_to(ROOT).parts)
        ]
    return sorted(p for p in files if p.is_file() and p.relative_to(ROOT).parts[0] != "docs")


def _defined_sections() -> set[str]:
    text = REFERENCES.read_text(encoding="utf-8")
    return set(re.findall(r"^#{2,3} (S00[0-4](?:-\d+)?|[PCM](?:-\d+)?)[: ]", text, flags=re.MULTILINE))


def test_references_file_has_the_sections_it_promises():
    sections = _defined_sections()
    assert {"S000", "S001", "S002", "S003", "S004", "P", "C", "M"} <= sections
    assert {"S000-1", "S001-3", "S003-5", "S004-2", "P-3", "C-2", "M-1"} <= sections


def test_no_citation_points_outside_the_repository():
    me = Path(__file__).resolve()
    offenders = []
    for path in _tracked_files():
        rel = path.relative_to(ROOT).as_posix()
        if path == me:
            continue
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for what, pattern in FORBIDDEN:
                if pattern.search(line):
                    offenders.append(f"{rel}:{lineno}: cites {what}: {line.strip()[:100]}")
            for cited in TEST_FILE.findall(line):
                if not (ROOT / cited).is_file():
                    offenders.append(f"{rel}:{lineno}: cites {cited}, which does not exist")
    assert offenders == [], "\n".join(offenders)


def test_cited_reference_sections_exist():
    sections = _defined_sections()
    missing = []
    for path in _tracked_files():
        text = path.read_text(encoding="utf-8")
        if "docs/references.md" not in text:
            continue
        rel = path.relative_to(ROOT).as_posix()
        for lineno, line in enumerate(text.splitlines(), 1):
            missing += [f"{rel}:{lineno}: {sid}" for sid in SECTION_ID.findall(line) if sid not in sections]
    assert missing == [], "\n".join(missing)
