"""calibration_sweep: every (q, T) cell gets gdpcore.calibrate_noise's answer in the report; re-runs compute nothing."""

from __future__ import annotations

import pytest

import gdpcore
from flows.runners import make_task_runner
from tasks.publish import query_report
from tasks.spec import load_calibration_spec

pytestmark = pytest.mark.usefixtures("prefect_server")


def test_calibration_spec_errors(write_spec):
    with pytest.raises(ValueError, match=r"target.*needs exactly one of"):
        load_calibration_spec(
            write_spec("name: c\ngrid: {sampling_rate: [0.01], steps: [10]}\ntarget: {advantage: 0.1, mu: 1}\n")
        )
    with pytest.raises(ValueError, match=r"target.tpr needs target.fpr"):
        load_calibration_spec(write_spec("name: c\ngrid: {sampling_rate: [0.01], steps: [10]}\ntarget: {tpr: 0.1}\n"))
    with pytest.raises(ValueError, match=r"grid.sampling_rate\[0\] = 2.0"):
        load_calibration_spec(
            write_spec("name: c\ngrid: {sampling_rate: [2.0], steps: [10]}\ntarget: {advantage: 0.1}\n")
        )


@pytest.mark.slow
def test_calibration_sweep_matches_calibrate_noise(write_spec, tmp_path):
    from flows.calibration_sweep import calibration_sweep

    spec = write_spec(
        "name: cal\ngrid: {sampling_rate: [0.02, 1.0], steps: [10]}\ntarget: {advantage: 0.1}\nchunk_size: 1\n"
    )
    lake, report = tmp_path / "lake", tmp_path / "r.duckdb"
    run = calibration_sweep.with_options(task_runner=make_task_runner("thread", max_workers=2))
    first = run(spec_path=str(spec), lake=str(lake), report=str(report))
    assert (first.cells, first.cells_computed) == (2, 2)
    cols, rows = query_report(
        report, "SELECT sampling_rate, steps, noise_multiplier, achieved, status FROM calibrations ORDER BY grid_index"
    )
    assert len(rows) == 2
    for q, t, sigma, achieved, status in rows:
        ref = gdpcore.calibrate_noise(sampling_rate=q, steps=t, target_advantage=0.1)
        assert status == "ok" and sigma == ref.noise_multiplier and achieved == ref.achieved <= 0.1
        # independent check: the pessimistic report at that sigma meets the target
        assert (
            gdpcore.analyze(gdpcore.SubsampledGaussian(noise_multiplier=sigma, sampling_rate=q, steps=t)).advantage
            <= 0.1 + 1e-3
        )
    again = run(spec_path=str(spec), lake=str(lake), report=str(report))
    assert again.cells_computed == 0
    assert query_report(report, "SELECT count(*) FROM calibrations")[1] == [(2,)]
