"""Every file gdp-audit writes is written atomically and never through a symbolic link (tasks/safe_write.py).

A shared card folder with ``card.md -> ~/.bashrc`` planted in it made ``write_card`` overwrite the link's target;
``safe_join`` checked only the folder. Now a link at the target, or at a folder between the output root and it, is
refused with one line, the link's target is untouched, and no temporary is left behind - for the cards and their
plot, the HF README merge, lake Parquet files, snapshots, the published report and exports.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tasks.safe_write import UnsafePathError, atomic_output, atomic_write, atomic_write_text

VICTIM_TEXT = "the victim's own content\n"


@pytest.fixture(scope="module")
def row():
    """A real audit row (tasks.audit) of a small DP-SGD description."""
    from tasks.audit import compute_audit_row
    from tasks.mlflow_registry import description_to_manifest

    desc = {"dp.noise_multiplier": "1.1", "dp.sampling_rate": "0.01", "dp.steps": "50", "dp.delta": "1e-5"}
    return compute_audit_row(description_to_manifest(desc, name="m", version=1), "test")


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "outside" / "victim.txt"
    victim.parent.mkdir(parents=True, exist_ok=True)
    victim.write_text(VICTIM_TEXT)
    return victim


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob(".*.tmp-*")) if folder.exists() else []


@pytest.mark.parametrize("name", ["card.md", "model_card.yaml", "curve.png", "audit_key"])
def test_a_link_planted_at_a_card_file_is_refused(tmp_path, row, name):
    from tasks.cards import write_card

    victim = _victim(tmp_path)
    cards = tmp_path / "cards"
    (cards / "m" / "v1").mkdir(parents=True)
    (cards / "m" / "v1" / name).symlink_to(victim)
    with pytest.raises(UnsafePathError, match=rf"refusing to write .*{name}: it is a symbolic link"):
        write_card(row, cards)
    assert victim.read_text() == VICTIM_TEXT
    assert (cards / "m" / "v1" / name).is_symlink() and _leftovers(cards) == []


def test_a_linked_folder_inside_the_card_root_is_refused(tmp_path, row):
    from tasks.cards import write_card

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    cards = tmp_path / "cards"
    cards.mkdir()
    (cards / "m").symlink_to(elsewhere, target_is_directory=True)  # safe_join resolves it inside? no: refused
    with pytest.raises(ValueError, match="symbolic link|outside"):
        write_card(row, cards)
    assert list(elsewhere.iterdir()) == []


def test_the_card_root_itself_may_be_a_link_and_cards_are_complete(tmp_path, row):
    """The root is the user's choice (a linked output folder is fine); below it everything is written in place."""
    from tasks.cards import write_card

    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "cards").symlink_to(real, target_is_directory=True)
    paths = write_card(row, tmp_path / "cards")
    for p in paths.values():
        assert Path(p).is_file() and not Path(p).is_symlink()
    assert (real / "m" / "v1" / "card.md").read_text().startswith("# Privacy card: m v1")
    assert (real / "m" / "v1" / "audit_key").read_text().startswith(row["audit_key"])
    assert _leftovers(real) == []


def test_the_hf_readme_merge_does_not_follow_a_link(tmp_path, row):
    pytest.importorskip("huggingface_hub")  # the gdp-audit[hf] extra
    from tasks.cards import merge_into_readme

    victim = _victim(tmp_path)
    readme = tmp_path / "repo" / "README.md"
    readme.parent.mkdir()
    readme.symlink_to(victim)
    with pytest.raises(UnsafePathError, match="README.md: it is a symbolic link"):
        merge_into_readme(readme, row)
    assert victim.read_text() == VICTIM_TEXT


def test_lake_parquet_plot_snapshot_and_report_refuse_a_planted_link(tmp_path):
    from tasks.lake import atomic_write_parquet
    from tasks.plots import _save
    from tasks.publish import publish_lake
    from tasks.snapshots import write_snapshot

    victim = _victim(tmp_path)
    table = pa.table({"a": [1, 2, 3]})
    targets = {
        "parquet": tmp_path / "lake" / "members" / "members.parquet",
        "png": tmp_path / "plots" / "p.png",
        "snapshot": tmp_path / "lake2" / "curated" / "snap1",
        "report": tmp_path / "reports" / "r.duckdb",
    }
    for t in targets.values():
        t.parent.mkdir(parents=True, exist_ok=True)
        t.symlink_to(victim)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure()
    writers = {
        "parquet": lambda: atomic_write_parquet(table, targets["parquet"], {"why": "test"}),
        "png": lambda: _save(fig, targets["png"]),
        "snapshot": lambda: write_snapshot(targets["snapshot"], lambda tmp: (tmp / "x").mkdir()),
        "report": lambda: publish_lake(tmp_path / "lake3", targets["report"]),
    }
    for what, write in writers.items():
        with pytest.raises(UnsafePathError, match="it is a symbolic link"):
            write()
        assert victim.read_text() == VICTIM_TEXT, what
        assert targets[what].is_symlink() and _leftovers(targets[what].parent) == [], what
    plt.close(fig)


