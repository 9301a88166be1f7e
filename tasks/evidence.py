"""Audits with evidence (pipeline part): canary scores of a membership-inference audit -> a lower bound on the trained
model's privacy loss, checked against the declared mechanism's certified curve.

Score files (:func:`read_scores`): Parquet or CSV with columns ``score`` (number) and ``is_member`` (bool or 0/1), or
NPZ with arrays ``member_scores`` and ``non_member_scores``. A bad file (missing column, non-numeric, NaN/inf, empty,
one class only, more than :data:`MAX_SCORES` rows - checked from the Parquet metadata / NPZ headers / file size before
loading) raises :class:`EvidenceError` naming the file and the field; nothing is written.

Lake layout (next to the audits, :mod:`tasks.audit`)::

    registry/evidence/model=<name>/version=<v>/evidence-<evidence_key>.parquet   one row per evidence audit (immutable)
    registry/evidence_members/registry=<label>/members.parquet                  the registry's current evidence keys

``evidence_key`` hashes the scores file's content hash, the manifest's spec hash (the declared mechanism; the evidence
block itself is not part of it), the confidence actually used, the family-wise level and the code version: the same
scores under the same declaration are never recomputed.

Family-wise control: an audit states one false-alarm level (default 0.05) for the whole registry; each of the N
versions with evidence is audited at confidence ``max(declared, 1 - level / N)`` (Bonferroni), so the probability that
*any* version whose claim holds is flagged is at most the level. Adding or removing a version with evidence changes
N and therefore recomputes the (cheap) evidence rows, never the accounting.

The numerics are gdpcore's (:mod:`gdpcore.evidence`: ``evidence_from_scores``, ``check_evidence``,
``one_run_epsilon_lower``, ``registry_confidence``); this module only reads files, keys, stores and publishes.

Size: over 600 lines because it is the whole pipeline side of evidence audits (score files, lake rows, the flow's
step, the report views), kept together so that the row layout, ``evidence_key`` and ``EVIDENCE_FORMAT`` change in one
place.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import math
import os
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tasks.evidence_schema import (
    EVIDENCE_COLUMNS,
    EVIDENCE_MEMBERS_SCHEMA,
    EVIDENCE_SCHEMA,
    MODEL_PRIVACY_EVIDENCE_COLUMNS,
)
from tasks.lake import atomic_write_parquet, code_version, read_model_row, safe_join, write_model_row

__all__ = [
    "DEFAULT_FAMILY_LEVEL",
    "MAX_SCORES",
    "EvidenceError",
    "EvidenceResult",
    "Scores",
    "audit_evidence",
    "evidence_for_version",
    "compute_evidence_row",
    "evidence_key",
    "evidence_path",
    "evidence_snapshot_fingerprint",
    "add_evidence_views",
    "attach_from_report",
    "family_confidence",
    "read_scores",
]

MAX_SCORES = int(os.environ.get("GDP_EVIDENCE_MAX_SCORES", str(10**8)))
"""Most scores (members + non-members) one file may hold."""
DEFAULT_FAMILY_LEVEL = 0.05
EVIDENCE_FORMAT = "evidence-v2"  # bump when the row's content changes for the same inputs


class EvidenceError(ValueError):
    """A bad scores file or evidence declaration; the message names the file and the field."""

    def __init__(self, file: str | Path, field: str, message: str):
        self.file, self.field, self.message = str(file), field, message
        super().__init__(f"{self.file}: {field}: {message}" if field else f"{self.file}: {message}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (EvidenceError, (self.file, self.field, self.message))


# -- score files ----------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Scores:
    member: np.ndarray
    non_member: np.ndarray
    sha256: str
    path: str


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _check_values(file: Path, field: str, x: np.ndarray) -> np.ndarray:
    if x.dtype == object or not (np.issubdtype(x.dtype, np.number) or x.dtype == np.bool_):
        raise EvidenceError(file, field, f"must be numeric, got {x.dtype}")
    if x.ndim != 1:
        raise EvidenceError(file, field, f"must be one-dimensional, got shape {x.shape}")
    x = x.astype(np.float64)
    bad = ~np.isfinite(x)
    if bad.any():
        i = int(np.argmax(bad))
        raise EvidenceError(file, field, f"{int(bad.sum())} value(s) are NaN or infinite (first at index {i})")
    return x


def _too_many(file: Path, field: str, n: int, cap: int) -> None:
    if n > cap:
        raise EvidenceError(file, field, f"{n:,} scores, more than the {cap:,} allowed")


def _read_table(path: Path, cap: int) -> tuple[np.ndarray, np.ndarray]:
    suffix = path.suffix.lower()
    if suffix in (".parquet", ".pq"):
        try:
            f = pq.ParquetFile(path)
        except Exception as exc:
            raise EvidenceError(path, "", f"not a readable Parquet file ({type(exc).__name__}: {exc})") from None
        _too_many(path, "rows", f.metadata.num_rows, cap)
        names = f.schema_arrow.names
        for col in ("score", "is_member"):
            if col not in names:
                raise EvidenceError(path, col, f"missing column (columns: {', '.join(names) or 'none'})")
        table = f.read(columns=["score", "is_member"])
    else:
        import pyarrow.csv as pcsv

        size = path.stat().st_size
        if size > min(cap * 64, 8 << 30):
            raise EvidenceError(path, "rows", f"{size:,} bytes: more than {cap:,} scores can take")
        try:
            table = pcsv.read_csv(path)
        except Exception as exc:
            raise EvidenceError(path, "", f"not a readable CSV file ({type(exc).__name__}: {exc})") from None
        _too_many(path, "rows", table.num_rows, cap)
        for col in ("score", "is_member"):
            if col not in table.column_names:
                raise EvidenceError(path, col, f"missing column (columns: {', '.join(table.column_names)})")
    for col in ("score", "is_member"):
        if table.column(col).null_count:
            raise EvidenceError(path, col, f"{table.column(col).null_count} empty value(s)")
    score_t, member_t = table.column("score").type, table.column("is_member").type
    if not (pa.types.is_integer(score_t) or pa.types.is_floating(score_t)):
        raise EvidenceError(path, "score", f"must be numeric, got {score_t}")
    score = _check_values(path, "score", table.column("score").to_numpy())
    if pa.types.is_boolean(member_t):
        member = table.column("is_member").to_numpy(zero_copy_only=False).astype(bool)
    elif pa.types.is_integer(member_t) or pa.types.is_floating(member_t):
        raw = table.column("is_member").to_numpy()
        if not np.isin(raw, (0, 1)).all():
            raise EvidenceError(path, "is_member", "must be true/false or 0/1")
        member = raw.astype(bool)
    else:
        raise EvidenceError(path, "is_member", f"must be true/false or 0/1, got {member_t}")
    return score[member], score[~member]


def _npz_shape(path: Path, zf: zipfile.ZipFile, name: str) -> tuple[int, ...]:
    try:
        with zf.open(name + ".npy") as fh:
            version = np.lib.format.read_magic(fh)
            read_header = (
                np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            )
            shape, _, dtype = read_header(fh)  # the header only: nothing loaded yet
    except KeyError:
        raise EvidenceError(path, name, f"missing array (arrays: {', '.join(n[:-4] for n in zf.namelist())})") from None
    except ValueError as exc:
        raise EvidenceError(path, name, f"not a NumPy array ({exc})") from None
    if dtype.hasobject:
        raise EvidenceError(path, name, "must be numeric, got object")
    return tuple(shape)


def _read_npz(path: Path, cap: int) -> tuple[np.ndarray, np.ndarray]:
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise EvidenceError(path, "", f"not a readable NPZ file ({exc})") from None
    with zf:
        shapes = {k: _npz_shape(path, zf, k) for k in ("member_scores", "non_member_scores")}
    _too_many(path, "member_scores + non_member_scores", sum(math.prod(s) for s in shapes.values()), cap)
    with np.load(path, allow_pickle=False) as data:
        return (
            _check_values(path, "member_scores", np.asarray(data["member_scores"])),
            _check_values(path, "non_member_scores", np.asarray(data["non_member_scores"])),
        )


def read_scores(path: str | Path, *, max_scores: int | None = None) -> Scores:
    """Member and non-member scores of one file (see the module docstring), validated; raises :class:`EvidenceError`."""
    path = Path(path)
    cap = MAX_SCORES if max_scores is None else max_scores
    if not path.is_file():
        raise EvidenceError(path, "", "no such file")
    suffix = path.suffix.lower()
    if suffix == ".npz":
        member, non = _read_npz(path, cap)
    elif suffix in (".parquet", ".pq", ".csv"):
        member, non = _read_table(path, cap)
    else:
        raise EvidenceError(path, "", f"unknown scores format {suffix!r} (.parquet, .csv or .npz)")
    if len(member) == 0 and len(non) == 0:
        raise EvidenceError(path, "score", "no scores")
    if len(member) == 0:
        raise EvidenceError(path, "is_member", "no member scores (one class only)")
    if len(non) == 0:
        raise EvidenceError(path, "is_member", "no non-member scores (one class only)")
    return Scores(member=member, non_member=non, sha256=file_sha256(path), path=str(path))


# -- numerics: gdpcore.evidence ------------------------------------------------------------------------------------
def certified_report(audit_row: dict[str, Any]) -> Any:
    """The audit's certified report again (same mechanism, discretisation and alpha_min as the stored row): only for
    rows without a stored curve (:func:`certified_curve` prefers the row's own samples)."""
    import gdpcore

    mech = gdpcore.mechanism_from_dict(json.loads(audit_row["mechanism_json"]))
    return gdpcore.analyze(mech, discretization=audit_row["discretization"], alpha_min=audit_row["alpha_min"])


def certified_curve(audit_row: dict[str, Any]) -> Any:
    """What the evidence is held against, without re-running the accountant: the audit row's stored curve
    (``curve_fpr`` / ``curve_fnr``: ``PrivacyReport.fnr`` of the *pessimistic* curve at fixed FPRs, tasks.audit) with
    its certified ``mu``, as :class:`gdpcore.evidence.PessimisticCurveSamples`. Between the stored FPRs gdpcore bounds
    the curve from below by convexity (never the chord, which would understate the certified TPR and could raise
    false alarms). Rows without a stored curve fall back to :func:`certified_report`."""
    from gdpcore.evidence import pessimistic_curve_samples

    fpr, fnr = audit_row.get("curve_fpr"), audit_row.get("curve_fnr")
    if fpr is None or fnr is None or audit_row.get("mu") is None:
        return certified_report(audit_row)
    return pessimistic_curve_samples(fpr, fnr, mu=float(audit_row["mu"]))


def verdict_basis(audit_row: dict[str, Any]) -> str:
    """``estimate`` when the audit's curve is itself only an estimate (the row has an ``estimate_reason``, e.g. a
    shuffled sampler accounted as Poisson), else ``certified``."""
    return "estimate" if audit_row.get("estimate_reason") else "certified"


def family_confidence(declared: float, level: float, n: int) -> float:
    """Per-version confidence under Bonferroni over ``n`` versions at audit-wide level ``level``
    (:func:`gdpcore.registry_confidence`), never below the declared confidence."""
    import gdpcore

    if not 0 < level < 1:
        raise ValueError(f"evidence level must be in (0, 1), got {level}")
    return max(float(declared), gdpcore.registry_confidence(max(n, 1), level))


def evidence_key(manifest: Any, scores_sha256: str, confidence: float, family_level: float) -> str:
    ev = manifest.evidence
    parts = [
        "evidence",
        scores_sha256,
        manifest.spec_hash(),
        repr(float(confidence)),
        repr(float(family_level)),
        code_version(),
        EVIDENCE_FORMAT,
        ev.one_run.model_dump_json() if ev.one_run else "",
        ev.threat_model,
        str(ev.synthetic),
        ev.description,
    ]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:24]


