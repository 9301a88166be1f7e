"""A lake and report on object storage (tasks/object_store.py), against a real S3-compatible server on 127.0.0.1.

The server is moto's (``moto[server]``, the ``test`` extra): an S3 implementation in Python that runs as a separate
HTTP process with no account or network, and implements the conditional PUTs (``If-None-Match: *``, ``If-Match``)
the lake's guarantees rest on. Credentials are given only through the standard AWS variables, with values that are
checked never to appear in the store, the report, or any output.
"""

from __future__ import annotations

import math
import time

import pytest

from tests.pipeline.conftest import KEY_ID, SECRET
from tests.pipeline.conftest import aws_env as _aws_env
from tests.pipeline.conftest import free_port as _free_port
from tests.pipeline.conftest import run_gdp as _gdp
from tests.pipeline.conftest import s3_env as _env

pytest.importorskip("s3fs", reason="the s3 extra (s3fs) is not installed: pip install -e '.[s3]'")
pytest.importorskip("moto", reason="the test extra's moto[server] is not installed")

pytestmark = [pytest.mark.subprocess, pytest.mark.timeout(900)]


def _all_objects(bucket: str) -> dict[str, bytes]:
    from tasks import object_store

    url = object_store.parse_url(f"s3://{bucket}", "bucket")
    return {k: object_store.get_bytes(url.child(k), "bucket") or b"" for k in object_store.list_objects(url, "")}


