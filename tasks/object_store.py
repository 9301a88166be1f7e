"""Lakes and reports on object storage: ``--lake s3://bucket/prefix`` and ``--report s3://bucket/key.duckdb``.

Addresses are ``s3://bucket[/prefix]`` URLs (an fsspec URL; a path without a scheme is a local path, unchanged).
Endpoint, region and credentials come only from the standard AWS settings as botocore reads them
(``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``, or a profile): a URL
carrying a user or password is refused, and no credential is ever written to the lake, the report or a message.
Requests go through botocore (conditional writes) and s3fs (DuckDB reads, below), the ``s3`` extra.

How a sweep and a publish use the store
    The flow works on a local *mirror* of the lake (``$GDP_CACHE`` or ``~/.cache/gdp-audit/lakes/<hash of URL>``),
    so the planner, the chunk writer and the publisher are the local-lake code, unchanged. :func:`lake_mirror`
    pulls the spec's ``staging`` and ``members`` objects before a sweep and pushes what the sweep wrote after it (also
    when it failed: every file pushed is a complete, verified chunk). A publish pulls every lake object, builds the
    curated snapshot locally (:mod:`tasks.snapshots`), uploads it and installs the report (:mod:`tasks.publish`).
    The object store is the truth; the mirror is a cache that can be deleted at any time.

Guarantees without ``flock`` or rename (an S3 PUT replaces one object atomically; a reader sees the old or the new
object, never part of one; S3 is strongly read-after-write consistent, and ``If-None-Match: *`` / ``If-Match: <etag>``
make a PUT conditional - RFC 9110 section 13.1, as S3 implements them):

* Staging chunks and run records are immutable and content-addressed (the chunk key hashes the cells, the settings and
  the gdpcore code; a run file is named by its unique run id). They are written with ``If-None-Match: *``
  (:func:`put_if_absent`): a second writer of the same key is refused (HTTP 412) and keeps the first object, which
  holds the same cells computed by the same code. Nothing ever overwrites a chunk, so no lock is needed between
  sweeps, on one machine or many: two concurrent sweeps of one spec may compute a chunk twice, never store two
  versions of it, and the publish keeps one row per (spec, cell) (``QUALIFY row_number() = 1``, tasks.snapshots).
* A spec's ``members`` object (its current cell set) is the one mutable lake object; it is replaced with
  ``If-Match: <the ETag the writer last read>`` and re-read on 412, so a writer never overwrites a version it did not
  see: the last sweep of a spec to finish defines its cells, as with the local lake's per-spec lock.
* A curated snapshot is uploaded under a name no other publisher uses (``<snapshot id>.<random>``), every data file
  first and the ``_SUCCESS`` object (its file list and row counts) last: a snapshot without ``_SUCCESS`` is never
  read, reused or referenced by a report, and two publishers never mix their files.
* The report object is the pointer: a small DuckDB file whose views name one complete snapshot by URL. A publisher
  reads its ETag *before* listing the lake and replaces it with ``If-Match`` that ETag (``If-None-Match: *`` for the
  first report): if another publisher installed a report in between, the PUT fails with 412 and this publisher
  starts again from a new listing. So an installed report was built from a listing taken after its predecessor was
  installed: reports never go back in time and no publish silently undoes another one. Readers open the old or the
  new report, each naming a complete snapshot.
* Garbage collection keeps the :data:`~tasks.snapshots.KEEP_SNAPSHOTS` most recently used complete snapshots and the
  one just published, and removes older ones only when their ``_SUCCESS`` is older than :data:`GC_GRACE_SECONDS`
  (checked again right before the delete; ``_SUCCESS`` is deleted first). A publisher reusing a snapshot renews its
  ``_SUCCESS`` with ``If-Match`` (which fails once a collector deleted it: the publisher rebuilds) and checks that it
  still exists after installing its report (else it publishes again). A reader holding a report keeps its files for
  at least the grace period.
* Crash and resume: each chunk is pushed as soon as the sweep has written and verified it (:func:`push_file`), so
  a sweep killed with SIGKILL (no ``finally`` runs) has every chunk finished before its last push on the store; a
  chunk written but not yet pushed stays complete in the mirror (pushed by the next sweep or publish on that
  machine; on another machine its cells are recomputed). Nothing partial reaches the store (a single PUT is all or
  nothing), and what is there anyway is harmless: an object that is not valid Parquet is moved to ``_quarantine/``
  when a mirror pulls it, and a chunk stored twice under two keys is counted once (the planner counts cells, the
  publish keeps one row per (spec, cell)). ``tests/pipeline/test_s3_resume.py`` kills a sweep and resumes it from
  the same and from an empty mirror. A killed publish leaves at most an incomplete snapshot (never read; removed
  after the grace period).

Reading a report on object storage
    DuckDB's ``httpfs`` extension is not used (it is downloaded at run time, and report connections load no
    extension). Instead the s3fs file system is registered with DuckDB (``DuckDBPyConnection.register_filesystem``,
    an fsspec file system), so the report's views read ``s3://...`` Parquet through fsspec; the confinement of
    :func:`tasks.duckdb_access.confine` still holds (``allowed_directories`` lists the report's snapshot URLs, nothing
    else). The report file itself is downloaded to a private temporary file and ATTACHed read-only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import hashlib
import json
import os
import re
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from gdpcore._validation import bounded_repr

__all__ = [
    "GC_GRACE_SECONDS",
    "LAKE_PREFIXES",
    "StoreUrl",
    "check_store",
    "fetch_report",
    "filesystem",
    "is_url",
    "lake_mirror",
    "mirror_root",
    "parse_url",
    "put_if_absent",
    "put_if_match",
    "push_file",
    "shown",
    "sync",
]

GC_GRACE_SECONDS = 3600.0
"""A complete snapshot is never collected within this long of its last use (see the module docstring)."""

LAKE_PREFIXES = (
    "staging/",
    "members/",
    "runs/",
    "calibrations/",
    "_calibration/members/",
    "registry/audits/",
    "registry/comparisons/",
    "registry/members/",
)
"""The lake objects a publish reads (tasks.snapshots._LAKE_FILES); ``curated/`` and ``registry/published/`` are
written by publishes only."""

_MUTABLE = re.compile(r"(^|/)members\.parquet$")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_KEY_PART = re.compile(r"[A-Za-z0-9=_][A-Za-z0-9._=-]{0,199}")
_CREDENTIAL_HINT = "credentials come only from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or an AWS profile)"


def is_url(location: object) -> bool:
    """True when ``location`` names an object store (``scheme://...``) rather than a local path."""
    return isinstance(location, str) and _SCHEME.match(location) is not None


@dataclasses.dataclass(frozen=True)
class StoreUrl:
    """``s3://bucket/key``: ``key`` without a leading or trailing ``/`` (empty for the bucket's root)."""

    bucket: str
    key: str

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.key}" if self.key else f"s3://{self.bucket}"

    def child(self, rel: str) -> StoreUrl:
        return StoreUrl(self.bucket, f"{self.key}/{rel}" if self.key else rel)


