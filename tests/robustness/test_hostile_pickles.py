"""Hostile ``.pt`` files for ``gdp analyze --opacus`` (tasks/training_runs.py), each found by an adversarial probe.

1 a pickle that BUILDs the shared ``RDPAccountant`` placeholder changed how every later file was read; 2 an 806-byte
memo bomb (30 levels of lists holding two references to the level below) grew without bound; 3 self references, deep
nesting, huge length headers, huge ints, damaged zips gave tracebacks; 4 a 30 MB value was echoed whole.

Every pickle is written here with opcodes (protocol 2 unless the opcode needs more); no file is made by torch.
"""

from __future__ import annotations

import io
import json
import pickle
import re
import struct
import time
import zipfile
from pathlib import Path

import pytest

from flows.cli import main
from gdpcore._validation import bounded_repr
from tasks.training_runs import TrainingRunFileError, load_opacus_file, read_opacus_state
from tests.robustness.conftest import REPO, base_env, gdp

GENUINE = REPO / "tests" / "data" / "opacus_rdp_two_phase.pt"  # torch.save(RDPAccountant.state_dict())
PROTO2 = b"\x80\x02"
VALID_STATE = pickle.dumps({"history": [(1.1, 0.01, 100)], "mechanism": "rdp"}, protocol=2)


