"""The ``gdp`` command line.

``gdp analyze <kind> --param value ... [--json] [--claim EPS,DELTA,ACCOUNTANT]`` prints the privacy report of one
mechanism (and re-checks a published claim about it: :func:`gdpcore.check_claim`). Pipeline sub-commands
register themselves in :data:`SUBCOMMANDS`; each imports its heavy dependencies (Prefect, DuckDB) only when run,
so ``gdp analyze`` starts fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["SUBCOMMANDS", "main"]

# name -> (help, add_arguments(parser), run(args) -> exit code)
SUBCOMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]] = {}


def _parse_value(text: str) -> Any:
    """CLI values: JSON literals (numbers, lists, objects) where they parse, plain strings otherwise."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _mechanism_from_args(kind: str | None, params: list[str], spec: str | None):
    from gdpcore import mechanism_from_dict

    if spec is not None:
        if kind is not None or params:
            raise ValueError("give either --spec or a mechanism kind with parameters, not both")
        text = spec
        if not spec.lstrip().startswith("{"):
            with open(spec, encoding="utf-8") as fh:
                text = fh.read()
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--spec is not valid JSON: {exc}") from None
        return mechanism_from_dict(data)
    if kind is None:
        raise ValueError("a mechanism kind is required, e.g. 'gdp analyze subsampled_gaussian --noise-multiplier 1'")
    data: dict[str, Any] = {"kind": kind}
    it = iter(params)
    for token in it:
        if not token.startswith("--"):
            raise ValueError(f"expected a --parameter, got {token!r}")
        name = token[2:].replace("-", "_")
        try:
            value = next(it)
        except StopIteration:
            raise ValueError(f"parameter {token} needs a value") from None
        data[name] = _parse_value(value)
    return mechanism_from_dict(data)


def _parse_claim(text: str | None) -> tuple[float, float, str] | None:
    """``--claim 8,1e-5,RDP`` -> (8.0, 1e-5, "RDP")."""
    if text is None:
        return None
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 3 or not parts[2]:
        raise ValueError(f"--claim must be EPSILON,DELTA,ACCOUNTANT (e.g. 8,1e-5,RDP), got {text!r}")
    try:
        return float(parts[0]), float(parts[1]), parts[2]
    except ValueError:
        raise ValueError(f"--claim: epsilon and delta must be numbers, got {text!r}") from None


def _claim_summary(check: Any) -> dict[str, Any]:
    r = check.reproduction
    return {
        "claimed": {
            "epsilon": check.claimed_epsilon,
            "delta": check.claimed_delta,
            "accountant": check.claimed_accountant,
        },
        "reproduced": {"epsilon": r.epsilon, "bound": r.bound, "family": r.family, "detail": r.detail},
        "status": check.status,
        "tight_epsilon": {"value": check.tight_epsilon, "bound": "upper"},
        "certified": check.certified,
        "summary": check.summary(),
    }


def _fmt(x: float) -> str:
    from tasks.formatting import format_number

    return format_number(x, 6)


def _print_report(summary: dict[str, Any]) -> None:
    mech = summary["mechanism"]
    params = ", ".join(f"{k}={v}" for k, v in mech.items() if k != "kind")
    lines = [
        f"Privacy report: {mech['kind']}({params})",
        f"  accountant      {summary['accountant']}",
        f"  discretization  {summary['discretization'] if summary['discretization'] is not None else 'exact'}",
        f"  status          {summary['status']}"
        + (
            f" (certified gap {summary['certified_gap']:.2g}, tolerance {summary['tolerance']:g})"
            if summary.get("certified_gap") is not None and summary.get("tolerance") is not None
            else ""
        ),
        "",
        f"  mu-GDP          {_fmt(summary['mu']['value'])}   ({summary['mu']['bound']} bound; "
        f"bracket [{_fmt(summary['mu']['lower'])}, {_fmt(summary['mu']['value'])}])",
    ]
    if summary["mu_certified_for_fpr_at_least"] is not None:
        lines.append(
            f"                  certified for FPR and FNR >= {summary['mu_certified_for_fpr_at_least']:g}; "
            f"binding at FPR {_fmt(summary['mu_binding_fpr'])}"
        )
    verdict = (
        "mu-GDP is an essentially complete description"
        if summary["gdp_is_complete"]
        else ("mu-GDP is NOT a complete description: report the trade-off curve too")
    )
    lines += [
        f"  GDP regret      {_fmt(summary['gdp_regret']['value'])}   ({summary['gdp_regret']['bound']}; {verdict})",
        f"  advantage       {_fmt(summary['advantage']['value'])}   ({summary['advantage']['bound']} bound; "
        f"max TPR - FPR of membership inference)",
        f"  Bayes security  {_fmt(summary['bayes_security']['value'])}   ({summary['bayes_security']['bound']} bound)",
        "",
        "  (eps, delta)    delta        eps (bound)",
    ]
    for row in summary["epsilon"]:
        lines.append(f"                  {row['delta']:<12g} {_fmt(row['value'])} ({row['bound']})")
    lines += ["", "  attack TPR      FPR          TPR (bound)"]
    for row in summary["tpr"]:
        lines.append(f"                  {row['fpr']:<12g} {_fmt(row['value'])} ({row['bound']})")
    if "claim" in summary:
        lines += ["", f"  published claim {summary['claim']['summary']}"]
    print("\n".join(lines))


