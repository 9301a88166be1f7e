"""Fault injection: measures the figures PIPELINE.md reports under "Operations: hostile inputs, shared reports,
concurrent writers".

    PYTHONPATH=$PWD python -m tests.robustness.fault_injection --trials 10 --seed 16

1. SIGKILL at random points of ``gdp sweep``, ``gdp publish`` and ``gdp audit`` (uniform over each command's measured
   duration, Prefect start-up included), then the same command re-run to completion. Counted after each trial: cells
   or model versions lost (in the spec/registry but not in the report), duplicated (more than one staging row or
   report row per cell), processes of the killed command still alive 20 s later (orphans; the process group is
   checked, so a re-parented Prefect server counts), and ``*.tmp-*`` temporaries left after the re-run.
2. Two ``gdp publish`` loops on one lake at once, ``--rounds`` each: how many succeed.
3. Two ``gdp sweep`` of one spec at once (different ``--workers``): every cell stored once.
4. A staging chunk truncated to half its size: does the next ``gdp sweep`` recompute it and is the report complete.

Prints one JSON object; ``test_fault_injection_figures`` (slow) runs it and asserts the figures the issue asks for.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from tests.robustness.conftest import BIN, REPO, Proc, base_env, gdp, group_members, temporaries, write_spec

MANIFEST = """\
name: {name}
version: {version}
dataset_size: 10000
delta: 1.0e-5
mechanism:
  dpsgd: {{noise_multiplier: {sigma}, batch_size: 100, steps: {steps}}}
