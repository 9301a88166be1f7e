"""Failure isolation in the privacy_audit flow: a model version whose accounting exceeds its deadline fails alone;
a registry with no valid model version is refused before anything is written (it used to wipe the registry's models)."""

from __future__ import annotations

import time

import pytest

import flows.privacy_audit as pa_flow
from tasks.publish import query_report

pytestmark = pytest.mark.usefixtures("prefect_server")


def test_an_audit_past_its_deadline_fails_alone(tiny_registry, tmp_path, monkeypatch):
    reg, _ = tiny_registry
    real = pa_flow.compute_audit_row

    def hangs_for_tiny_b(manifest, run_id):
        if manifest.name == "tiny-b":
            while True:  # an accounting that never ends (pure Python: the timeout can interrupt it)
                time.sleep(0.05)
        return real(manifest, run_id)

    monkeypatch.setattr(pa_flow, "compute_audit_row", hangs_for_tiny_b)
    monkeypatch.setattr(pa_flow, "audit_model_version", pa_flow.audit_model_version.with_options(timeout_seconds=3))
    started = time.perf_counter()
    s = pa_flow.privacy_audit(registry=str(reg), lake=str(tmp_path / "lake"), report=str(tmp_path / "r.duckdb"))
    assert time.perf_counter() - started < 60
    assert s.models == ["tiny-a:1"] and list(s.failed) == ["tiny-b:1"]
    assert "timed out" in s.failed["tiny-b:1"].lower() or "timeout" in s.failed["tiny-b:1"].lower(), s.failed
    assert query_report(tmp_path / "r.duckdb", "SELECT model FROM models")[1] == [("tiny-a",)]


def test_a_registry_without_a_valid_manifest_writes_nothing(tiny_registry, tmp_path):
    reg, write = tiny_registry
    lake, report = tmp_path / "lake", tmp_path / "r.duckdb"
    pa_flow.privacy_audit(registry=str(reg), lake=str(lake), report=str(report))
    before = query_report(report, "SELECT model, version FROM models ORDER BY ALL")[1]
    assert len(before) == 2
    for p in reg.iterdir():  # the folder now holds only broken files (a half-synced mount, say)
        p.write_text("name: [unclosed\n")
    with pytest.raises(pa_flow.EmptyRegistryError, match="has no valid model version .* pass --allow-empty"):
        pa_flow.privacy_audit(registry=str(reg), lake=str(lake), report=str(report))
    assert query_report(report, "SELECT model, version FROM models ORDER BY ALL")[1] == before
    s = pa_flow.privacy_audit(registry=str(reg), lake=str(lake), report=str(report), allow_empty=True)
    assert s.models == [] and query_report(report, "SELECT count(*) FROM models")[1] == [(0,)]