def evidence_path(lake: Path, model: str, version: int, key: str) -> Path:
    from tasks.registry import is_valid_name

    if not is_valid_name(model) or isinstance(version, bool) or not isinstance(version, int):
        raise ValueError(f"not a model version: {model!r}:{version!r}")
    return safe_join(lake, "registry", "evidence", f"model={model}", f"version={version}", f"evidence-{key}.parquet")


def evidence_members_path(lake: Path, registry_label: str) -> Path:
    return safe_join(lake, "registry", "evidence_members", f"registry={registry_label}", "members.parquet")


def _f(x: Any) -> float | None:
    if x is None:
        return None
    x = float(x)
    return None if math.isnan(x) else x


def evaluate(
    scores: Scores,
    audit_row: dict[str, Any],
    *,
    confidence: float,
    one_run: Any = None,
    delta: float | None = None,
    report: Any = None,
) -> dict[str, Any]:
    """Evidence numbers of ``scores`` against an audit row's certified curve (no I/O): the row's numeric columns.
    ``report``: the certified report if at hand (else the row's stored pessimistic curve: :func:`certified_curve`)."""
    import gdpcore

    ev = gdpcore.evidence_from_scores(scores.member, scores.non_member, confidence=confidence)
    basis = verdict_basis(audit_row)
    check = gdpcore.check_evidence(report if report is not None else certified_curve(audit_row), ev, basis=basis)
    eps_deltas = [float(d) for d in audit_row["eps_deltas"]]
    cert = float(check.certified_mu)
    detect = ev.detectable_mu(claim=cert) if math.isfinite(cert) else math.inf
    # The empirical points (test "score > threshold"); each box spans point -> (FPR upper, TPR lower) bound corner.
    thr = np.asarray(ev.thresholds, dtype=float)
    fpr_emp = (len(scores.non_member) - np.searchsorted(np.sort(scores.non_member), thr, side="right")) / len(
        scores.non_member
    )
    tpr_emp = (len(scores.member) - np.searchsorted(np.sort(scores.member), thr, side="right")) / len(scores.member)
    one = None
    if one_run is not None:
        one = float(
            gdpcore.one_run_epsilon_lower(
                canaries=one_run.canaries,
                guesses=one_run.guesses,
                correct=one_run.correct,
                delta=float(delta if delta is not None else audit_row["delta"]),
                confidence=confidence,
            )
        )
    return {
        "method": str(ev.method),
        "method_id": str(ev.method_id),
        "confidence": float(ev.confidence),
        "n_members": int(ev.n_members),
        "n_non_members": int(ev.n_non_members),
        "mu_lower": float(ev.mu_lower),
        "certified_mu": cert,
        "eps_deltas": eps_deltas,
        "epsilon_lower": [float(ev.epsilon_lower(x)) for x in eps_deltas],
        "detectable_mu": _f(detect) if math.isfinite(detect) else None,
        "verdict": str(check.verdict),
        "verdict_basis": basis,
        "tightness": _f(check.tightness),
        # Where the evidence comes closest to (consistent) or goes furthest above (violation) the certified curve, in
        # probit coordinates (gdpcore EvidenceCheck.strongest_fpr); NULL when no point has TPR_lo > 0.
        "strongest_fpr": _f(check.strongest_fpr),
        "one_run_epsilon_lower": one,
        "points_fpr": fpr_emp.tolist(),
        "points_tpr": tpr_emp.tolist(),
        "box_fpr_lo": fpr_emp.tolist(),
        "box_fpr_hi": [float(x) for x in ev.fpr_upper],
        "box_tpr_lo": [float(x) for x in ev.tpr_lower],
        "box_tpr_hi": tpr_emp.tolist(),
        "evidence_json": json.dumps(
            {"evidence": ev.to_dict(deltas=eps_deltas), "check": check.to_dict()}, sort_keys=True, allow_nan=False
        ),
    }