def shown(url: str) -> str:
    """``url`` for a message: bounded, and not at all when it holds ``@`` (it may carry a user or password)."""
    return "(URL not shown: it contains '@')" if "@" in url else bounded_repr(url)


def parse_url(url: str, what: str) -> StoreUrl:
    """``url`` checked and split; ValueError naming ``what`` (the option) otherwise. A URL holding ``@`` (a user or
    password) is refused without being echoed."""
    if "@" in url:
        raise ValueError(f"{what}: an object-store URL must not contain '@' ({_CREDENTIAL_HINT}); URL not shown")
    m = _SCHEME.match(url)
    if m is None or m.group(1).lower() != "s3":
        raise ValueError(
            f"{what} {bounded_repr(url)}: only s3:// object storage is supported (a local path has no scheme)"
        )
    rest = url[m.end() :]
    if any(c in rest for c in "?#\\") or any(ord(c) < 32 for c in rest):
        raise ValueError(f"{what} {bounded_repr(url)}: expected s3://bucket/prefix (no query, fragment or backslash)")
    bucket, _, key = rest.partition("/")
    key = key.strip("/")
    if not _BUCKET.fullmatch(bucket) or ".." in bucket:
        raise ValueError(f"{what} {bounded_repr(url)}: {bounded_repr(bucket)} is not a valid S3 bucket name")
    parts = key.split("/") if key else []
    if any(not _KEY_PART.fullmatch(p) or p in (".", "..") for p in parts):
        raise ValueError(
            f"{what} {bounded_repr(url)}: each part of the prefix must be letters, digits, '.', '_', '-', '=' "
            "(no empty part, no '..')"
        )
    return StoreUrl(bucket, key)


# -- requests -------------------------------------------------------------------------------------------------------
_CLIENT: tuple[int, Any] | None = None


