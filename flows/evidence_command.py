"""``gdp evidence``: hold one model's canary attack scores against its declared mechanism.

    gdp evidence --scores scores.npz subsampled_gaussian --noise-multiplier 1 --sampling-rate 0.02 --steps 100
    gdp evidence --scores scores.parquet --spec mechanism.json --confidence 0.99 --json

The mechanism is given as for ``gdp analyze`` (a KIND with its ``--param`` options, or ``--spec``); the scores file as
for a manifest's ``evidence.scores`` (:func:`tasks.evidence.read_scores`). A bad file exits 2 with one line naming the
file and the field. The text output labels every number (lower / upper bound, confidence, method) and ends with the
verdict; ``--json`` prints the same as JSON. Exit code 0 for ``consistent``, 3 for ``violates_claim``.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from flows.command_common import Command
from flows.mechanism_args import _add_kind_parsers, _mechanism_from_args, _probability

__all__ = ["EVIDENCE_COMMANDS", "run_evidence"]

VIOLATION_EXIT = 3


def _common(p: argparse.ArgumentParser, *, suppress: bool) -> None:
    def d(value: Any) -> Any:
        return argparse.SUPPRESS if suppress else value

    p.add_argument(
        "--scores", default=d(None), metavar="FILE", help="canary scores: .parquet/.csv (score, is_member) or .npz"
    )
    p.add_argument(
        "--confidence",
        type=_probability("--confidence", open_low=True, open_high=True),
        default=d(0.95),
        help="simultaneous confidence of every lower bound, in (0, 1) (default 0.95)",
    )
    p.add_argument("--spec", default=d(None), help="the declared mechanism as YAML/JSON text or file")
    p.add_argument(
        "--delta",
        type=_probability("--delta", open_low=True, open_high=True),
        action="append",
        default=d(None),
        help="delta for the epsilon lower bound; repeatable (default 1e-5)",
    )
    p.add_argument("--json", action="store_true", default=d(False), help="print the result as JSON")


def _add_args(p: argparse.ArgumentParser) -> None:
    _common(p, suppress=False)
    _add_kind_parsers(
        p,
        help="declared mechanism kind",
        add_options=lambda kp: _common(kp, suppress=True),
        limits_in_help=False,
    )


def run_evidence(args: argparse.Namespace) -> dict[str, Any]:
    """The evidence of ``args.scores`` against the declared mechanism, as a JSON-ready dict."""
    import gdpcore
    from tasks.evidence import evaluate, read_scores

    if not args.scores:
        raise ValueError("--scores FILE is required (the canary scores to audit)")
    mech = _mechanism_from_args(args)  # fails before the scores are read or anything is computed
    scores = read_scores(args.scores)
    deltas = sorted(set(args.delta or [1e-5]), reverse=True)
    report = gdpcore.analyze(mech, deltas=tuple(sorted({*deltas, 1e-5})))
    nums = evaluate(scores, {"eps_deltas": deltas, "delta": deltas[0]}, confidence=args.confidence, report=report)
    return {
        "scores": str(args.scores),
        "scores_sha256": scores.sha256,
        "mechanism": mech.to_dict(),
        **{k: v for k, v in nums.items() if not k.startswith(("points_", "box_", "evidence_json"))},
        "certified_mu_bound": "upper",
        "mu_lower_bound": "lower",
        "epsilon_lower_bound": "lower",
        "certified_epsilon": [float(report.epsilon(d)) for d in deltas],
    }


def _g(x: Any, digits: int = 4) -> str:
    if x is None:
        return "n/a"
    return "inf" if isinstance(x, float) and math.isinf(x) else f"{x:.{digits}g}"


def _evidence(args: argparse.Namespace) -> int:
    out = run_evidence(args)
    if args.json:
        from tasks.formatting import json_text

        print(json_text(out))
    else:
        conf = f"{100 * out['confidence']:.4g}% confidence"
        print(f"scores: {out['scores']} ({out['n_members']:,} members, {out['n_non_members']:,} non-members)")
        print(f"method: {out['method']} [{out['method_id']}]")
        print(f"mu lower bound (from the scores, {conf}):     {_g(out['mu_lower'])}")
        print(f"mu upper bound (certified, declared mechanism): {_g(out['certified_mu'])}")
        for d, lo, hi in zip(out["eps_deltas"], out["epsilon_lower"], out["certified_epsilon"], strict=True):
            print(f"epsilon at delta={d:g}: lower bound {_g(lo)} ({conf}), certified upper bound {_g(hi)}")
        print(f"tightness (mu lower / certified mu): {_g(out['tightness'], 3)}")
        if out["strongest_fpr"] is not None:
            where = "furthest above" if out["verdict"] == "violates_claim" else "closest to"
            print(f"evidence comes {where} the certified curve at FPR <= {out['strongest_fpr']:.2e}")
        print(f"power: an audit of this size can only flag a model whose true mu exceeds {_g(out['detectable_mu'], 3)}")
        if out["verdict"] == "violates_claim":
            print("verdict: VIOLATES THE CLAIM - the attack does better than the declared mechanism allows")
        else:
            print("verdict: consistent - no evidence of a violation (not proof of privacy)")
    return VIOLATION_EXIT if out["verdict"] == "violates_claim" else 0


EVIDENCE_COMMANDS: dict[str, Command] = {
    "evidence": Command(
        "hold canary attack scores against a declared mechanism: lower bounds, verdict (exit 3 on a violation)",
        _add_args,
        _evidence,
    )
}