def compute_evidence_row(
    manifest: Any,
    audit_row: dict[str, Any],
    scores: Scores,
    *,
    confidence: float,
    family_level: float,
    family_size: int,
    run_id: str,
) -> dict[str, Any]:
    """One :data:`EVIDENCE_SCHEMA` row for ``manifest`` (its ``evidence`` block) against its audit row."""
    spec = manifest.evidence
    nums = evaluate(scores, audit_row, confidence=confidence, one_run=spec.one_run, delta=manifest.delta_value)
    return {
        "model": manifest.name,
        "version": manifest.version,
        "evidence_key": evidence_key(manifest, scores.sha256, confidence, family_level),
        "audit_key": audit_row["audit_key"],
        **nums,
        "declared_confidence": float(spec.confidence),
        "family_level": float(family_level),
        "family_size": int(family_size),
        "threat_model": spec.threat_model,
        "synthetic": bool(spec.synthetic),
        "scores_file": spec.scores,
        "scores_sha256": scores.sha256,
        "evidence_description": spec.description,
        "gdpcore_version": code_version(),
        "computed_at": dt.datetime.now(dt.UTC),
        "run_id": run_id,
    }


def write_evidence(lake: Path, row: dict[str, Any]) -> Path:
    return write_model_row(evidence_path(lake, row["model"], row["version"], row["evidence_key"]), row, EVIDENCE_SCHEMA)