def _unicode(text: str) -> bytes:
    """BINUNICODE ``text``."""
    raw = text.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def torch_zip(payload: bytes, compression: int = zipfile.ZIP_STORED) -> bytes:
    """A torch.save-style zip: ``archive/data.pkl`` (first member) and ``archive/version``."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=compression) as zf:
        zf.writestr("archive/data.pkl", payload)
        zf.writestr("archive/version", b"3\n")
    return buf.getvalue()


def patch_first_member(data: bytes, *, flags: int | None = None, method: int | None = None) -> bytes:
    """Set the general-purpose flags / compression method of the first member in its local and central headers."""
    out = bytearray(data)
    for signature, flag_at, method_at in ((b"PK\x03\x04", 6, 8), (b"PK\x01\x02", 8, 10)):
        i = out.find(signature)
        if flags is not None:
            out[i + flag_at : i + flag_at + 2] = struct.pack("<H", flags)
        if method is not None:
            out[i + method_at : i + method_at + 2] = struct.pack("<H", method)
    return bytes(out)


def build_on(global_line: bytes, state: dict[str, str]) -> bytes:
    """GLOBAL ``global_line``, BUILD with ``state``, POP it, then a valid state_dict: without the fix, loading it
    succeeds and leaves the BUILD behind."""
    items = b"".join(_unicode(k) + _unicode(v) + b"s" for k, v in state.items())
    return PROTO2 + b"c" + global_line + b"\n" + b"}" + items + b"b" + b"0" + VALID_STATE[2:]


def memo_bomb(levels: int = 30) -> bytes:
    """{"history": L30}: L0 = [], Ln = [Ln-1, Ln-1] through the memo (BINPUT / BINGET) - 2**30 list nodes if
    expanded, a few hundred bytes as written."""
    body = b"]q\x000"  # EMPTY_LIST, BINPUT 0, POP
    for n in range(1, levels + 1):
        body += b"(h" + bytes([n - 1]) + b"h" + bytes([n - 1]) + b"lq" + bytes([n]) + b"0"
    return PROTO2 + b"}" + _unicode("history") + body + b"h" + bytes([levels]) + b"s."


def corrupt_deflate() -> bytes:
    data = bytearray(torch_zip(pickle.dumps({"history": [(1.0, 0.01, 10)] * 50}, protocol=2), zipfile.ZIP_DEFLATED))
    i = data.find(b"PK\x03\x04")
    name_len, extra_len = struct.unpack("<HH", data[i + 26 : i + 30])
    start = i + 30 + name_len + extra_len
    data[start : start + 8] = b"\xff" * 8  # an invalid deflate block type
    return bytes(data)


# -- 1: one file's BUILD must not reach another file ---------------------------------------------------------------------
@pytest.mark.parametrize("mechanism", ["EVIL", "gdp"])  # 'EVIL' broke the next file; 'gdp' relabelled it silently
def test_build_on_the_accountant_placeholder_does_not_change_later_files(tmp_path, mechanism):
    alone_state = read_opacus_state(GENUINE, use_torch=False)
    alone_run = load_opacus_file(GENUINE, use_torch=False)
    evil = tmp_path / "evil.pt"
    evil.write_bytes(torch_zip(build_on(b"opacus.accountants.rdp\nRDPAccountant", {"mechanism": mechanism})))
    with pytest.raises(
        TrainingRunFileError, match=rf"^{re.escape(str(evil))}: refused to set the state of <Opacus rdp"
    ):
        load_opacus_file(evil, use_torch=False)
    state = read_opacus_state(GENUINE, use_torch=False)
    run = load_opacus_file(GENUINE, use_torch=False)
    assert state["mechanism"] == "rdp" and state == alone_state
    assert run == alone_run and "RDPAccountant" in run.source


@pytest.mark.parametrize(
    "global_line",
    [b"__builtin__\ngetattr", b"torch._utils\n_rebuild_tensor_v2", b"opacus.accountants.gdp\nGaussianAccountant"],
)
def test_build_on_any_object_the_reader_provides_is_refused(tmp_path, global_line):
    path = tmp_path / "evil.pt"
    path.write_bytes(torch_zip(build_on(global_line, {"mechanism": "EVIL", "__setstate__": "x"})))
    with pytest.raises(TrainingRunFileError, match=r"refused to set the state of <.*> \(pickle BUILD\)"):
        read_opacus_state(path, use_torch=False)
    assert read_opacus_state(GENUINE, use_torch=False)["mechanism"] == "rdp"


# -- 2: memo bomb --------------------------------------------------------------------------------------------------------
def _bomb(tmp_path: Path) -> Path:
    path = tmp_path / "memo_bomb.pt"
    payload = memo_bomb()
    assert len(payload) < 400  # the probe's whole file was 806 bytes
    path.write_bytes(torch_zip(payload))
    return path


def test_memo_bomb_is_refused_in_seconds_by_the_python_api(tmp_path):
    path = _bomb(tmp_path)
    started = time.process_time()  # CPU seconds: the work done, which another job's load on the machine does not change
    with pytest.raises(TrainingRunFileError, match=r"holds more than 1,000,000 values \(every reference to a shared"):
        load_opacus_file(path, use_torch=False)
    assert time.process_time() - started < 5  # safety net (was: ~100 s growing ~27 MB/s to a MemoryError)


@pytest.mark.subprocess
def test_memo_bomb_is_refused_in_seconds_by_the_cli(tmp_path):
    path = _bomb(tmp_path)
    started = time.monotonic()
    res = gdp(["analyze", "--opacus", str(path)], base_env(tmp_path / "home"), timeout=120)
    elapsed = time.monotonic() - started
    assert res.returncode == 2, res.stderr[-2000:]
    assert "Traceback" not in res.stderr and res.stderr.count("\n") == 1, res.stderr[-2000:]
    assert res.stderr.startswith(f"gdp analyze: error: --opacus: {path}: state['history']"), res.stderr
    assert elapsed < 30, elapsed  # the process start (imports) included: about 3 s on 2 busy cores


# -- 3: one line, exit 2, for every damaged or hostile file ---------------------------------------------------------------
CASES: dict[str, tuple[bytes, str]] = {
    "self_reference": (torch_zip(PROTO2 + b"]q\x00h\x00a."), "state[0] contains itself"),
    "deep_lists": (torch_zip(PROTO2 + b"]" * 3000 + b"a" * 2999 + b"."), "nested more than 100 levels deep"),
    "binbytes8_2**60": (
        torch_zip(b"\x80\x04\x8e" + struct.pack("<Q", 2**60) + b"short."),
        "expected 1152921504606846976 bytes in a bytes8, but only 6 remain",
    ),
    "bytearray8_2**60": (
        torch_zip(b"\x80\x05\x96" + struct.pack("<Q", 2**60) + b"short."),
        "expected 1152921504606846976 bytes in a bytearray8, but only 6 remain",
    ),
    "sigma_10**1000": (
        torch_zip(pickle.dumps({"history": [(10**1000, 0.01, 100)]}, protocol=2)),
        "history[0][0] (noise_multiplier) must be finite, got <int of about 1,000 digits>",
    ),
    "steps_10**1000": (
        torch_zip(pickle.dumps({"history": [(1.0, 0.01, 10**1000)]}, protocol=2)),
        "history[0][2] (num_steps) must be at most 10**9, got <int of about 1,000 digits>",
    ),
    "corrupt_deflate": (corrupt_deflate(), "archive/data.pkl cannot be read from the zip: Error -3"),
    "encrypted_member": (patch_first_member(torch_zip(VALID_STATE), flags=0x1), "archive/data.pkl is encrypted"),
    "compression_99": (patch_first_member(torch_zip(VALID_STATE), method=99), "uses zip compression method 99"),
    "tensor_key": (torch_zip(PROTO2 + b"}(" + b"ctorch._utils\n_rebuild_tensor_v2\n)R" + b"K\x01u."), "key that is a"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_pt_files_fail_with_one_line(tmp_path, capsys, case):
    content, expected = CASES[case]
    path = tmp_path / f"{case}.pt"
    path.write_bytes(content)
    started = time.process_time()  # CPU seconds, as above
    assert main(["analyze", "--opacus", str(path)]) == 2
    assert time.process_time() - started < 5
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1 and len(err) < 1000, err[-2000:]
    assert err.startswith(f"gdp analyze: error: --opacus: {path}: "), err
    assert expected in err, err


def test_deep_json_fails_with_one_line(tmp_path, capsys):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    assert main(["analyze", "--opacus", str(path)]) == 2
    err = capsys.readouterr().err
    assert (
        err == f"gdp analyze: error: --opacus: {path}: JSON nested too deeply (an accountant state has three levels)\n"
    )


# -- 4: huge values are named, not echoed ----------------------------------------------------------------------------
HUGE = "x" * 30_000_000


def test_a_30_mb_value_is_named_not_echoed_by_the_python_api():
    import gdpcore

    with pytest.raises(ValueError) as info:
        gdpcore.mechanism_from_dict({"kind": "gaussian", "noise_multiplier": HUGE})
    msg = str(info.value)
    assert len(msg) < 1000 and "noise_multiplier must be a real number" in msg and "(30,000,000 chars)" in msg


@pytest.mark.parametrize(
    ("state", "field"),
    [
        ({"history": [[HUGE, 0.01, 100]], "mechanism": "rdp"}, "history[0][0] (noise_multiplier) must be a number"),
        ({"history": [[1.0, 0.01, 100]], "mechanism": HUGE}, "mechanism must be one of rdp, prv, gdp"),
        ({"history": HUGE}, "history must be a list"),
        ({"history": [[1.0, 0.01, 100]], HUGE: 1}, "unknown key 'xxxx"),
    ],
)
def test_a_30_mb_value_is_named_not_echoed_by_the_cli(tmp_path, capsys, state, field):
    path = tmp_path / "state.json"
    path.write_text(json.dumps(state))
    assert main(["analyze", "--opacus", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err) < 1000 and err.count("\n") == 1, err[:2000]
    assert err.startswith(f"gdp analyze: error: --opacus: {path}: ") and field in err and "(30,000,000 chars)" in err, (
        err
    )


def test_bounded_repr_never_expands_or_raises():
    shared: list = []
    for _ in range(30):
        shared = [shared, shared]  # 2**30 nodes if a repr expanded it
    itself: list = []
    itself.append(itself)
    for value in (HUGE, HUGE.encode(), 10**100_000, shared, itself, list(range(10**6)), {HUGE: HUGE}):
        assert len(bounded_repr(value)) < 300
    assert bounded_repr(1.5) == "1.5" and bounded_repr("rdp") == "'rdp'" and bounded_repr([1, 2]) == "[1, 2]"