"""


class Bench:
    def __init__(self, root: Path):
        self.root = root
        self.lake = root / "lake"
        self.report = root / "reports" / "r.duckdb"
        self.env = base_env(root / "prefect-home")
        self.env["GDP_MAX_WORKERS"] = "2"
        self.expected_cells: dict[str, int] = {}
        self.expected_models: set[str] = set()

    def store(self) -> list[str]:
        return ["--lake", str(self.lake), "--report", str(self.report)]

    # -- the three commands -----------------------------------------------------------------------------------------
    def sweep_args(self, i: int) -> list[str]:
        spec = write_spec(
            self.root / f"fi{i}.yaml",
            f"fi{i}",
            [round(0.7 + 0.05 * i + 0.1 * k, 4) for k in range(6)],
            [50, 200],
            chunk=2,
        )
        self.expected_cells[f"fi{i}"] = 6 * 2 * 2
        return ["sweep", str(spec), "--runner", "process", "--workers", "2", "--no-progress", *self.store()]

    def audit_args(self, i: int) -> list[str]:
        reg = self.root / f"registry{i}"
        reg.mkdir(exist_ok=True)
        for v in (1, 2):
            (reg / f"m{v}.yaml").write_text(
                MANIFEST.format(name=f"fi-model-{i}", version=v, sigma=0.9 + 0.1 * v, steps=100 + 50 * (i + 3))
            )
            self.expected_models.add(f"fi-model-{i}:{v}")
        return ["audit", str(reg), *self.store()]

    def publish_args(self, i: int) -> list[str]:
        return ["publish", *self.store()]

    def run(self, args: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
        return gdp(args, self.env, timeout=timeout)

    def sql(self, query: str) -> list[dict[str, Any]]:
        res = self.run(["sql", query, "--report", str(self.report), "--format", "json"])
        if res.returncode:
            raise RuntimeError(res.stderr[-2000:])
        return json.loads(res.stdout)

    # -- checks ---------------------------------------------------------------------------------------------------------
    def check(self) -> dict[str, int]:
        import pyarrow.parquet as pq

        lost = dup = 0
        rows = self.sql("SELECT spec, count(*) AS n, count(DISTINCT cell_id) AS d FROM cells GROUP BY spec")
        by_spec = {r["spec"]: r for r in rows}
        for spec, n in self.expected_cells.items():
            r = by_spec.get(spec, {"n": 0, "d": 0})
            lost += max(0, n - r["d"])
            dup += r["n"] - r["d"]
            ids: list[str] = []
            for p in sorted((self.lake / "staging" / f"spec={spec}").glob("mechanism=*/chunk-*.parquet")):
                ids += pq.read_table(p, columns=["cell_id"]).column("cell_id").to_pylist()
            dup += len(ids) - len(set(ids))
        models = self.sql("SELECT model || ':' || version AS k FROM models")
        keys = [m["k"] for m in models]
        lost += len(self.expected_models - set(keys))
        dup += len(keys) - len(set(keys))
        return {"lost": lost, "duplicated": dup}


def _orphans(pgid: int, wait: float = 20.0) -> int:
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if not group_members(pgid):
            return 0
        time.sleep(0.5)
    return len(group_members(pgid))


def kill_trials(bench: Bench, trials: int, rng: random.Random) -> dict[str, Any]:
    makers = {"sweep": bench.sweep_args, "publish": bench.publish_args, "audit": bench.audit_args}
    # Baselines: each command once to completion (their durations bound the random kill points).
    durations = {}
    for what in ("sweep", "audit", "publish"):
        t0 = time.monotonic()
        res = bench.run(makers[what](-1 - len(durations)))
        durations[what] = time.monotonic() - t0
        if res.returncode:
            raise RuntimeError(f"baseline {what} failed: {res.stderr[-2000:]}")
    results = []
    order = [("sweep", "publish", "audit")[k % 3] for k in range(trials)]
    rng.shuffle(order)
    for i, what in enumerate(order):
        args = makers[what](i)
        delay = rng.uniform(0.0, durations[what])
        log = bench.root / f"trial{i}.log"
        proc = Proc([str(BIN / "gdp"), *args], log, bench.env)
        try:
            time.sleep(delay)
            finished_first = not proc.alive()
            proc.kill(signal.SIGKILL)  # the command's own process only: what a crash or the OOM killer does
            proc.popen.wait(timeout=30)
            orphans = _orphans(proc.pid)
        finally:
            proc.stop()
        rerun = bench.run(args)
        if rerun.returncode not in (0,):
            raise RuntimeError(f"trial {i}: re-run of {what} failed: {rerun.stderr[-3000:]}")
        counts = bench.check()
        temps = len(temporaries(bench.lake, bench.report.parent))
        results.append(
            {
                "trial": i,
                "command": what,
                "killed_at_s": round(delay, 2),
                "of_s": round(durations[what], 1),
                "finished_before_kill": finished_first,
                "orphans": orphans,
                "temporaries": temps,
                **counts,
            }
        )
        print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    return {
        "trials": len(results),
        "killed_mid_run": sum(not r["finished_before_kill"] for r in results),
        "killed_by_command": {
            c: sum(r["command"] == c and not r["finished_before_kill"] for r in results)
            for c in ("sweep", "publish", "audit")
        },
        "baseline_seconds": {k: round(v, 1) for k, v in durations.items()},
        "lost": max(r["lost"] for r in results),  # each check covers every trial so far
        "duplicated": max(r["duplicated"] for r in results),
        "orphaned_processes": sum(r["orphans"] for r in results),
        "temporaries": sum(r["temporaries"] for r in results),
        "per_trial": results,
    }


def concurrent_publishes(bench: Bench, rounds: int) -> dict[str, Any]:
    outcomes: list[tuple[int, str]] = []
    lock = threading.Lock()

    def loop() -> None:
        for _ in range(rounds):
            res = bench.run(bench.publish_args(0), timeout=300)
            with lock:
                outcomes.append((res.returncode, res.stderr[-500:]))

    threads = [threading.Thread(target=loop) for _ in range(2)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ok = sum(1 for rc, _ in outcomes if rc == 0)
    counts = bench.check()
    return {
        "publishes": len(outcomes),
        "succeeded": ok,
        "failures": [e for rc, e in outcomes if rc][:3],
        "seconds": round(time.monotonic() - t0, 1),
        "temporaries": len(temporaries(bench.lake, bench.report.parent)),
        **counts,
    }


def concurrent_sweeps(bench: Bench) -> dict[str, Any]:
    """Two sweeps of one new spec at once, with different --workers (before the spec lock: every cell twice)."""
    import pyarrow.parquet as pq

    args = bench.sweep_args(99)
    results: list[int] = []
    threads = [
        threading.Thread(target=lambda w=w: results.append(bench.run([*args, "--workers", w]).returncode))
        for w in ("1", "2")
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids: list[str] = []
    for p in sorted((bench.lake / "staging" / "spec=fi99").glob("mechanism=*/chunk-*.parquet")):
        ids += pq.read_table(p, columns=["cell_id"]).column("cell_id").to_pylist()
    return {
        "exit_codes": sorted(results),
        "staging_rows": len(ids),
        "distinct_cells": len(set(ids)),
        "expected_cells": bench.expected_cells["fi99"],
        **bench.check(),
    }


def truncated_chunk(bench: Bench) -> dict[str, Any]:
    spec = next(iter(bench.expected_cells))
    chunk = sorted((bench.lake / "staging" / f"spec={spec}").glob("mechanism=*/chunk-*.parquet"))[0]
    data = chunk.read_bytes()
    chunk.write_bytes(data[: len(data) // 2])
    res = bench.run(bench.sweep_args(int(spec.removeprefix("fi"))))
    import pyarrow.parquet as pq

    readable = chunk.exists() and pq.read_metadata(chunk).num_rows > 0
    counts = bench.check()
    n = bench.sql(f"SELECT count(*) AS n FROM cells WHERE spec = '{spec}' AND status = 'ok'")[0]["n"]
    return {
        "sweep_exit": res.returncode,
        "chunk_recomputed": readable,
        "quarantined": len(list((bench.lake / "_quarantine").rglob("chunk-*.parquet"))),
        "report_cells": n,
        "expected_cells": bench.expected_cells[spec],
        **counts,
    }


def run(trials: int = 10, rounds: int = 20, seed: int = 16, root: Path | None = None) -> dict[str, Any]:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="gdp-fi-") as tmp:
        bench = Bench(Path(root or tmp))
        bench.root.mkdir(parents=True, exist_ok=True)
        out = {"kill": kill_trials(bench, trials, rng)}
        out["concurrent_publish"] = concurrent_publishes(bench, rounds)
        out["concurrent_sweeps"] = concurrent_sweeps(bench)
        out["truncated_chunk"] = truncated_chunk(bench)
        return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--trials", type=int, default=10)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--seed", type=int, default=16)
    a = p.parse_args()
    res = run(a.trials, a.rounds, a.seed)
    res["kill"].pop("per_trial")
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()