def read_evidence(path: Path) -> dict[str, Any]:
    return read_model_row(path)


def write_evidence_members(lake: Path, registry_label: str, rows: Sequence[dict[str, Any]]) -> bool:
    """The registry's current evidence keys; False (nothing written) when unchanged."""
    table = pa.Table.from_pylist(
        [
            {
                "registry": registry_label,
                "model": r["model"],
                "version": r["version"],
                "evidence_key": r["evidence_key"],
            }
            for r in sorted(rows, key=lambda r: (r["model"], r["version"]))
        ],
        schema=EVIDENCE_MEMBERS_SCHEMA,
    )
    path = evidence_members_path(lake, registry_label)
    if path.exists():
        if pq.read_table(path).replace_schema_metadata(None).equals(table):
            return False
    elif not rows:
        return False
    atomic_write_parquet(table, path, {"registry": registry_label})
    return True


# -- the flow's step ------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class EvidenceResult:
    rows: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)  # "name:version" -> evidence row
    computed: list[str] = dataclasses.field(default_factory=list)
    reused: list[str] = dataclasses.field(default_factory=list)
    failed: dict[str, str] = dataclasses.field(default_factory=dict)  # "name:version (evidence)" -> message

    def violations(self) -> list[str]:
        """One line per version whose evidence violates its claim (the audit summary lists these first)."""
        from tasks.evidence_card import violation_line

        return [
            violation_line(k, self.rows[k]) for k in sorted(self.rows) if self.rows[k]["verdict"] == "violates_claim"
        ]

    def attach(self, rows: dict[str, dict[str, Any]]) -> None:
        """Put each evidence row into its audit row under ``"evidence"`` (cards, MLflow tags read it there)."""
        for k, e in self.rows.items():
            if k in rows:
                rows[k] = {**rows[k], "evidence": e}


