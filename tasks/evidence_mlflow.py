"""Evidence for MLflow-described model versions (canary scores logged beside a registered model version).

A training or audit script logs the canary scores as an artifact of the model version's *source run*::

    mlflow.log_artifact("canary_scores.parquet", artifact_path="privacy")   # or .npz / .csv, same formats as a
                                                                             # manifest's evidence.scores

and may describe them with ``dp.evidence.*`` keys (model-version tags or run params/tags, read like every ``dp.*``
key: :mod:`tasks.mlflow_registry`): ``dp.evidence.confidence`` (default 0.95), ``dp.evidence.synthetic``
(``true`` for simulated scores), ``dp.evidence.threat_model``, ``dp.evidence.description``. The artifact is downloaded
into a private temporary folder (removed at exit) and audited exactly like a manifest's scores file
(:mod:`tasks.evidence`); its content hash keys the evidence row, so an unchanged artifact is never recomputed.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["SCORE_ARTIFACTS", "with_mlflow_evidence"]

SCORE_ARTIFACTS: tuple[str, ...] = (
    "privacy/canary_scores.parquet",
    "privacy/canary_scores.npz",
    "privacy/canary_scores.csv",
)
_TMP: list[Path] = []


def _tmp_root() -> Path:
    if not _TMP:
        root = Path(tempfile.mkdtemp(prefix="gdp-evidence-"))
        atexit.register(shutil.rmtree, root, True)
        _TMP.append(root)
    return _TMP[0]


def _evidence_keys(desc: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "dp.evidence.confidence" in desc:
        try:
            out["confidence"] = float(desc["dp.evidence.confidence"])
        except ValueError:
            raise ValueError(f"dp.evidence.confidence={desc['dp.evidence.confidence']!r} is not a number") from None
    if "dp.evidence.synthetic" in desc:
        value = desc["dp.evidence.synthetic"].strip().lower()
        if value not in ("true", "false"):
            raise ValueError(f"dp.evidence.synthetic={desc['dp.evidence.synthetic']!r}: give true or false")
        out["synthetic"] = value == "true"
    for key in ("threat_model", "description"):
        if f"dp.evidence.{key}" in desc:
            out[key] = desc[f"dp.evidence.{key}"]
    return out


def with_mlflow_evidence(
    client: Any, manifest: Any, run_id: str | None, desc: dict[str, str], tracking_uri: str
) -> Any:
    """``manifest`` with an ``evidence`` block when the source run has a canary-scores artifact (else unchanged)."""
    if manifest is None or not run_id:
        return manifest
    from mlflow.exceptions import MlflowException

    try:
        listed = {f.path for f in client.list_artifacts(run_id, "privacy")}
    except MlflowException:
        return manifest
    artifact = next((a for a in SCORE_ARTIFACTS if a in listed), None)
    if artifact is None:
        return manifest
    import mlflow.artifacts

    from tasks.registry import validate_manifest

    dest = _tmp_root() / manifest.name / f"v{manifest.version}-{run_id}"
    dest.mkdir(parents=True, exist_ok=True)
    local = mlflow.artifacts.download_artifacts(
        run_id=run_id, artifact_path=artifact, dst_path=str(dest), tracking_uri=tracking_uri
    )
    evidence = {"scores": str(Path(local).relative_to(dest)), **_evidence_keys(desc)}
    data = manifest.model_dump(mode="json", exclude={"manifest_path", "evidence"})
    return validate_manifest({**data, "evidence": evidence}, file=dest / "mlflow-description")