def _client() -> Any:
    """One botocore S3 client per process, configured from the environment only (endpoint, region, credentials)."""
    global _CLIENT
    if _CLIENT is None or _CLIENT[0] != os.getpid():
        import botocore.session
        from botocore.config import Config

        config = Config(connect_timeout=5, read_timeout=60, retries={"max_attempts": 3, "mode": "standard"})
        _CLIENT = (os.getpid(), botocore.session.get_session().create_client("s3", config=config))
    return _CLIENT[1]


def _endpoint() -> str:
    """``AWS_ENDPOINT_URL`` as scheme://host:port only (never a user or path), for messages."""
    from urllib.parse import urlsplit

    raw = os.environ.get("AWS_ENDPOINT_URL", "")
    if not raw:
        return "the default AWS endpoint"
    try:
        parts = urlsplit(raw)
        return f"AWS_ENDPOINT_URL={parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    except ValueError:
        return "AWS_ENDPOINT_URL (not a valid URL)"


def _store_error(exc: BaseException, what: str, url: StoreUrl) -> ValueError:
    """One line naming the setting to fix; never a credential."""
    from botocore import exceptions as bx

    where = f"{what} {url}"
    if isinstance(exc, bx.NoCredentialsError | bx.PartialCredentialsError):
        return ValueError(f"{where}: no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
    if isinstance(exc, bx.EndpointConnectionError | bx.ConnectTimeoutError | bx.ReadTimeoutError):
        return ValueError(f"{where}: cannot reach the object store at {_endpoint()} ({type(exc).__name__})")
    if isinstance(exc, bx.ClientError):
        err = exc.response.get("Error", {})
        code = str(err.get("Code", "error"))
        if code == "NoSuchBucket":
            return ValueError(f"{where}: bucket {url.bucket!r} does not exist at {_endpoint()}")
        if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "403", "ExpiredToken"):
            return ValueError(
                f"{where}: the object store refused the credentials ({code}; check AWS_ACCESS_KEY_ID / "
                "AWS_SECRET_ACCESS_KEY)"
            )
        return ValueError(f"{where}: object store error {bounded_repr(code)}")
    if isinstance(exc, bx.BotoCoreError | ValueError):  # a malformed AWS_ENDPOINT_URL raises ValueError in botocore
        return ValueError(f"{where}: cannot use the object store at {_endpoint()} ({type(exc).__name__})")
    return ValueError(f"{where}: {type(exc).__name__}")


@contextlib.contextmanager
def _errors(what: str, url: StoreUrl) -> Iterator[None]:
    from botocore import exceptions as bx

    try:
        yield
    except (bx.BotoCoreError, bx.ClientError) as exc:
        raise _store_error(exc, what, url) from None


def _code(exc: Any) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def check_store(location: str, what: str, *, is_report: bool = False) -> StoreUrl:
    """Parse ``location`` and make one cheap request (list one key) so a bad URL, missing credentials, an unreachable
    endpoint or a missing bucket is one line naming the setting, before any work starts."""
    url = parse_url(location, what)
    prefix = url.key.rsplit("/", 1)[0] if is_report and "/" in url.key else ("" if is_report else url.key)
    with _errors(what, url):
        _client().list_objects_v2(Bucket=url.bucket, Prefix=prefix, MaxKeys=1)
    return url


@dataclasses.dataclass(frozen=True)
class Obj:
    size: int
    etag: str  # without quotes
    modified: float  # POSIX seconds


def list_objects(url: StoreUrl, prefix: str, what: str = "--lake") -> dict[str, Obj]:
    """{key relative to ``url``: object} for every object under ``url``/``prefix``."""
    base = url.key + "/" if url.key else ""
    out: dict[str, Obj] = {}
    with _errors(what, url):
        pages = _client().get_paginator("list_objects_v2").paginate(Bucket=url.bucket, Prefix=base + prefix)
        for page in pages:
            for o in page.get("Contents", ()):
                rel = o["Key"][len(base) :]
                out[rel] = Obj(int(o["Size"]), o["ETag"].strip('"'), o["LastModified"].timestamp())
    return out


def head(url: StoreUrl, what: str) -> Obj | None:
    """The object at ``url``, or None when there is none."""
    from botocore import exceptions as bx

    with _errors(what, url):
        try:
            r = _client().head_object(Bucket=url.bucket, Key=url.key)
        except bx.ClientError as exc:
            if _code(exc) in ("404", "NoSuchKey", "NotFound"):
                return None
            raise
    return Obj(int(r["ContentLength"]), r["ETag"].strip('"'), r["LastModified"].timestamp())


