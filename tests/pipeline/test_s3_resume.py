"""Crash and resume on a lake on object storage (tasks/object_store.py), and ``gdp regret-map`` / ``gdp plot`` over
a report on S3, against moto's S3 server on 127.0.0.1 (the fixtures of tests/pipeline/conftest.py).

The kill test is the object-storage twin of tests/robustness/test_killed_run.py: ``gdp sweep`` is SIGKILLed with its
whole process group (Prefect's server, the pool workers) once at least one chunk is on the store, a half-written and
a duplicate object are then planted on the store, and the sweep is resumed from the same mirror or from an empty one
(another machine). Every cell must then be in the report exactly once, no chunk already on the store may be
computed again, and the plain-Gaussian cells must equal their closed form.
"""

from __future__ import annotations

import io
import math
import os
import re
import signal
import struct
import sys
from pathlib import Path

import pytest

from tests.pipeline.conftest import aws_env, run_gdp, s3_env
from tests.robustness.conftest import Proc, group_members, wait_for

pytest.importorskip("s3fs", reason="the s3 extra (s3fs) is not installed: pip install -e '.[s3]'")
pytest.importorskip("moto", reason="the test extra's moto[server] is not installed")

pytestmark = [pytest.mark.subprocess, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
SPEC_NAME = "resumed"
RESUME_SPEC = """\
name: {name}
mechanism: subsampled_gaussian
grid:
  noise_multiplier: [0.7, 1.0, 1.5]
  sampling_rate: [0.02, 1.0]     # 1.0: plain Gaussians, exactly (sqrt(T)/sigma)-GDP
  steps: [300, 1000, 3000]
deltas: [1.0e-5, 1.0e-6]
fprs: [1.0e-3, 0.1]
representations: [gdp]
chunk_size: 2
"""
N_CELLS = 18
SUMMARY = re.compile(
    r"(\d+) cells \((\d+) computed, (\d+) already in the lake\), (\d+) chunk\(s\) computed, (\d+) failed"
)


def _expected_cells(spec: Path) -> list[str]:
    import gdpcore
    from tasks.spec import load_grid_spec

    return sorted(gdpcore.mechanism_from_dict(c).content_hash for c in load_grid_spec(spec).iter_cells())


def _staged(bucket: str) -> dict[str, tuple[str, list[str]]]:
    """{key: (ETag, cell ids)} of every staging chunk of the spec on the store; an object that is not Parquet has
    no cell ids."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tasks import object_store as store

    lake = store.parse_url(f"s3://{bucket}/lake", "--lake")
    out = {}
    for rel, obj in store.list_objects(lake, f"staging/spec={SPEC_NAME}/").items():
        body = store.get_bytes(lake.child(rel), "--lake") or b""
        try:
            cells = pq.read_table(io.BytesIO(body), columns=["cell_id"]).column("cell_id").to_pylist()
        except (OSError, ValueError, pa.ArrowException):  # not Parquet (e.g. truncated): no cells
            cells = []
        out[rel] = (obj.etag, cells)
    return out


def _mirror_cells(mirror: Path) -> set[str]:
    """Cell ids in the readable staging chunks of a local mirror (what a resume there finds without the store)."""
    import pyarrow.parquet as pq

    from tasks.lake import check_parquet

    cells: set[str] = set()
    for p in mirror.rglob(f"staging/spec={SPEC_NAME}/mechanism=*/chunk-*.parquet"):
        if check_parquet(p) is None:
            cells.update(pq.read_table(p, columns=["cell_id"]).column("cell_id").to_pylist())
    return cells


def _sweep_argv(spec: Path, bucket: str, runner: str) -> list[str]:
    return [
        "sweep",
        str(spec),
        "--runner",
        runner,
        "--workers",
        "1",  # chunks finish one by one: the kill lands between the first push and the last chunk
        "--lake",
        f"s3://{bucket}/lake",
        "--report",
        f"s3://{bucket}/reports/privacy.duckdb",
        "--no-progress",
    ]


def _kill_after_first_push(spec: Path, bucket: str, runner: str, env: dict[str, str], log: Path) -> None:
    """Start the sweep in its own session; SIGKILL its whole process group once a chunk is on the store."""
    from tasks import object_store as store

    flow = Proc([sys.executable, "-m", "flows.cli", *_sweep_argv(spec, bucket, runner)], log, env, ROOT)
    try:
        lake = store.parse_url(f"s3://{bucket}/lake", "--lake")
        wait_for(  # a listing only: the kill lands within one poll of the first push
            lambda: store.list_objects(lake, f"staging/spec={SPEC_NAME}/") or not flow.alive(),
            400,
            "the first chunk on the store",
            0.02,
        )
        assert flow.alive(), "the sweep finished before the kill:\n" + flow.log()[-3000:]
        os.killpg(flow.pid, signal.SIGKILL)  # the flow, Prefect's server, the pool workers: the group it leads
        assert flow.popen.wait(timeout=30) == -signal.SIGKILL
        wait_for(lambda: not group_members(flow.pid), 30, "the killed sweep's process group to exit", 0.2)
    finally:
        flow.stop()


def _sql(query: str, bucket: str, env: dict[str, str], cwd: Path) -> list[list[str]]:
    out = run_gdp(
        "sql", query, "--report", f"s3://{bucket}/reports/privacy.duckdb", "--format", "csv", cwd=cwd, env=env
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return [line.split(",") for line in out.stdout.strip().splitlines()[1:]]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mirror", "runner"),
    [("same", "process"), ("empty", "thread")],
    ids=["same-mirror-process-pool", "empty-mirror-thread"],
)
def test_sigkilled_sweep_resumes_every_cell_exactly_once(s3, s3_server, write_spec, tmp_path, mirror, runner):
    """SIGKILL mid-sweep on an s3:// lake, plant a torn and a duplicate chunk, resume from the same / an empty
    mirror. Truth: the spec's own cell set (content hashes, each once), the chunks already on the store (never
    computed again, objects unchanged), and Dong, Roth & Su 2022, Cor. 3.3 for the sampling_rate = 1 cells (T-fold
    composition of (1/sigma)-GDP: exactly sqrt(T)/sigma-GDP)."""
    from tasks import object_store as store

    spec = write_spec(RESUME_SPEC.format(name=SPEC_NAME), "resume.yaml")
    expected = _expected_cells(spec)
    assert len(expected) == N_CELLS
    env = s3_env({**aws_env(s3_server), "GDP_CACHE": str(tmp_path / "cache-killed")})
    _kill_after_first_push(spec, s3, runner, env, tmp_path / "killed.log")

    on_store = _staged(s3)
    stored_cells = [c for _, cells in on_store.values() for c in cells]
    assert 0 < len(stored_cells) < N_CELLS, on_store  # killed mid-sweep, after at least one push
    assert len(stored_cells) == len(set(stored_cells))  # no cell stored twice by the killed run
    assert set(stored_cells) <= set(expected)
    print(f"killed with {len(stored_cells)} of {N_CELLS} cells on the store ({len(on_store)} chunks)")

    # What a store could hold after a crash anyway: a truncated object (a prefix of a real chunk: "PAR1" and no
    # footer) and the same chunk stored twice under another key (its cells must be counted once).
    lake = store.parse_url(f"s3://{s3}/lake", "--lake")
    first_key = sorted(on_store)[0]
    body = store.get_bytes(lake.child(first_key), "--lake") or b""
    folder = first_key.rsplit("/", 1)[0]
    torn, duplicate = f"{folder}/chunk-{'0' * 16}.parquet", f"{folder}/chunk-{'f' * 16}.parquet"
    assert store.put_if_absent(lake.child(torn), body[: len(body) // 2])
    assert store.put_if_absent(lake.child(duplicate), body)
    before = _staged(s3)

    if mirror == "same":
        killed_mirror = store.mirror_root(lake)
        present = set(stored_cells) | _mirror_cells(killed_mirror)  # a chunk written but not pushed is reused too
    else:
        env = {**env, "GDP_CACHE": str(tmp_path / "cache-other-machine")}  # nothing local: all from the store
        present = set(stored_cells)
    work = tmp_path / "work"
    work.mkdir()
    again = run_gdp(*_sweep_argv(spec, s3, runner), cwd=work, env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    m = SUMMARY.search(again.stdout)
    assert m, again.stdout
    total, computed, reused, _, failed = map(int, m.groups())
    assert (total, computed, reused, failed) == (N_CELLS, N_CELLS - len(present), len(present), 0)

    after = _staged(s3)
    assert torn not in after  # set aside, not read
    assert [k for k in store.list_objects(lake, "_quarantine/") if k.endswith(torn)]
    for key, (etag, _) in before.items():  # every chunk already on the store kept, unchanged
        if key != torn:
            assert after[key][0] == etag, key
    new_cells = [c for key, (_, cells) in after.items() if key not in before for c in cells]
    assert not set(new_cells) & set(stored_cells)  # no chunk on the store computed again
    assert sorted({*new_cells, *stored_cells}) == expected  # the store holds every cell
    if mirror == "same":  # what the SIGKILL left in the mirror (`.*.tmp-*`) is cleared, never pushed
        assert not [p for p in store.mirror_root(lake).rglob("*") if ".tmp-" in p.name]
    assert not [k for k in after if ".tmp-" in k]

    reader = tmp_path / "reader"
    reader.mkdir()
    where = f"FROM cells WHERE spec = '{SPEC_NAME}'"
    rows = _sql(  # one `gdp sql` (each downloads the report from the store)
        f"SELECT (SELECT count(*) {where}), (SELECT count(DISTINCT cell_id) {where}), cell_id, noise_multiplier, "
        f"sampling_rate, steps, mu {where} ORDER BY cell_id",
        s3,
        env,
        reader,
    )
    assert {(int(r[0]), int(r[1])) for r in rows} == {(N_CELLS, N_CELLS)}  # exactly once: the duplicate counted once
    ids = [r[2] for r in rows]
    assert ids == expected
    exact = [(float(sigma), int(steps), float(mu)) for _, _, _, sigma, q, steps, mu in rows if float(q) == 1.0]
    assert len(exact) == N_CELLS // 2
    for sigma, steps, mu in exact:
        assert mu == pytest.approx(math.sqrt(steps) / sigma, rel=1e-9)


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _png_size(path: Path) -> tuple[int, int]:
    """Width and height from the IHDR chunk after the signature (PNG specification, section 11.2.2)."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, path
    assert data[12:16] == b"IHDR", path
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def _assert_png(path: Path) -> None:
    w, h = _png_size(path)
    assert 200 <= w <= 5000 and 200 <= h <= 5000, (path, w, h)  # a figure, not an empty canvas
    assert path.stat().st_size > 5_000, path  # axes, labels and colour: not a blank image