def evidence_for_version(
    manifest: Any, audit_row: dict[str, Any], lake: str, run_id: str, conf: float, level: float, n: int
) -> dict[str, Any]:
    """One version's evidence row: its scores read, held against ``audit_row``'s certified curve, written to the lake
    (the body of the flow's ``evidence-model-version`` task)."""
    scores = read_scores(_scores_path(manifest))
    row = compute_evidence_row(
        manifest, audit_row, scores, confidence=conf, family_level=level, family_size=n, run_id=run_id
    )
    write_evidence(Path(lake), row)
    return row


def _scores_path(manifest: Any) -> Path:
    from tasks.evidence_manifest import resolve_scores_path

    try:
        return resolve_scores_path(manifest)
    except ValueError as exc:
        raise EvidenceError(manifest.manifest_path or manifest.key, "evidence.scores", str(exc)) from None


def audit_evidence(
    manifests: Sequence[Any],
    rows: dict[str, dict[str, Any]],
    lake: str | Path,
    registry_label: str,
    run_id: str,
    *,
    family_level: float = DEFAULT_FAMILY_LEVEL,
    submit: Callable[..., Any] | None = None,
) -> EvidenceResult:
    """Evidence audits of every audited manifest with an ``evidence`` block, family-wise at ``family_level``; rows
    whose file exists for their key are reused. ``submit``: a Prefect task's ``submit`` wrapping
    :func:`evidence_for_version` (the flow's), returning futures; None computes each row here."""
    lake = Path(lake)
    out = EvidenceResult()
    todo = [m for m in manifests if getattr(m, "evidence", None) is not None and m.key in rows]
    n = len(todo)
    pending: dict[str, Any] = {}
    for m in todo:
        conf = family_confidence(m.evidence.confidence, family_level, n)
        try:
            sha = file_sha256(_scores_path(m))
        except (EvidenceError, OSError) as exc:
            out.failed[f"{m.key} (evidence)"] = f"{m.key}: evidence: {exc}"
            continue
        key = evidence_key(m, sha, conf, family_level)
        path = evidence_path(lake, m.name, m.version, key)
        if path.exists():
            try:
                out.rows[m.key] = read_evidence(path)
                out.reused.append(m.key)
                continue
            except (OSError, ValueError, IndexError) as exc:
                from tasks.lake import quarantine

                quarantine(lake, path, f"unreadable evidence row: {type(exc).__name__}: {exc}"[:500])
        args = (m, rows[m.key], str(lake), run_id, conf, family_level, n)
        pending[m.key] = submit(*args) if submit is not None else args
    for k, fut in pending.items():
        try:
            out.rows[k] = fut.result() if submit is not None else evidence_for_version(*fut)
            out.computed.append(k)
        except Exception as exc:  # one bad scores file fails its own evidence only
            out.failed[f"{k} (evidence)"] = f"{k}: evidence: {exc}"
    write_evidence_members(lake, registry_label, list(out.rows.values()))
    _log(out)
    return out