def _analyze(args: argparse.Namespace) -> int:
    from gdpcore import analyze, check_claim

    claim = _parse_claim(args.claim)  # before any accounting: a malformed claim fails fast
    mechanism = _mechanism_from_args(args.kind, args.params, args.spec)
    deltas = tuple(args.delta) if args.delta else (1e-5, 1e-6, 1e-9)
    report = analyze(
        mechanism,
        accountant=args.accountant,
        discretization=args.discretization,
        alpha_min=args.alpha_min,
        deltas=tuple(sorted(set(deltas) | {1e-3})),
        tolerance=args.tolerance,
        memory_budget_bytes=args.memory_budget_gib * 2**30,
        time_budget_seconds=args.time_budget,
    )
    fprs = tuple(args.fpr) if args.fpr else (1e-10, 1e-8, 1e-6, 1e-4, 1e-3, 1e-2, 1e-1)
    summary = report.summary(deltas=deltas, fprs=fprs)
    if claim is not None:
        eps, delta, accountant = claim
        check = check_claim(
            mechanism, epsilon=eps, delta=delta, accountant=accountant, tight_epsilon=float(report.epsilon(delta))
        )
        summary["claim"] = _claim_summary(check)
    if args.json:
        print(json.dumps(summary, indent=2, allow_nan=True))
    else:
        _print_report(summary)
    return 0


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose epilog is computed when help is shown (the kind list comes from gdpcore's kind
    registry, whose import is kept out of start-up)."""

    def __init__(self, *args: Any, epilog_factory: Callable[[], str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._epilog_factory = epilog_factory

    def format_help(self) -> str:
        if self._epilog_factory is not None and self.epilog is None:
            self.epilog = self._epilog_factory()
        return super().format_help()


def _kinds_epilog() -> str:
    from gdpcore.kinds import help_text

    return help_text()


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gdp", description="Honest, complete differential-privacy reports.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    p = sub.add_parser(
        "analyze",
        help="privacy report of one mechanism",
        description="e.g. gdp analyze subsampled_gaussian --noise-multiplier 9.4 --sampling-rate 0.32768 --steps 2000",
        epilog_factory=_kinds_epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("kind", nargs="?", help="mechanism kind (listed below with its parameters), or use --spec")
    p.add_argument("--spec", help="a mechanism as JSON text or a JSON file (any kind, incl. composed)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--accountant", default="auto", choices=("auto", "pld", "closed_form"))
    p.add_argument(
        "--discretization",
        type=float,
        default=None,
        help="fixed PLD step (default: refined until the certified bracket is within --tolerance)",
    )
    p.add_argument(
        "--tolerance", type=float, default=1e-3, help="target relative width of the eps/mu/advantage brackets"
    )
    p.add_argument(
        "--memory-budget-gib", type=float, default=4.0, help="working-memory budget, checked before allocating"
    )
    p.add_argument("--time-budget", type=float, default=60.0, help="seconds the step refinement may take")
    p.add_argument("--alpha-min", type=float, default=1e-10, dest="alpha_min")
    p.add_argument("--delta", type=float, action="append", help="delta for eps(delta); repeatable")
    p.add_argument("--fpr", type=float, action="append", help="FPR for the TPR table; repeatable")
    p.add_argument(
        "--claim",
        metavar="EPS,DELTA,ACCOUNTANT",
        help="re-check a published claim, e.g. 8,1e-5,RDP: reproduced with the named accountant "
        "(RDP, PLD/PRV, GDP/CLT) and certified (or not) by the tight pessimistic epsilon",
    )
    p.set_defaults(run=_analyze)
    for name, (help_text, add_args, run) in SUBCOMMANDS.items():
        sp = sub.add_parser(name, help=help_text)
        add_args(sp)
        sp.set_defaults(run=run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    _register_pipeline_commands()
    parser = _build_parser()
    args, unknown = parser.parse_known_args(argv)
    if args.command == "analyze":
        args.params = list(unknown)
    elif unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        return int(args.run(args))
    except ValueError as exc:
        print(f"gdp {args.command}: error: {exc}", file=sys.stderr)
        return 2


def _register_pipeline_commands() -> None:
    """Pipeline commands register themselves into SUBCOMMANDS from flows/commands.py (imports stay lazy there)."""
    import flows.commands  # noqa: F401


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