def _put(url: StoreUrl, body: bytes, what: str, **condition: str) -> bool:
    """PUT ``body`` at ``url`` under ``condition``; False when the condition failed (412, or 409 for a concurrent
    conditional write that S3 asks to retry)."""
    from botocore import exceptions as bx

    with _errors(what, url):
        try:
            _client().put_object(Bucket=url.bucket, Key=url.key, Body=body, **condition)
        except bx.ClientError as exc:
            if _code(exc) in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409", "NoSuchKey", "404"):
                return False
            raise
    return True


def put_if_absent(url: StoreUrl, body: bytes, what: str = "--lake") -> bool:
    """Create the object (``If-None-Match: *``); False, writing nothing, when it already exists."""
    return _put(url, body, what, IfNoneMatch="*")


def put_if_match(url: StoreUrl, body: bytes, etag: str | None, what: str = "--lake") -> bool:
    """Replace the object only if its ETag is still ``etag`` (None: only if there is none); False otherwise."""
    return _put(url, body, what, IfMatch=f'"{etag}"') if etag else put_if_absent(url, body, what)


def get_bytes(url: StoreUrl, what: str) -> bytes | None:
    from botocore import exceptions as bx

    with _errors(what, url):
        try:
            return bytes(_client().get_object(Bucket=url.bucket, Key=url.key)["Body"].read())
        except bx.ClientError as exc:
            if _code(exc) in ("404", "NoSuchKey", "NotFound"):
                return None
            raise


def delete(url: StoreUrl, what: str = "--lake") -> None:
    with _errors(what, url):
        _client().delete_object(Bucket=url.bucket, Key=url.key)


def filesystem() -> Any:
    """The s3fs file system DuckDB reads ``s3://`` through (``register_filesystem``); configured from the same
    environment variables (s3fs hands them to botocore)."""
    import s3fs

    endpoint = os.environ.get("AWS_ENDPOINT_URL")
    return s3fs.S3FileSystem(
        client_kwargs={"endpoint_url": endpoint} if endpoint else {}, skip_instance_cache=True, anon=False
    )