def _log(out: EvidenceResult) -> None:
    """Violations and evidence failures as warnings of the running flow (nothing outside a flow run)."""
    try:
        from prefect import get_run_logger

        logger = get_run_logger()
    except Exception:  # not inside a flow or task run
        return
    for line in out.violations():
        logger.warning("evidence of a privacy violation: %s", line)
    for msg in out.failed.values():
        logger.warning("evidence not checked: %s", msg)


def attach_from_report(row: dict[str, Any], report: str | Path, lake: str | Path) -> dict[str, Any]:
    """``row`` (an audit row) with the evidence row the report's ``evidence`` view names for it (``gdp card``)."""
    from tasks.report_query import query_report

    q = "SELECT evidence_key FROM evidence WHERE model = '{}' AND version = {} AND audit_key = '{}' LIMIT 1".format(
        str(row["model"]).replace("'", "''"), int(row["version"]), str(row["audit_key"]).replace("'", "''")
    )
    try:
        _, keys = query_report(report, q)
    except Exception:  # a report published before the evidence view existed
        return row
    if not keys:
        return row
    path = evidence_path(Path(lake), row["model"], row["version"], keys[0][0])
    return {**row, "evidence": read_evidence(path)} if path.exists() else row


# -- report views (tasks.audit's registry snapshot) ----------------------------------------------------------------
def evidence_snapshot_fingerprint(lake: Path) -> bytes:
    """What the registry snapshot's evidence views depend on (the evidence members files' content)."""
    h = hashlib.sha256(b"evidence-views-v1")
    for path in sorted((Path(lake) / "registry" / "evidence_members").glob("registry=*/members.parquet")):
        h.update(str(path.relative_to(lake)).encode())
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.digest()


def add_evidence_views(con: Any, lake: Path, selects: dict[str, str]) -> dict[str, str]:
    """Create temp tables ``em`` / ``e`` on ``con`` (the registry snapshot's connection, where ``m`` holds the members)
    and return ``selects`` with an ``evidence`` view and the evidence columns appended to ``model_privacy``."""
    con.register("empty_evidence_members", EVIDENCE_MEMBERS_SCHEMA.empty_table())
    con.register("empty_evidence", EVIDENCE_SCHEMA.empty_table())
    files = sorted(str(p) for p in (Path(lake) / "registry" / "evidence_members").glob("registry=*/members.parquet"))
    src = f"read_parquet({files!r}, union_by_name = true)" if files else "empty_evidence_members"
    con.execute(f"CREATE TEMP TABLE em AS SELECT * FROM {src}")
    keys = con.execute("SELECT DISTINCT model, version, evidence_key FROM em").fetchall()
    paths = [evidence_path(lake, mo, v, k) for mo, v, k in keys]
    rows = [str(p) for p in paths if p.exists()]
    src = f"read_parquet({rows!r}, union_by_name = true)" if rows else "empty_evidence"
    con.execute(f"CREATE TEMP TABLE e AS SELECT * FROM {src}")
    have = {r[0] for r in con.execute("DESCRIBE e").fetchall()}
    for name in ("method_id", "verdict_basis"):  # rows written before these columns existed (evidence-v1)
        if name not in have:
            con.execute(f"ALTER TABLE e ADD COLUMN {name} VARCHAR")
    current = (
        "SELECT em.registry, e.* FROM em JOIN e ON e.evidence_key = em.evidence_key AND e.model = em.model "
        "AND e.version = em.version JOIN m ON m.registry = em.registry AND m.model = em.model "
        "AND m.version = em.version AND m.audit_key = e.audit_key"
    )
    cols = ", ".join(f"ev.{c}" if c != "registry" else "ev.registry" for c in EVIDENCE_COLUMNS)
    out = dict(selects)
    out["evidence"] = f"SELECT {cols} FROM ({current}) ev ORDER BY ev.verdict DESC, ev.model, ev.version, ev.registry"
    extra = ", ".join(
        f"ev.{src} AS {dst}"
        for src, dst in zip(
            ("verdict", "mu_lower", "confidence", "method", "tightness", "synthetic", "method_id", "verdict_basis"),
            MODEL_PRIVACY_EVIDENCE_COLUMNS,
            strict=True,
        )
    )
    out["model_privacy"] = (
        f"SELECT mp.*, {extra} FROM ({selects['model_privacy']}) mp LEFT JOIN ({current}) ev "
        "ON ev.registry = mp.registry AND ev.model = mp.model AND ev.version = mp.version "
        "AND ev.audit_key = mp.audit_key ORDER BY mp.model, mp.version, mp.registry"
    )
    return out
