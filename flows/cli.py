"""The ``gdp`` command line (argparse).

``gdp analyze <kind> --param value ... [--json] [--claim EPS,DELTA,ACCOUNTANT]`` prints the privacy report of one
mechanism (and re-checks a published claim about it: :func:`gdpcore.check_claim`). The per-kind options are generated
from gdpcore's mechanism dataclasses (``gdp analyze gaussian --help`` lists them with types and defaults), so a new
kind or field needs no CLI change. ``gdp analyze --opacus FILE | --tf-privacy ... | --dp-event FILE`` takes what a
training run left behind instead of a kind (:mod:`gdpcore.adapters`; ``--sampler shuffle`` labels every number an
estimate, with the reason). The pipeline sub-commands come from :data:`flows.commands.COMMANDS`; each imports its
heavy dependencies (Prefect, DuckDB) only when run, so ``gdp analyze`` starts fast.

Why argparse and not typer/click: the options of ``analyze`` are generated at run time from the kind registry,
which argparse's sub-parsers express directly; the standard library keeps ``gdp --help`` free of import cost, and
every user error goes through one place (:class:`_Parser` / :func:`main`) that prints ``gdp CMD: error: ...`` and
exits 2 without a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from flows.command_common import describe_mechanism as _describe
from flows.commands import COMMANDS
from flows.mechanism_args import (
    _add_kind_parsers,
    _mechanism_from_args,
    _Parser,
    _probability,
    _training_run_from_args,
)

__all__ = ["main"]


def _parse_claim(text: str | None) -> tuple[float, float, str] | None:
    """``--claim 8,1e-5,RDP`` -> (8.0, 1e-5, "RDP")."""
    if text is None:
        return None
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 3 or not parts[2]:
        raise ValueError(f"--claim must be EPSILON,DELTA,ACCOUNTANT (e.g. 8,1e-5,RDP), got {text!r}")
    try:
        eps, delta = float(parts[0]), float(parts[1])
    except ValueError:
        raise ValueError(f"--claim: epsilon and delta must be numbers, got {text!r}") from None
    from gdpcore.claims import reproduction_family

    if reproduction_family(parts[2]) is None:
        raise ValueError(
            f"--claim: unknown accountant {parts[2]!r}; use RDP (Renyi / moments), PLD (PRV, connect-the-dots) or "
            "GDP (CLT)"
        )
    return eps, delta, parts[2]


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


def _bound(label: str) -> str:
    """'upper bound' / 'lower bound' / 'exact bound'; an estimate is no bound."""
    return label if label == "estimate" else f"{label} bound"


def _print_report(summary: dict[str, Any]) -> None:
    mech = summary["mechanism"]
    lines = [
        f"Privacy report: {_describe(mech)}",
        f"  accountant      {summary['accountant']}",
        f"  discretization  {'exact' if summary['discretization'] is None else format(summary['discretization'], '.4g')}",
        f"  status          {summary['status']}"
        + (
            f" (certified gap {summary['certified_gap']:.2g}, tolerance {summary['tolerance']:g})"
            if summary.get("certified_gap") is not None and summary.get("tolerance") is not None
            else ""
        ),
        "",
        f"  mu-GDP          {_fmt(summary['mu']['value'])}   ({_bound(summary['mu']['bound'])}; "
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
        *_regime_lines(summary["gdp_regret"].get("regime_warning")),
        f"  advantage       {_fmt(summary['advantage']['value'])}   ({_bound(summary['advantage']['bound'])}; "
        f"max TPR - FPR of membership inference)",
        f"  Bayes security  {_fmt(summary['bayes_security']['value'])}   ({_bound(summary['bayes_security']['bound'])})",
        "",
        "  (eps, delta)    delta        eps (bound)",
    ]
    for row in summary["epsilon"]:
        lines.append(f"                  {row['delta']:<12g} {_fmt(row['value'])} ({row['bound']})")
    lines += ["", "  attack TPR      FPR          TPR (bound)"]
    alpha_star = summary.get("fixed_point", {}).get("value")
    for row in summary["tpr"]:
        note = "   alpha*: FPR = FNR (seed 000)" if row["fpr"] == alpha_star else ""
        lines.append(f"                  {row['fpr']:<12g} {_fmt(row['value'])} ({row['bound']}){note}")
    if "claim" in summary:
        lines += ["", f"  published claim {summary['claim']['summary']}"]
    run = summary.get("training_run")
    if run is not None:
        lines[1:1] = [
            f"  training run    {run['source']}",
            f"  sampler         {run['sampler'] or 'not stated'}; neighbouring {run['neighbouring']}; "
            f"unit {run['privacy_unit']}" + ("" if run["steps"] is None else f"; {run['steps']:,} steps"),
        ]
        if run["estimate_reason"]:
            lines[3:3] = [f"  ESTIMATE        every number below is an estimate: {run['estimate_reason']}"]
    print("\n".join(lines))


def _regime_lines(warning: str | None) -> list[str]:
    """The seed 000 rule-of-thumb warning (:func:`gdpcore.guidance.regime_warning`) under the regret, when it applies."""
    return [] if warning is None else [f"                  {warning}"]


def _analyze(args: argparse.Namespace) -> int:
    from flows.commands_runs import analyze_extras, best_representation_text, check_plot_path, write_analyze_plot
    from gdpcore import analyze, check_claim
    from gdpcore.adapters import TrainingRunReport

    claim = _parse_claim(args.claim)  # before any accounting: a malformed claim fails fast
    if args.plot is not None:
        check_plot_path(args.plot, args.overwrite)
    run = _training_run_from_args(args)
    mechanism = run.mechanism if run is not None else _mechanism_from_args(args)
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
    if run is not None:  # the run's labels: "estimate" everywhere when the batches were not drawn as accounted
        summary = TrainingRunReport(run=run, report=report).summary(deltas=deltas, fprs=fprs)
    else:
        summary = report.summary(deltas=deltas, fprs=fprs)
    if claim is not None:
        eps, delta, accountant = claim
        check = check_claim(
            mechanism, epsilon=eps, delta=delta, accountant=accountant, tight_epsilon=float(report.epsilon(delta))
        )
        summary["claim"] = _claim_summary(check)
        if run is not None and run.is_estimate:  # nothing about a run accounted for another sampler is certified
            summary["claim"]["certified"] = None
            summary["claim"]["tight_epsilon"]["bound"] = "estimate"
            repro = check.reproduction.epsilon
            summary["claim"]["summary"] = (
                f"claimed eps={eps:g} at delta={delta:g} ({accountant}); accounted as Poisson sampling, "
                + ("" if repro is None else f"{check.reproduction.family} gives {repro:.4g} and ")
                + f"gdpcore gives {check.tight_epsilon:.4g}, estimates only ({run.estimate_reason}): the claim is "
                "neither certified nor refuted"
            )
    extras = analyze_extras(report) if (args.json or not report.gdp_is_complete) else None
    if args.plot is not None:
        write_analyze_plot(
            report, summary, args.plot, title=f"{_describe(summary['mechanism'])}: {report.accountant.split(' (')[0]}"
        )
    if args.json:
        from tasks.formatting import json_text

        print(json_text({**summary, **(extras or {})}))
    else:
        _print_report(summary)
        for line in best_representation_text(report, extras):
            print(line)
        if args.plot is not None:
            print(f"  plot            {args.plot}")
    return 0


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"gdp-audit {version('gdp-audit')}"
    except PackageNotFoundError:  # a source checkout on PYTHONPATH
        return "gdp-audit (source checkout, not installed)"


def _analyze_options(p: argparse.ArgumentParser, *, suppress: bool) -> None:
    """Options shared by ``gdp analyze`` and ``gdp analyze KIND`` (SUPPRESS on the kind parsers keeps a value given
    before the kind from being reset by the kind parser's default)."""

    def d(value: Any) -> Any:
        return argparse.SUPPRESS if suppress else value

    p.add_argument("--spec", default=d(None), help="a mechanism as YAML/JSON text or file (any kind, incl. composed)")
    p.add_argument(
        "--json",
        action="store_true",
        default=d(False),
        help="print the report as JSON, with the trade-off curve (both sides of the bracket) and the regret of each "
        'representation (strict JSON: null = not computed, "inf" = infinite)',
    )
    p.add_argument(
        "--plot", metavar="FILE.png", default=d(None), help="write the curve figure, with the |f - f_mu| panel"
    )
    p.add_argument("--overwrite", action="store_true", default=d(False), help="let --plot replace an existing file")
    p.add_argument(
        "--accountant",
        default=d("auto"),
        choices=("auto", "pld", "closed_form"),
        help="auto: closed form where one exists (plain Gaussians), else the pessimistic PLD (default auto)",
    )
    p.add_argument(
        "--discretization",
        type=float,
        default=d(None),
        help="fixed PLD discretisation step (default: refined until every certified bracket is within --tolerance)",
    )
    p.add_argument(
        "--tolerance",
        type=float,
        default=d(1e-3),
        help="target relative width of the eps, mu and advantage brackets (default 1e-3)",
    )
    p.add_argument(
        "--memory-budget-gib",
        type=float,
        default=d(4.0),
        help="working-memory budget in GiB, planned before allocating (default 4)",
    )
    p.add_argument(
        "--time-budget",
        type=float,
        default=d(60.0),
        help="seconds the step refinement may take (default 60)",
    )
    p.add_argument(
        "--alpha-min",
        type=_probability("--alpha-min", open_low=True),
        default=d(1e-10),
        dest="alpha_min",
        help="smallest FPR the mu search certifies the Gaussian curve down to (default 1e-10)",
    )
    p.add_argument(
        "--delta",
        type=_probability("--delta", open_low=True, open_high=True),
        action="append",
        default=d(None),
        help="delta for eps(delta), in (0, 1); repeatable (default 1e-5, 1e-6, 1e-9)",
    )
    p.add_argument(
        "--fpr",
        type=_probability("--fpr"),
        action="append",
        default=d(None),
        help="FPR for the attack-TPR table, in [0, 1]; repeatable (default 1e-10 ... 0.1)",
    )
    p.add_argument(
        "--claim",
        metavar="EPS,DELTA,ACCOUNTANT",
        default=d(None),
        help="re-check a published claim, e.g. 8,1e-5,RDP: reproduced with the named accountant "
        "(RDP, PLD/PRV, GDP/CLT) and certified (or not) by the tight pessimistic epsilon",
    )


def _positive_int(text: str) -> int:
    try:
        x = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if x < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return x


def _positive_float(text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not 0 < x < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return x


def _training_run_options(p: argparse.ArgumentParser) -> None:
    """``gdp analyze`` from what a training run left behind (gdpcore.adapters; README "From my training run ...")."""
    g = p.add_argument_group("training runs (instead of a KIND)")
    g.add_argument("--dp-event", metavar="FILE", help="a dp_accounting DpEvent as JSON (gdpcore.events form)")
    g.add_argument(
        "--opacus",
        metavar="FILE",
        help="an Opacus accountant: state_dict() saved by torch.save (.pt) or as JSON, or its history as JSON",
    )
    g.add_argument(
        "--tf-privacy",
        action="store_true",
        help="TF-Privacy's compute_dp_sgd_privacy_statement parameters (with the four options below)",
    )
    g.add_argument(
        "--number-of-examples",
        dest="tf_number_of_examples",
        type=_positive_int,
        metavar="N",
        help="--tf-privacy: training-set size",
    )
    g.add_argument(
        "--batch-size",
        dest="tf_batch_size",
        type=_positive_int,
        metavar="B",
        help="--tf-privacy: batch size (q = B / N)",
    )
    g.add_argument(
        "--epochs", dest="tf_epochs", type=_positive_float, metavar="E", help="--tf-privacy: epochs (may be fractional)"
    )
    g.add_argument(
        "--noise-multiplier",
        dest="tf_noise_multiplier",
        type=_positive_float,
        metavar="SIGMA",
        help="--tf-privacy: noise multiplier",
    )
    g.add_argument(
        "--no-microbatching",
        dest="tf_no_microbatching",
        action="store_true",
        help="TF-Privacy used_microbatching=False (default True: microbatches of size > 1 halve the noise multiplier)",
    )
    g.add_argument(
        "--max-examples-per-user",
        dest="tf_max_examples_per_user",
        type=_positive_int,
        metavar="K",
        help="--tf-privacy: user-level accounting, at most K examples per user",
    )
    g.add_argument(
        "--sampler",
        choices=("poisson", "shuffle", "fixed"),
        default=None,
        help="how the batches were drawn (default: poisson; Opacus runs: as recorded). shuffle / fixed label "
        "Poisson-accounted numbers as estimates",
    )
    g.add_argument(
        "--neighbouring",
        choices=("add_remove", "replace_one"),
        default=None,
        help="relation a --dp-event is read under (default add_remove); replace_one with --tf-privacy --sampler fixed",
    )


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="gdp", description="Honest, complete differential-privacy reports.")
    parser.add_argument("--version", action="version", version=_version(), help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    p = sub.add_parser(
        "analyze",
        help="privacy report of one mechanism",
        description="e.g. gdp analyze subsampled_gaussian --noise-multiplier 9.4 --sampling-rate 0.32768 --steps 2000"
        "; 'gdp analyze KIND --help' lists the kind's parameters",
    )
    _analyze_options(p, suppress=False)
    _training_run_options(p)
    _add_kind_parsers(
        p,
        help="mechanism kind (or use --spec)",
        add_options=lambda kp: _analyze_options(kp, suppress=True),
        limits_in_help=True,
    )
    p.set_defaults(run=_analyze)
    for name, (help_text, add_args, run) in COMMANDS.items():
        sp = sub.add_parser(name, help=help_text, description=help_text)
        add_args(sp)
        sp.set_defaults(run=run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``gdp`` command and return its exit code.

    Called without ``argv`` (the ``gdp`` script, ``python -m flows.cli``), this is the process's own command line:
    once the command has returned and every exit handler has run (the temporary Prefect server is stopped,
    log/event workers drain, pools are joined, temporary folders removed), the process exits without tearing down its modules
    (:func:`_exit_after_handlers`) - with Prefect, DuckDB and SciPy loaded that teardown took ~1 s and did nothing
    a later reader can see. With ``argv`` (tests, other Python code) nothing changes."""
    from tasks.trace import phase

    code: list[int] = []
    if argv is None:
        import atexit

        atexit.register(_exit_after_handlers, code)  # registered first, so it runs last
    phase("main")
    if os.environ.get("GDP_TRACE"):  # runs after every handler registered later (the server is stopped)
        import atexit

        atexit.register(phase, "exit")
    rc = _main(argv)
    code.append(rc)
    return rc


def _exit_after_handlers(code: list[int]) -> None:
    """The last exit handler: flush stdout/stderr and end the process with the command's exit code, skipping the
    interpreter's module teardown. Only after a command returned normally (an uncaught exception leaves ``code``
    empty and the interpreter exits as usual). Files, DuckDB reports and Parquet files are closed by the commands
    themselves (context managers) before this runs; nothing else is lost but garbage collection."""
    if not code:
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can be written to it anyway
            pass
    os._exit(code[0])


def _main(argv: Sequence[str] | None) -> int:
    parser = _build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help / --version (0) and usage errors (2) return their code, like a command
        return int(exc.code or 0)
    try:
        return int(args.run(args))
    except (ValueError, FileNotFoundError) as exc:  # user errors: one line, exit 2, nothing partial written
        print(f"gdp {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `gdp sql ... | head`: the reader left; no traceback, no second error at exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a process killed by it
    except KeyboardInterrupt:
        print(f"gdp {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover - `python -m flows.cli`
    sys.exit(main())