# -- the local mirror -----------------------------------------------------------------------------------------------
def mirror_root(url: StoreUrl) -> Path:
    """The local cache of the lake at ``url`` (``$GDP_CACHE``, else ``$XDG_CACHE_HOME``/``~/.cache``/gdp-audit)."""
    base = os.environ.get("GDP_CACHE") or str(Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache") / "gdp-audit")
    return Path(base).expanduser().resolve() / "lakes" / hashlib.sha256(str(url).encode()).hexdigest()[:20]


def _md5(path: Path) -> str:
    h = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _same(path: Path, obj: Obj) -> bool:
    """The local copy holds the object: same size for an immutable object (its key addresses its content), same MD5
    (a single-part PUT's ETag) for the mutable members files."""
    try:
        if path.stat().st_size != obj.size:
            return False
    except OSError:
        return False
    return not _MUTABLE.search(path.name) or _md5(path) == obj.etag


def _download(url: StoreUrl, rel: str, local: Path, obj: Obj, what: str) -> None:
    from tasks.lake import check_parquet, safe_join
    from tasks.safe_write import atomic_write

    data = get_bytes(url.child(rel), what)
    if data is None:  # removed since the listing
        return
    dest = safe_join(local, *rel.split("/"))
    dest.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(dest, lambda f: f.write(data))
    os.utime(dest, (obj.modified, obj.modified))  # the same snapshot id on every machine (tasks.snapshots)
    if check_parquet(dest) is not None:  # damaged on the store: set it aside there, so a sweep can store its cells
        _quarantine_object(url, rel, what)
        dest.unlink(missing_ok=True)


def _quarantine_object(url: StoreUrl, rel: str, what: str) -> None:
    """Move a damaged object to ``_quarantine/<stamp>/<key>`` (copy, then delete): out of every prefix the pipeline
    reads, as :func:`tasks.lake.quarantine` does for a local lake. Its cells are recomputed by the next sweep."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]
    src, dst = url.child(rel), url.child(f"_quarantine/{stamp}/{rel}")
    with _errors(what, url):
        _client().copy_object(Bucket=dst.bucket, Key=dst.key, CopySource={"Bucket": src.bucket, "Key": src.key})
    delete(src, what)


def _push(url: StoreUrl, rel: str, path: Path, remote: Obj | None, what: str) -> None:
    """Upload one local lake file: an immutable one only if absent, a members file only over the version read."""
    from tasks.lake import check_parquet

    if check_parquet(path) is not None:
        return  # never upload a damaged file: the sweep that needs its cells recomputes them
    body = path.read_bytes()
    if not _MUTABLE.search(rel):
        put_if_absent(url.child(rel), body, what)  # False: the same content key is already there
        return
    for _ in range(5):
        if remote is not None and remote.etag == hashlib.md5(body, usedforsecurity=False).hexdigest():
            return
        if put_if_match(url.child(rel), body, remote.etag if remote else None, what):
            return
        remote = head(url.child(rel), what)
    raise ValueError(f"{what} {url}: {rel} kept changing under concurrent writers; run again")


def push_file(location: str, local: Path, rel: str) -> None:
    """Upload one immutable file of the mirror now (``If-None-Match: *``), as soon as the sweep has written and
    verified it: a chunk reaches the store while the sweep goes on, so a sweep killed later (SIGKILL runs no
    ``finally``) loses at most the chunks in flight, and a resume on any machine finds the pushed ones. A damaged
    file is never uploaded; the members file is not pushed here (:func:`sync` does, under ``If-Match``)."""
    if _MUTABLE.search(rel):
        raise ValueError(f"push_file: {bounded_repr(rel)} is the mutable members file (sync pushes it)")
    from tasks.lake import safe_join

    url = parse_url(location, "--lake")
    _push(url, rel, safe_join(local, *rel.split("/")), None, "--lake")


def _local_files(local: Path, prefix: str) -> dict[str, Path]:
    root = local / prefix
    if not root.is_dir():
        return {}
    return {
        p.relative_to(local).as_posix(): p
        for p in root.rglob("*.parquet")
        if p.is_file() and not p.is_symlink() and not p.name.startswith(".")
    }


def sync(
    url: StoreUrl, local: Path, prefixes: Sequence[str], *, push_members: bool = False, what: str = "--lake"
) -> None:
    """Make ``local`` hold every object under ``prefixes`` and the store every complete local file: immutable files
    go whichever way is missing; a members file goes from the store to the mirror, or with ``push_members`` (after a
    sweep wrote it) from the mirror to the store under ``If-Match``."""
    for prefix in prefixes:
        remote = list_objects(url, prefix, what)
        for rel, path in _local_files(local, prefix).items():
            obj = remote.get(rel)
            mutable = _MUTABLE.search(rel) is not None
            if obj is None or (mutable and push_members and not _same(path, obj)):
                _push(url, rel, path, obj, what)
        for rel, obj in remote.items():
            if not rel.endswith(".parquet") or (push_members and _MUTABLE.search(rel)):
                continue
            if not _same(local / rel, obj):
                _download(url, rel, local, obj, what)


@contextlib.contextmanager
def lake_mirror(location: str, spec_name: str) -> Iterator[Path]:
    """The local mirror of the lake at ``location`` holding spec ``spec_name``'s staging and members objects; on exit
    (also after an error) the chunks, run record and members the sweep wrote are pushed (module docstring)."""
    from tasks.lake import safe_join

    url = parse_url(location, "--lake")
    local = mirror_root(url)
    safe_join(local, f"spec={spec_name}")  # the spec's name must be a plain key part
    prefixes = [f"{sub}/spec={spec_name}/" for sub in ("staging", "members", "runs")]
    local.mkdir(parents=True, exist_ok=True)
    sync(url, local, prefixes)
    try:
        yield local
    finally:
        sync(url, local, prefixes, push_members=True)


# -- snapshots on the store -----------------------------------------------------------------------------------------
def find_snapshot(lake: StoreUrl, snapshot_id: str) -> tuple[str, Obj, dict[str, Any]] | None:
    """A complete uploaded snapshot of ``snapshot_id`` (name, its ``_SUCCESS`` object, what it records), if any."""
    found = []
    for rel, obj in list_objects(lake, f"curated/{snapshot_id}.").items():
        parts = rel.split("/")
        if len(parts) == 3 and parts[2] == "_SUCCESS":
            found.append((obj.modified, parts[1], obj))
    for _, name, obj in sorted(found, reverse=True):
        body = get_bytes(lake.child(f"curated/{name}/_SUCCESS"), "--lake")
        if body is not None:
            return name, obj, json.loads(body)
    return None


def upload_snapshot(lake: StoreUrl, local_snap: Path, snapshot_id: str, counts: dict[str, int]) -> str:
    """Upload the complete local snapshot under a fresh name, ``_SUCCESS`` (file list and counts) last; its name."""
    name = f"{snapshot_id}.{uuid.uuid4().hex[:12]}"
    files = sorted(
        p.relative_to(local_snap).as_posix() for p in local_snap.rglob("*") if p.is_file() and p.name != "_SUCCESS"
    )
    for rel in files:
        if not put_if_absent(lake.child(f"curated/{name}/{rel}"), (local_snap / rel).read_bytes()):
            raise ValueError(f"--lake {lake}: curated/{name}/{rel} already exists (a name collision); run again")
    record = {"files": files, "counts": counts, "built_at": dt.datetime.now(dt.UTC).isoformat()}
    if not put_if_absent(lake.child(f"curated/{name}/_SUCCESS"), json.dumps(record).encode()):
        raise ValueError(f"--lake {lake}: curated/{name}/_SUCCESS already exists; run again")
    return name


def renew_snapshot(lake: StoreUrl, name: str, obj: Obj, record: dict[str, Any]) -> bool:
    """Mark a reused snapshot used now (``If-Match`` its ``_SUCCESS``); False when a collector removed it."""
    return put_if_match(lake.child(f"curated/{name}/_SUCCESS"), json.dumps(record).encode(), obj.etag)


def snapshot_exists(lake: StoreUrl, name: str) -> bool:
    return head(lake.child(f"curated/{name}/_SUCCESS"), "--lake") is not None


def upload_tree(lake: StoreUrl, local_lake: Path, folder: Path) -> None:
    """Upload every file under ``folder`` (inside ``local_lake``) that the store does not have (immutable objects)."""
    rel_root = folder.relative_to(local_lake).as_posix()
    remote = list_objects(lake, rel_root + "/")
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(local_lake).as_posix()
        if p.is_file() and not p.name.startswith(".") and rel not in remote:
            put_if_absent(lake.child(rel), p.read_bytes())


def gc_snapshots(lake: StoreUrl, keep: str, n: int, *, now: float | None = None) -> list[str]:
    """Remove complete snapshots beyond the ``n`` most recently used (never ``keep``) once unused for
    :data:`GC_GRACE_SECONDS`, and incomplete ones as old; ``_SUCCESS`` first. Returns the removed names."""
    now = time.time() if now is None else now
    by_snap: dict[str, dict[str, Obj]] = {}
    for rel, obj in list_objects(lake, "curated/").items():
        parts = rel.split("/", 2)
        if len(parts) == 3:
            by_snap.setdefault(parts[1], {})[parts[2]] = obj
    complete = sorted((s for s in by_snap if "_SUCCESS" in by_snap[s]), key=lambda s: -by_snap[s]["_SUCCESS"].modified)
    removed = []
    for name in set(by_snap) - set(complete[:n]) - {keep}:
        objs = by_snap[name]
        newest = max(o.modified for o in objs.values())
        if now - newest < GC_GRACE_SECONDS:
            continue
        if "_SUCCESS" in objs:
            current = head(lake.child(f"curated/{name}/_SUCCESS"), "--lake")
            if current is None or now - current.modified < GC_GRACE_SECONDS:
                continue
            delete(lake.child(f"curated/{name}/_SUCCESS"))
        for rel in objs:
            if rel != "_SUCCESS":
                delete(lake.child(f"curated/{name}/{rel}"))
        removed.append(name)
    return removed


# -- reports on the store -------------------------------------------------------------------------------------------
def fetch_report(location: str) -> Path:
    """Download the report at ``location`` to a fresh private temporary file and return its path (the caller opens
    and then deletes it); ValueError when there is none."""
    url = parse_url(location, "--report")
    data = get_bytes(url, "--report")
    if data is None:
        raise ValueError(f"report {url} does not exist: run 'gdp sweep SPEC' or 'gdp publish' with this --report first")
    folder = Path(tempfile.mkdtemp(prefix="gdp-report-"))
    path = folder / (url.key.rsplit("/", 1)[-1] or "report.duckdb")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path


def discard_report_copy(path: Path) -> None:
    """Remove a copy made by :func:`fetch_report` (and DuckDB's side files next to it)."""
    for p in path.parent.glob(path.name + "*"):
        p.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        path.parent.rmdir()