def test_sweep_publish_then_query_and_export_from_a_fresh_directory(s3, s3_server, tiny_spec, tmp_path):
    """sweep -> lake on S3 -> publish -> ``gdp sql`` / ``gdp export`` from a directory holding nothing but the report's
    URL and the credentials. Truth: the sampling_rate=1 cells are plain Gaussians, exactly sqrt(T)/sigma-GDP (Dong,
    Roth & Su 2022, Cor. 3.3: T-fold composition of (1/sigma)-GDP Gaussian mechanisms)."""
    lake, report = f"s3://{s3}/team/lake", f"s3://{s3}/team/reports/privacy.duckdb"
    spec = tiny_spec()
    work = tmp_path / "work"
    work.mkdir()
    env = _env({**_aws_env(s3_server), "GDP_CACHE": str(tmp_path / "cache-writer")})
    out = _gdp("sweep", str(spec), "--runner", "thread", "--lake", lake, "--report", report, cwd=work, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "8 cells (8 computed, 0 already in the lake)" in out.stdout
    assert f"report: {report}" in out.stdout
    assert not (work / "s3:").exists()  # nothing written under a local path spelled like the URL

    fresh = tmp_path / "elsewhere"
    fresh.mkdir()
    reader_env = _env({**_aws_env(s3_server), "GDP_CACHE": str(tmp_path / "cache-reader")})
    sql = "SELECT noise_multiplier, sampling_rate, steps, mu FROM cells ORDER BY 1, 2, 3"
    got = _gdp("sql", sql, "--report", report, "--format", "csv", cwd=fresh, env=reader_env)
    assert got.returncode == 0, got.stderr
    rows = [line.split(",") for line in got.stdout.strip().splitlines()[1:]]
    assert len(rows) == 8
    exact = [(float(s), int(t), float(m)) for s, q, t, m in rows if float(q) == 1.0]
    assert len(exact) == 4
    for sigma, steps, mu in exact:
        assert mu == pytest.approx(math.sqrt(steps) / sigma, rel=1e-9)

    exp = _gdp("export", "--report", report, "export.duckdb", cwd=fresh, env=reader_env)
    assert exp.returncode == 0, exp.stderr
    import duckdb

    con = duckdb.connect(str(fresh / "export.duckdb"), read_only=True)
    try:  # self-contained: no s3fs registered, no credentials needed
        assert con.execute("SELECT count(*), count(DISTINCT cell_id) FROM cells").fetchone() == (8, 8)
        assert con.execute("SELECT count(*) FROM epsilons").fetchone() == (16,)
    finally:
        con.close()
    assert not (tmp_path / "cache-reader").exists()  # a reader keeps no lake mirror

    # A re-run from another machine (an empty mirror) computes nothing and adds no staging object.
    before = _all_objects(s3)
    other_machine = {**env, "GDP_CACHE": str(tmp_path / "cache-second-writer")}  # an empty mirror: all from S3
    again = _gdp(
        "sweep", str(spec), "--runner", "thread", "--lake", lake, "--report", report, cwd=work, env=other_machine
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert "8 cells (0 computed, 8 already in the lake)" in again.stdout
    after = _all_objects(s3)
    staged = sorted(k for k in after if "/staging/" in k)
    assert staged == sorted(k for k in before if "/staging/" in k) and len(staged) == 2
    runs = [
        k for k in after if "/lake/runs/" in k
    ]  # each sweep records its run (so the runs view, and snapshot, change)
    assert len(runs) == len([k for k in before if "/lake/runs/" in k]) + 1 == 2

    # No credential anywhere: store objects, outputs.
    for key, body in after.items():
        assert KEY_ID.encode() not in body and SECRET.encode() not in body, key
    for text in (out.stdout, out.stderr, got.stdout, got.stderr, exp.stdout, exp.stderr, again.stdout, again.stderr):
        assert KEY_ID not in text and SECRET not in text


def test_a_second_writer_cannot_clobber(s3, tiny_spec, tmp_path):
    """Immutable objects are created only if absent; the report is replaced only over the version its publisher read
    (a publisher that lost the race writes nothing and starts again from a new listing)."""
    from tasks import object_store as store
    from tasks.publish import _publish_remote_once, publish_lake

    lake_url = store.parse_url(f"s3://{s3}/lake", "--lake")
    key = lake_url.child("staging/spec=x/mechanism=y/chunk-abc.parquet")
    assert store.put_if_absent(key, b"first")
    assert not store.put_if_absent(key, b"second")
    assert store.get_bytes(key, "k") == b"first"

    pointer = lake_url.child("pointer")
    assert store.put_if_match(pointer, b"v1", None)
    v1 = store.head(pointer, "p")
    assert v1 is not None
    assert store.put_if_match(pointer, b"v2", v1.etag)
    assert not store.put_if_match(pointer, b"stale", v1.etag)  # a writer still holding v1's ETag
    assert not store.put_if_match(pointer, b"again", None)  # "only if absent" over an existing object
    assert store.get_bytes(pointer, "p") == b"v2"

    # Two publishers: A reads the report's ETag, B installs a report, A's install is refused and changes nothing.
    report_loc = f"s3://{s3}/reports/r.duckdb"
    report_url = store.parse_url(report_loc, "--report")
    first = publish_lake(f"s3://{s3}/lake", report_loc)
    stale = store.head(report_url, "--report")
    second = publish_lake(f"s3://{s3}/lake", report_loc)  # B (reuses the snapshot, a new report object)
    assert second.reused_snapshot and second.snapshot == first.snapshot
    current = store.head(report_url, "--report")
    assert current is not None and stale is not None and current.etag != stale.etag
    mirror = store.mirror_root(store.parse_url(f"s3://{s3}/lake", "--lake"))
    assert _publish_remote_once(lake_url, mirror, report_url, None, stale) is None
    assert store.head(report_url, "--report") == current


@pytest.mark.parametrize(
    ("argv", "env_change", "expect"),
    [
        (("--lake", "s3://Bad_Bucket!/lake"), {}, "--lake 's3://Bad_Bucket!/lake': 'Bad_Bucket!' is not a valid S3"),
        (("--lake", f"s3://{KEY_ID}:{SECRET}@bucket/lake"), {}, "--lake: an object-store URL must not contain '@'"),
        (("--lake", "gs://bucket/lake"), {}, "only s3:// object storage is supported"),
        (("--lake", "s3://{bucket}/lake"), {"AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None},
         "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"),
        (("--lake", "s3://{bucket}/lake"), {"AWS_ENDPOINT_URL": "http://127.0.0.1:{closed}"},
         "cannot reach the object store at AWS_ENDPOINT_URL=http://127.0.0.1:"),
        (("--lake", "s3://no-such-bucket-gdp/lake"), {}, "bucket 'no-such-bucket-gdp' does not exist"),
    ],
)  # fmt: skip
def test_bad_settings_are_one_line_naming_the_setting(s3, s3_server, tmp_path, argv, env_change, expect):
    """A bad URL, missing credentials, an unreachable endpoint or a missing bucket: exit 2, one line naming the
    setting, no traceback, no credential echoed - for a writer (publish) and a reader (sql)."""
    closed = _free_port()
    aws = _aws_env(s3_server)
    for k, v in env_change.items():
        if v is None:
            aws.pop(k)
        else:
            aws[k] = v.format(closed=closed)
    env = _env(
        {
            **aws,
            "GDP_CACHE": str(tmp_path / "cache"),
            "AWS_CONFIG_FILE": str(tmp_path / "none"),
            "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        }
    )
    lake = argv[1].format(bucket=s3)
    report = f"s3://{s3}/r.duckdb"
    for cmd in (("publish", "--lake", lake, "--report", report), ("sql", "SELECT 1", "--report", lake + "/r.duckdb")):
        out = _gdp(*cmd, cwd=tmp_path, env=env, timeout=120)
        assert out.returncode == 2, (cmd, out.stdout, out.stderr)
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
        wanted = expect.replace("--lake", "--report") if cmd[0] == "sql" else expect
        if cmd[0] == "sql" and "@" in expect:
            wanted = "--report: an object-store URL must not contain '@'"
        assert wanted.split("'")[0] in lines[0], (cmd, lines[0])
        assert KEY_ID not in out.stderr + out.stdout and SECRET not in out.stderr + out.stdout


def test_a_damaged_object_is_set_aside_not_published(s3, tmp_path):
    """A staging object that is not Parquet is moved to ``_quarantine/`` on the store (so a sweep can store the
    cells again) and the publish goes on without it, as for a local lake (tasks.lake.quarantine)."""
    from tasks import object_store as store
    from tasks.publish import publish_lake

    lake = store.parse_url(f"s3://{s3}/lake", "--lake")
    bad = "staging/spec=x/mechanism=subsampled_gaussian/chunk-0123abcd.parquet"
    assert store.put_if_absent(lake.child(bad), b"PAR1 not a parquet file")
    result = publish_lake(str(lake), str(tmp_path / "r.duckdb"))
    assert result.counts["cells"] == 0
    keys = store.list_objects(lake, "")
    assert bad not in keys
    assert [k for k in keys if k.startswith("_quarantine/") and k.endswith(bad)]


def test_a_failed_sweep_still_pushes_its_complete_chunks(s3, tmp_path, monkeypatch):
    """What a sweep wrote to its mirror reaches the store also when the sweep fails; a damaged file never does; a
    second machine (an empty mirror) pulls what the first pushed."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tasks import object_store as store

    lake = f"s3://{s3}/lake"
    good = "staging/spec=tiny/mechanism=m/chunk-good.parquet"
    torn = "staging/spec=tiny/mechanism=m/chunk-torn.parquet"
    with pytest.raises(RuntimeError, match="chunk failed"), store.lake_mirror(lake, "tiny") as local:
        (local / good).parent.mkdir(parents=True)
        pq.write_table(pa.table({"cell_id": ["a", "b"]}), local / good)
        (local / torn).write_bytes(b"PAR1 truncated")
        raise RuntimeError("chunk failed")
    keys = store.list_objects(store.parse_url(lake, "--lake"), "")
    assert good in keys and torn not in keys
    monkeypatch.setenv("GDP_CACHE", str(tmp_path / "second-machine"))
    with store.lake_mirror(lake, "tiny") as other:
        assert pq.read_table(other / good).column("cell_id").to_pylist() == ["a", "b"]
        assert not (other / torn).exists()


def test_snapshot_collection_respects_the_grace_period(s3):
    """Complete snapshots other than the kept one, and incomplete ones, are removed only once older than
    GC_GRACE_SECONDS; the kept snapshot always stays."""
    from tasks import object_store as store

    lake = store.parse_url(f"s3://{s3}/lake", "--lake")
    for name in ("s1.a", "s2.b", "s3.c"):
        assert store.put_if_absent(lake.child(f"curated/{name}/cells/part-0.parquet"), b"x")
        if name != "s3.c":  # s3.c: a builder that died before _SUCCESS
            assert store.put_if_absent(lake.child(f"curated/{name}/_SUCCESS"), b"{}")
    assert store.gc_snapshots(lake, keep="s2.b", n=0) == []  # all within the grace period
    later = time.time() + 2 * store.GC_GRACE_SECONDS
    assert sorted(store.gc_snapshots(lake, keep="s2.b", n=0, now=later)) == ["s1.a", "s3.c"]
    assert sorted(store.list_objects(lake, "curated/")) == [
        "curated/s2.b/_SUCCESS",
        "curated/s2.b/cells/part-0.parquet",
    ]