@pytest.mark.parametrize("fmt", ["duckdb", "parquet"])
def test_export_to_a_planted_link_writes_nothing(tmp_path, fmt):
    from tasks.export import export_report
    from tasks.publish import publish_lake

    report = tmp_path / "reports" / "r.duckdb"
    publish_lake(tmp_path / "lake", report)
    victim = _victim(tmp_path)
    out = tmp_path / "exports" / "out"
    out.parent.mkdir()
    out.symlink_to(victim)
    with pytest.raises(ValueError, match="already exists"):
        export_report(report, out, fmt=fmt)
    assert victim.read_text() == VICTIM_TEXT and _leftovers(out.parent) == []


def test_the_helper_is_atomic_and_no_follow(tmp_path):
    """The helper's own contract: content in place, no temporary left, a failing writer leaves the old file."""
    target = tmp_path / "a" / "b" / "file.txt"
    atomic_write_text(target, "one", root=tmp_path)
    assert target.read_text() == "one"

    def failing(f):
        f.write(b"partial")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        atomic_write(target, failing, root=tmp_path)
    assert target.read_text() == "one" and _leftovers(tmp_path) == []
    atomic_write(target, lambda f: pq.write_table(pa.table({"x": [1]}), f))
    assert pq.read_table(target).column("x").to_pylist() == [1]
    with pytest.raises(UnsafePathError, match="outside the output folder"):
        atomic_write_text(tmp_path.parent / "escape.txt", "x", root=tmp_path)
    # a writer that creates by name: a link it leaves instead of a file is refused, and removed
    victim = _victim(tmp_path)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        with atomic_output(tmp_path / "db.duckdb") as tmp:
            os.symlink(victim, tmp)
    assert victim.read_text() == VICTIM_TEXT and not (tmp_path / "db.duckdb").exists()
    assert _leftovers(tmp_path) == []


def test_a_fifo_or_folder_at_the_target_is_never_replaced(tmp_path):
    """`gdp publish --report /dev/zero` replaced the device node with the report: a device, FIFO or socket at the
    target is refused by every writer, and a folder by the file writer (a FIFO stands in for the device here)."""
    from tasks.publish import publish_lake

    fifo = tmp_path / "pipe.duckdb"
    os.mkfifo(fifo)
    with pytest.raises(UnsafePathError, match="device, FIFO or socket"):
        publish_lake(tmp_path / "lake", fifo)
    with pytest.raises(UnsafePathError, match="device, FIFO or socket"):
        atomic_write_text(fifo, "x")
    assert fifo.is_fifo() and _leftovers(tmp_path) == []
    folder = tmp_path / "card.md"
    folder.mkdir()
    with pytest.raises(UnsafePathError, match="not a regular file"):
        atomic_write_text(folder, "x")
    assert folder.is_dir() and _leftovers(tmp_path) == []


def test_a_planted_card_link_fails_its_version_alone_in_the_audit(tmp_path, prefect_server):
    """The audit flow: the version whose card folder holds the link is reported (one line) and not carded; the other
    version is audited and carded, and the link's target is untouched."""
    from flows.privacy_audit import privacy_audit
    from tests.registry.conftest import TINY_A, TINY_B

    reg = tmp_path / "registry"
    reg.mkdir()
    (reg / "a.yaml").write_text(TINY_A.format(version=1, sigma=1.0))
    (reg / "b.yaml").write_text(TINY_B)
    victim = _victim(tmp_path)
    cards = tmp_path / "cards"
    (cards / "tiny-a" / "v1").mkdir(parents=True)
    (cards / "tiny-a" / "v1" / "card.md").symlink_to(victim)
    s = privacy_audit(
        registry=str(reg), lake=str(tmp_path / "lake"), report=str(tmp_path / "r.duckdb"), cards_dir=str(cards)
    )
    assert sorted(s.models) == ["tiny-a:1", "tiny-b:1"] and s.cards_written == ["tiny-b:1"]
    why = s.failed["tiny-a:1"]
    assert why.startswith("tiny-a:1: card not written: UnsafePathError: refusing to write ") and "\n" not in why
    assert victim.read_text() == VICTIM_TEXT and (cards / "tiny-b" / "v1" / "card.md").is_file()