def test_regret_map_and_plot_over_a_report_on_s3(s3, s3_server, tiny_spec, tmp_path):
    """``gdp regret-map`` with an s3:// lake and report: the sweep publishes to the store, the PNGs go to
    ./plots/<spec>/ (said in the output; nothing uploaded), each a valid PNG; the printed worst-regret cell is the
    argmax of gdp_regret over the spec's cells as ``gdp sql`` reads the same report. ``gdp plot`` reads it too."""
    from tasks import object_store as store

    lake, report = f"s3://{s3}/lake", f"s3://{s3}/reports/privacy.duckdb"
    spec = tiny_spec()
    work = tmp_path / "work"
    work.mkdir()
    env = s3_env({**aws_env(s3_server), "GDP_CACHE": str(tmp_path / "cache")})
    argv = ["regret-map", str(spec), "--runner", "thread", "--lake", lake, "--report", report, "--no-progress"]
    out = run_gdp(*argv, "--x", "sampling_rate", "--y", "noise_multiplier", cwd=work, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    folder = work / "plots" / "tiny"
    assert f"plots: {folder}" in out.stdout and "object storage" in out.stdout, out.stdout
    assert f"report: {report}" in out.stdout
    printed = dict(re.findall(r"^  (gdp_regret|mu|curve)\s+(\S+)", out.stdout, flags=re.M))
    assert set(printed) == {"gdp_regret", "mu", "curve"}, out.stdout
    for path in printed.values():
        assert Path(path).parent == folder, path
        _assert_png(Path(path))
    assert sorted(p.name for p in folder.iterdir()) == sorted(Path(p).name for p in printed.values())
    assert not (work / "s3:").exists()
    assert not [k for k in store.list_objects(store.parse_url(f"s3://{s3}", "bucket"), "") if k.endswith(".png")]

    worst = re.search(r"\(worst-regret cell (\S+)\)", out.stdout)
    assert worst, out.stdout
    reader = tmp_path / "reader"
    reader.mkdir()
    rows = _sql("SELECT cell_id, gdp_regret, status FROM cells WHERE spec = 'tiny'", s3, env, reader)
    assert len(rows) == 8
    regrets = {cid: float(r) for cid, r, status in rows if status == "ok" and r}
    top = max(regrets.values())
    assert worst.group(1) in regrets and regrets[worst.group(1)] == top
    assert worst.group(1) == min(c for c, r in regrets.items() if r == top)  # ties: the smallest cell_id, as printed

    # gdp plot over the same s3:// report, from another folder: default ./plots/..., said on stderr.
    heat = run_gdp(
        "plot", "heatmap", "--report", report, "--spec", "tiny", "--x", "steps", "--y", "noise_multiplier",
        "--metric", "mu", cwd=reader, env=env,
    )  # fmt: skip
    assert heat.returncode == 0, heat.stderr
    png = Path(heat.stdout.strip())
    assert png.parent == reader / "plots" / "tiny" and "object storage" in heat.stderr
    _assert_png(png)
    curve = run_gdp("plot", "curve", "--report", report, "--cell", worst.group(1), cwd=reader, env=env)
    assert curve.returncode == 0, curve.stderr
    assert Path(curve.stdout.strip()) == reader / "plots" / f"curve_{worst.group(1)}.png"
    _assert_png(Path(curve.stdout.strip()))
    missing = run_gdp("plot", "curve", "--report", report, "--cell", "no-such-cell", cwd=reader, env=env)
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1, missing.stderr
    assert report in missing.stderr and "gdp-report-" not in missing.stderr  # the URL, not the private copy


def test_plots_folder_defaults():
    """--plots DIR wins; else beside a local report, or ./plots/<spec>/ for a report on object storage."""
    from flows.regret_map import plots_folder

    assert plots_folder("s3://b/r/privacy.duckdb", "s", "figs") == Path("figs").resolve()
    assert plots_folder("s3://b/r/privacy.duckdb", "s") == Path.cwd() / "plots" / "s"
    assert plots_folder("reports/privacy.duckdb", "s") == Path("reports").resolve() / "plots" / "s"


@pytest.mark.parametrize("command", ["calibration-sweep", "audit"])
def test_calibration_and_audit_refuse_object_storage_in_one_line(command, tmp_path, capsys):
    """They still need a local lake and report: one line naming the option, exit 2, nothing written."""
    from flows.cli import main

    registry = tmp_path / "registry"
    registry.mkdir()
    head = (
        ["calibration-sweep", str(ROOT / "data" / "specs" / "calibration.yaml")]
        if command == "calibration-sweep"
        else ["audit", str(registry), "--allow-empty"]
    )
    for option, value in (("--lake", "s3://bucket/lake"), ("--report", "s3://bucket/r/privacy.duckdb")):
        rc = main([*head, option, value])
        out, err = capsys.readouterr()
        assert rc == 2, (command, out, err)
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
        assert f"{option} '{value}': this command needs a local path" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["registry"]
