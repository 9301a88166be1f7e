"""The publisher's DuckDB memory limit: set on every compaction connection, overridable by
``$GDP_PUBLISH_MEMORY_LIMIT``, and a bad value is one line naming that variable before anything is written."""

from __future__ import annotations

import contextlib
import io

import pytest

from flows.cli import main
from tasks.duckdb_access import PUBLISH_MEMORY_LIMIT, lake_connection, memory_bytes, publish_memory_limit


def _limit_bytes(con) -> float:
    # DuckDB prints the setting in binary units ("953.6 MiB"); read back as bytes.
    value = con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    number, unit = value.split()
    return float(number) * {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[unit]


@pytest.mark.parametrize("setting", [None, "", "256MB", "2GiB"])
def test_every_compaction_connection_has_the_limit(tmp_path, monkeypatch, setting):
    if setting is None:  # unset or empty: the default
        monkeypatch.delenv("GDP_PUBLISH_MEMORY_LIMIT", raising=False)
    else:
        monkeypatch.setenv("GDP_PUBLISH_MEMORY_LIMIT", setting)
    want = memory_bytes(setting or PUBLISH_MEMORY_LIMIT)
    con = lake_connection(tmp_path)
    try:
        assert _limit_bytes(con) == pytest.approx(want, rel=1e-3)  # 1GB = 10^9 bytes, 2GiB = 2^31
    finally:
        con.close()


@pytest.mark.parametrize("bad", ["lots", "-1GB", "1 PB", "1e9"])
def test_a_bad_limit_is_one_line_naming_the_variable(tmp_path, monkeypatch, bad):
    monkeypatch.setenv("GDP_PUBLISH_MEMORY_LIMIT", bad)
    with pytest.raises(ValueError, match="GDP_PUBLISH_MEMORY_LIMIT must look like 512MB or 2GB"):
        publish_memory_limit()
    (tmp_path / "lake").mkdir()
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["publish", "--lake", str(tmp_path / "lake"), "--report", str(tmp_path / "r" / "p.duckdb")])
    lines = [line for line in err.getvalue().splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "GDP_PUBLISH_MEMORY_LIMIT" in lines[0], err.getvalue()
    assert "Traceback" not in err.getvalue()
    assert not (tmp_path / "r" / "p.duckdb").exists()
