"""A snapshot is the union of its staging files' pieces (tasks.snapshots): the report must show exactly the rows one
compaction of the whole lake shows, whatever pieces existed before, and a piece is built once.

Truth: the lake's rule, computed here independently with pandas from the staging and members files: for each spec,
each member (cell_id, eval_key) shows the row of that cell and eval_key computed last among all the spec's staging
files (ties: the smaller chunk_key); staging rows of other eval_keys or of cells that are not members show nowhere;
every curve point / epsilon / regret of the shown rows appears once in its table.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

SETTINGS = dict(deltas=(1e-5, 1e-6), fprs=(0.01, 0.1), representations=("gdp",), discretization=None)


def _chunk(spec: str, sigmas: tuple[float, ...], code: str = "test"):
    import gdpcore
    from tasks.evaluate import Chunk, EvalSettings

    settings = EvalSettings(SETTINGS["deltas"], SETTINGS["fprs"], SETTINGS["representations"], None, 1e-10, code)
    return Chunk(spec, "gaussian", tuple(gdpcore.Gaussian(noise_multiplier=s).to_json() for s in sigmas), settings)


def _write(lake: Path, chunk, table: pa.Table | None = None, key: str | None = None) -> Path:
    """A staging file of ``chunk``'s rows (or of ``table``) under ``key`` (default: the chunk's own key)."""
    from tasks.evaluate import compute_chunk_table
    from tasks.lake import atomic_write_parquet, chunk_path

    table = compute_chunk_table(chunk, "run") if table is None else table
    key = key or chunk.key
    table = table.set_column(table.schema.get_field_index("chunk_key"), "chunk_key", pa.array([key] * len(table)))
    path = chunk_path(lake, chunk.spec_name, chunk.kind, key)
    atomic_write_parquet(table, path, {"chunk_key": key})
    return path


def _members(lake: Path, spec: str, chunks) -> None:
    import gdpcore
    from tasks.lake import write_members

    cells = [gdpcore.content_hash_of_json(m) for c in chunks for m in c.mechanisms]
    write_members(lake, spec, f"hash-{spec}-{len(cells)}", cells, chunks[0].settings.eval_key)


def _expected(lake: Path) -> pd.DataFrame:
    """The whole-lake rule, from the files (pandas, not DuckDB)."""
    frames = []
    for path in sorted(lake.glob("staging/spec=*/mechanism=*/chunk-*.parquet")):
        df = pq.read_table(path).to_pandas()
        df["spec"] = path.parent.parent.name.removeprefix("spec=")
        frames.append(df)
    staging = pd.concat(frames, ignore_index=True)
    members = []
    for path in sorted(lake.glob("members/spec=*/members.parquet")):
        m = pq.read_table(path).to_pandas()[["cell_id", "eval_key", "grid_index"]]
        m["spec"] = path.parent.name.removeprefix("spec=")
        members.append(m)
    live = staging.merge(pd.concat(members), on=["spec", "cell_id", "eval_key"])
    live = live.sort_values(["spec", "cell_id", "computed_at", "chunk_key"], ascending=[True, True, False, True])
    return live.drop_duplicates(["spec", "cell_id"], keep="first")


def _shown(report: Path, sql: str) -> list[tuple]:
    from tasks.report_query import query_report

    return sorted(query_report(report, sql)[1])


def _check(lake: Path, report: Path) -> None:
    from tasks.publish import publish_lake

    publish_lake(lake, report)
    want = _expected(lake)
    assert _shown(report, "SELECT spec, cell_id, mu, run_id, grid_index FROM cells") == sorted(
        zip(want.spec, want.cell_id, want.mu, want.run_id, want.grid_index, strict=True)
    )
    curves = [(s, c, float(f), float(n)) for s, c, fs, ns in zip(want.spec, want.cell_id, want.curve_fpr,
                                                                  want.curve_fnr, strict=True) for f, n in zip(fs, ns, strict=True)]  # fmt: skip
    assert _shown(report, "SELECT spec, cell_id, fpr, fnr FROM curves") == sorted(curves)
    eps = [(s, c, float(d)) for s, c, ds in zip(want.spec, want.cell_id, want.deltas, strict=True) for d in ds]
    assert _shown(report, "SELECT spec, cell_id, delta FROM epsilons") == sorted(eps)
    assert _shown(report, "SELECT count(*) FROM regrets") == [(len(want),)]  # one gdp regret per cell


def _later(table: pa.Table, mu_shift: float) -> pa.Table:
    """The same cells recomputed later (another run): a later computed_at and a marked mu."""
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    i = table.schema.get_field_index("computed_at")
    table = table.set_column(i, table.schema.field(i), pa.array([later] * len(table), table.schema.field(i).type))
    i = table.schema.get_field_index("mu")
    table = table.set_column(i, "mu", pa.array([m + mu_shift for m in table.column("mu").to_pylist()]))
    i = table.schema.get_field_index("run_id")
    return table.set_column(i, "run_id", pa.array(["later"] * len(table)))


@pytest.mark.parametrize("publish_between", [False, True])
def test_snapshot_shows_what_one_whole_lake_compaction_shows(tmp_path, publish_between):
    from tasks.evaluate import compute_chunk_table
    from tasks.snapshots import PIECES

    lake, report = tmp_path / "lake", tmp_path / "r.duckdb"
    a1, a2 = _chunk("a", (0.8, 1.0, 1.3)), _chunk("a", (2.0, 3.0))
    b1 = _chunk("b", (1.0, 5.0))  # sigma 1.0 is a cell of both specs: shown in each
    for c in (a1, a2, b1):
        _write(lake, c)
    _members(lake, "a", [a1, a2])
    _members(lake, "b", [b1])
    if publish_between:  # pieces exist already for some files: the result must not depend on it
        _check(lake, report)
    # a cell of a1 recomputed later in another file: that file's row wins, a1's piece loses it
    again = compute_chunk_table(dataclasses.replace(a1, mechanisms=a1.mechanisms[1:2]), "run")
    _write(lake, a1, _later(again, 10.0), key="f" * 32)
    # rows of another code version (another eval_key) and of a cell that is no member: shown nowhere
    _write(lake, _chunk("a", (1.0, 7.0), code="old"))
    _check(lake, report)
    assert _shown(report, "SELECT count(*) FROM cells WHERE run_id = 'later'") == [(1,)]
    assert len(list((lake / "curated" / PIECES).iterdir())) == 5  # one piece per staging file of a member spec


def test_a_piece_is_built_once_and_rebuilt_when_its_members_change(tmp_path):
    from tasks.publish import publish_lake
    from tasks.snapshots import PIECES, piece_for

    lake, report = tmp_path / "lake", tmp_path / "r.duckdb"
    a1, a2 = _chunk("a", (0.8, 1.0)), _chunk("a", (2.0,))
    f1 = _write(lake, a1)
    _members(lake, "a", [a1])
    piece = piece_for(lake, f1)  # what a sweep does as soon as the chunk's file is in the lake
    assert piece is not None
    built = (piece / "piece.json").stat().st_mtime_ns
    _write(lake, a2)
    _members(lake, "a", [a1, a2])  # the spec's cell set changed: a1's piece is another one now
    _check(lake, report)
    pieces = sorted(p.name for p in (lake / "curated" / PIECES).iterdir())
    assert len(pieces) == 2 and piece.name not in pieces  # the stale piece was collected
    again = piece_for(lake, f1)
    assert again is not None and again.name in pieces
    before = (again / "piece.json").stat().st_mtime_ns
    publish_lake(lake, report)  # nothing changed: the same snapshot, nothing rebuilt
    assert (again / "piece.json").stat().st_mtime_ns == before and built > 0
    assert piece_for(lake, f1) == again


def test_no_members_no_piece(tmp_path):
    from tasks.snapshots import piece_for

    lake = tmp_path / "lake"
    f = _write(lake, _chunk("a", (1.0,)))
    assert piece_for(lake, f) is None
