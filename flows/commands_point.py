"""``gdp calibrate``, ``compare``, ``convert`` and ``bayes-security``: one question about one point, answered from the
command line without a spec file, a lake or Prefect.

One family of conventions:

* a mechanism is written as for ``gdp analyze``: ``KIND --param value ...`` or ``--spec FILE|TEXT``
  (:mod:`flows.mechanism_args`); ``gdp compare`` takes two of them, each as one quoted argument,
  ``gdp compare 'gaussian --noise-multiplier 1' 'laplace --scale 1'``;
* every number is printed with its label (exact / upper / lower / estimate) and its source (paper and equation);
* ``--json`` prints the same numbers as strict JSON (:func:`tasks.formatting.json_text`: ``null`` = not computed,
  ``"inf"`` = infinite);
* bad input is one line naming the option and its (bounded) value, exit 2 (:func:`flows.cli.main`).

The numbers are gdpcore's: :mod:`gdpcore.calibration` (seed 001), :mod:`gdpcore.divergence` (seed 002),
:mod:`gdpcore.closed_form` (seed 000 Table 3 and its inverse; Dong et al. Cor. 2.13) and :mod:`gdpcore.bayes_security`
(seed 004).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from typing import Any

from flows.command_common import Command, describe_mechanism

__all__ = ["POINT_COMMANDS"]

_REPORT_DELTA = 1e-5  # the calibrated mechanism's eps is reported at this delta (seed 001 Sec. 3.3)


def _g(x: Any, digits: int = 6) -> str:
    from tasks.formatting import format_number

    return format_number(x, digits)


def _emit(args: argparse.Namespace, out: dict[str, Any], lines: Sequence[str]) -> int:
    from tasks.formatting import json_text

    print(json_text(out) if args.json else "\n".join(lines))
    return 0


def _number(name: str, *, low: float = -math.inf, low_open: bool = False, high: float = math.inf) -> Callable:
    """argparse type: a finite float in the given range (argparse names the option ``name`` in the error; the value
    is echoed bounded)."""

    def parse(text: str) -> float:
        from gdpcore._validation import bounded_repr

        try:
            x = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, got {bounded_repr(text)}") from None
        ok = math.isfinite(x) and (x > low if low_open else x >= low) and x <= high
        if not ok:
            rng = (
                f"{'>' if low_open else '>='} {low:g}"
                if math.isinf(high)
                else f"in {'(' if low_open else '['}{low:g}, {high:g}]"
            )
            raise argparse.ArgumentTypeError(f"must be a finite number {rng}, got {bounded_repr(text)}")
        return x

    return parse


def _count(name: str) -> Callable:
    def parse(text: str) -> int:
        from gdpcore._validation import bounded_repr

        try:
            x = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a positive integer, got {bounded_repr(text)}") from None
        if x < 1:
            raise argparse.ArgumentTypeError(f"must be a positive integer, got {bounded_repr(text)}")
        return x

    return parse


def _probability(name: str) -> Callable:
    """argparse type: a float in (0, 1)."""

    def parse(text: str) -> float:
        from gdpcore._validation import bounded_repr

        try:
            x = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, got {bounded_repr(text)}") from None
        if not 0.0 < x < 1.0:
            raise argparse.ArgumentTypeError(f"must be in (0, 1), got {bounded_repr(text)}")
        return x

    return parse


def _json_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--json", action="store_true", help='print the result as strict JSON (null = not computed, "inf" = infinite)'
    )


# -- gdp calibrate -----------------------------------------------------------------------------------------------------
_SOLVABLE = ("noise_multiplier", "sampling_rate", "steps")
_TARGETS = {  # option dest -> (calibrator keyword, needs)
    "target_epsilon": ("target_epsilon", "delta"),
    "target_mu": ("target_mu", None),
    "target_advantage": ("target_advantage", None),
    "target_tpr": ("target_tpr", "fpr"),
    "target_fnr": ("target_fnr", "fpr"),
    "target_bayes_security": ("target_bayes_security", None),
    "target_accuracy": ("target_fnr", "fpr"),  # seed 001 Table 1 row 2 -> an FNR target
    "target_precision": ("target_fnr", "fpr"),  # seed 001 Table 1 row 3 -> an FNR target
}


def _calibrate_args(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Calibrate DP-SGD (subsampled_gaussian, as 'gdp analyze subsampled_gaussian') to one attack-risk target "
        "(seed 001): give two of --noise-multiplier, --sampling-rate, --steps; the third is solved for (smallest "
        "sigma, largest q or T that meet the target under the pessimistic accountant). e.g. gdp calibrate "
        "--sampling-rate 0.01 --steps 1000 --target-epsilon 8 --delta 1e-5"
    )
    m = p.add_argument_group("the mechanism (two of three)")
    m.add_argument(
        "--noise-multiplier",
        type=_number("--noise-multiplier", low=0, low_open=True),
        metavar="SIGMA",
        help="noise multiplier (solved for when omitted: the smallest that meets the target)",
    )
    m.add_argument(
        "--sampling-rate",
        type=_number("--sampling-rate", low=0, low_open=True, high=1),
        metavar="Q",
        help="Poisson sampling rate in (0, 1] (solved for when omitted: the largest that meets the target)",
    )
    m.add_argument(
        "--steps",
        type=_count("--steps"),
        metavar="T",
        help="number of steps (solved for when omitted: the largest that meets the target)",
    )
    t = p.add_argument_group("the target (exactly one)")
    t.add_argument("--target-epsilon", type=_number("--target-epsilon", low=0), metavar="EPS", help="eps at --delta")
    t.add_argument("--target-mu", type=_number("--target-mu", low=0, low_open=True), metavar="MU", help="mu-GDP")
    t.add_argument(
        "--target-advantage", type=_probability("--target-advantage"), metavar="ETA", help="max TPR - FPR (Eq. 13)"
    )
    t.add_argument("--target-tpr", type=_probability("--target-tpr"), metavar="TPR", help="attack TPR at --fpr")
    t.add_argument("--target-fnr", type=_probability("--target-fnr"), metavar="FNR", help="attack FNR at --fpr")
    t.add_argument(
        "--target-bayes-security", type=_probability("--target-bayes-security"), metavar="BETA", help="1 - advantage"
    )
    t.add_argument(
        "--target-accuracy", type=_probability("--target-accuracy"), metavar="ACC", help="attack accuracy at --fpr"
    )
    t.add_argument(
        "--target-precision", type=_probability("--target-precision"), metavar="PPV", help="attack precision at --fpr"
    )
    t.add_argument("--delta", type=_probability("--delta"), help="delta of --target-epsilon")
    t.add_argument("--fpr", type=_probability("--fpr"), help="FPR of --target-tpr/-fnr/-accuracy/-precision")
    p.add_argument("--tolerance", type=_probability("--tolerance"), default=1e-3, help="relative (default 1e-3)")
    p.add_argument(
        "--discretization",
        type=_number("--discretization", low=0, low_open=True),
        help="certify at this PLD step (default: refined coarse to fine)",
    )
    _json_option(p)


def _calibration_target(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """(the target as given, the calibrator's keyword arguments)."""
    from gdpcore.calibration import fnr_target_from_accuracy, fnr_target_from_precision

    given = [k for k in _TARGETS if getattr(args, k) is not None]
    if len(given) != 1:
        opts = ", ".join("--" + k.replace("_", "-") for k in (given or _TARGETS))
        raise ValueError(
            f"give exactly one target, got {'none' if not given else opts}" + ("; one of " + opts if not given else "")
        )
    name = given[0]
    keyword, needs = _TARGETS[name]
    value = getattr(args, name)
    for extra in ("delta", "fpr"):
        if getattr(args, extra) is not None and extra != needs:
            raise ValueError(f"--{extra} is not used by --{name.replace('_', '-')}")
        if extra == needs and getattr(args, extra) is None:
            raise ValueError(f"--{name.replace('_', '-')} needs --{extra}")
    described = f"{name.removeprefix('target_').replace('_', ' ')} <= {value:g}"
    if name == "target_bayes_security":
        described = f"bayes security >= {value:g}"
    if name == "target_fnr":
        described = f"FNR >= {value:g}"
    kwargs: dict[str, Any] = {keyword: value}
    if name == "target_accuracy":
        kwargs[keyword] = fnr_target_from_accuracy(accuracy=value, fpr=args.fpr)
    elif name == "target_precision":
        kwargs[keyword] = fnr_target_from_precision(precision=value, fpr=args.fpr)
    if needs is not None:
        kwargs[needs] = getattr(args, needs)
        described += f" at {needs} {getattr(args, needs):g}"
    return described, kwargs


def calibrate_point(args: argparse.Namespace) -> dict[str, Any]:
    """The calibration of ``args`` as a JSON-ready dict (the numbers of :func:`gdpcore.calibration.calibrate_noise`
    / ``calibrate_steps`` / ``calibrate_sampling_rate``, then eps at delta = 1e-5 and the advantage of the calibrated
    mechanism from :func:`gdpcore.analyze`)."""
    import gdpcore
    from gdpcore import calibration

    missing = [k for k in _SOLVABLE if getattr(args, k) is None]
    if len(missing) != 1:
        opts = ", ".join("--" + k.replace("_", "-") for k in _SOLVABLE)
        raise ValueError(f"give two of {opts} (the third is solved for), got {3 - len(missing)}")
    described, kwargs = _calibration_target(args)
    solve = missing[0]
    fixed = {k: getattr(args, k) for k in _SOLVABLE if k != solve}
    calibrators: dict[str, Callable[..., Any]] = {
        "noise_multiplier": calibration.calibrate_noise,
        "sampling_rate": calibration.calibrate_sampling_rate,
        "steps": calibration.calibrate_steps,
    }
    res = calibrators[solve](**fixed, **kwargs, tolerance=args.tolerance, discretization=args.discretization)
    report = gdpcore.analyze(res.mechanism, deltas=(_REPORT_DELTA,))
    labels = report.bound_types
    return {
        "solved_for": solve,
        "target": described,
        "value": res.value,
        "value_bound": res.bound_types[solve],
        "mechanism": res.mechanism.to_dict(),
        "achieved": {"value": res.achieved, "bound": res.bound_types["achieved"], "metric": res.target},
        "rejected": res.rejected,
        "rejected_achieved": res.rejected_achieved,
        "at_limit": res.at_limit,
        "accountant": res.accountant,
        "discretization": res.discretization,
        "epsilon": {"delta": _REPORT_DELTA, "value": float(report.epsilon(_REPORT_DELTA)), "bound": labels["epsilon"]},
        "advantage": {"value": float(report.advantage), "bound": labels["advantage"]},
        "calibration": res.to_dict(),
    }


def _calibrate(args: argparse.Namespace) -> int:
    out = calibrate_point(args)
    solve, value = out["solved_for"], out["value"]
    side = {"noise_multiplier": "smallest", "sampling_rate": "largest", "steps": "largest"}[solve]
    limit = " (at the search limit: every value in range meets it)" if out["at_limit"] else ""
    lines = [
        f"calibrate subsampled_gaussian({', '.join(f'{k}={v:g}' for k, v in out['mechanism'].items() if k in _SOLVABLE and k != solve)})"
        f" for {out['target']}",
        f"  {solve:<16} {_g(value)}   ({out['value_bound']}; the {side} value meeting the target{limit})",
        f"  achieved         {out['achieved']['metric']} = {_g(out['achieved']['value'])}   "
        f"({_bound(out['achieved']['bound'])}; {out['accountant']})",
    ]
    if out["rejected"] is not None:
        lines.append(
            f"  rejected         {solve} = {_g(out['rejected'])} misses it ({out['achieved']['metric']} = {_g(out['rejected_achieved'])})"
        )
    lines += [
        f"  eps at delta={_REPORT_DELTA:g} {_g(out['epsilon']['value'])}   ({_bound(out['epsilon']['bound'])})",
        f"  advantage        {_g(out['advantage']['value'])}   ({_bound(out['advantage']['bound'])}; max TPR - FPR)",
    ]
    return _emit(args, out, lines)


def _bound(label: str) -> str:
    return label if label == "estimate" else f"{label} bound"


# -- gdp compare -------------------------------------------------------------------------------------------------------
def mechanism_from_text(text: str, what: str) -> Any:
    """A mechanism written as for ``gdp analyze`` (``KIND --param value ...`` or ``--spec FILE|TEXT``) in one string;
    a usage error becomes one ValueError naming ``what``."""
    import contextlib
    import io
    import shlex

    from flows.mechanism_args import _add_kind_parsers, _mechanism_from_args, _Parser
    from gdpcore._validation import bounded_repr

    stripped = text.strip()
    if stripped.startswith("--spec") and stripped[6:7] in (" ", "="):  # the rest is the spec (file or YAML/JSON text)
        spec = stripped[7:].strip()
        if len(spec) >= 2 and spec[0] == spec[-1] and spec[0] in "'\"":
            spec = spec[1:-1]
        try:
            return _mechanism_from_args(argparse.Namespace(spec=spec, kind=None))
        except ValueError as exc:
            raise ValueError(f"{what}: {exc}") from None
    try:
        argv = shlex.split(text)
    except ValueError as exc:
        raise ValueError(f"{what}: cannot split {bounded_repr(text)}: {exc}") from None
    parser = _Parser(prog=what, add_help=False)
    parser.add_argument("--spec", default=None)
    _add_kind_parsers(parser, help="mechanism kind", add_options=lambda kp: None, limits_in_help=False)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            ns = parser.parse_args(argv)
    except SystemExit:
        message = err.getvalue().strip().splitlines()[0] if err.getvalue().strip() else "not a mechanism"
        message = message.split(": error: ", 1)[-1].split(" (see '", 1)[0]
        if len(message) > 400:  # argparse echoes an invalid choice whole
            message = message[:300] + f"... ({len(message):,} characters)"
        message += " (see 'gdp analyze KIND --help')"
        raise ValueError(f"{what} {bounded_repr(text)}: {message}") from None
    try:
        return _mechanism_from_args(ns)
    except ValueError as exc:
        raise ValueError(f"{what}: {exc}") from None


def _compare_args(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Compare two mechanisms beyond one calibration point (seed 002): Delta-divergence both ways, the symmetric "
        "Delta, the Blackwell verdict, the priors where the order flips and the approximate-dominance D. Each mechanism is one quoted argument written as for 'gdp analyze', e.g. "
        "gdp compare 'gaussian --noise-multiplier 1' 'laplace --scale 1' (or '--spec FILE')."
    )
    p.add_argument("a", metavar="A", help="first mechanism, e.g. 'gaussian --noise-multiplier 1'")
    p.add_argument("b", metavar="B", help="second mechanism, e.g. 'laplace --scale 1'")
    p.add_argument(
        "--weight",
        choices=("beta", "uquadratic"),
        default=None,
        help="weighted Delta over adversary priors (seed 002 Sec. 5: Jeffreys Beta(1/2, 1/2) or U-quadratic)",
    )
    _json_option(p)


def compare_point(args: argparse.Namespace) -> dict[str, Any]:
    """Delta(A || B), Delta(B || A), the symmetric Delta and the Blackwell verdicts (seed 002 Def. 1, Thm 1-2,
    Eq. 5), from :func:`gdpcore.divergence.get_delta_divergence` on the two reports :func:`gdpcore.analyze` gives."""
    import gdpcore
    from gdpcore.divergence import blackwell_verdict, get_crossing_priors, get_delta_divergence

    a = mechanism_from_text(args.a, "A")
    b = mechanism_from_text(args.b, "B")
    if a.neighbouring_relation != b.neighbouring_relation:
        raise ValueError(
            f"A and B must use the same neighbouring relation, got {a.neighbouring_relation!r} and "
            f"{b.neighbouring_relation!r}"
        )
    ra, rb = gdpcore.analyze(a), gdpcore.analyze(b)
    ab, ba = get_delta_divergence(ra, rb), get_delta_divergence(rb, ra)
    # The verdict is read off the unweighted Delta (Thm 1); a weight only re-scores the priors.
    a_dominates, b_dominates = blackwell_verdict(ba), blackwell_verdict(ab)
    if a_dominates and b_dominates:
        verdict = "A and B are equally private (Delta = 0 both ways)"
    elif a_dominates:
        verdict = "A is at least as private as B against every attack (Blackwell: Delta(B || A) = 0)"
    elif b_dominates:
        verdict = "B is at least as private as A against every attack (Blackwell: Delta(A || B) = 0)"
    elif a_dominates is False and b_dominates is False:
        verdict = "neither dominates: the trade-off curves cross (each is more private for some attack)"
    else:
        verdict = "undecided within the accountant's resolution"
    out = {
        "a": a.to_dict(),
        "b": b.to_dict(),
        **_divergences(ab, ba),
        "a_at_least_as_private_as_b": a_dominates,
        "b_at_least_as_private_as_a": b_dominates,
        "verdict": verdict,
        # seed 002 Sec. 3 / Fig. 3: the priors at which the Delta order flips (none when Blackwell-ordered)
        "crossing_priors": list(get_crossing_priors(ra, rb)),
        # seed 002 Def. 2 / Thm 2: A D-approximately dominates B for every D >= Delta(A || B) (the bracket's upper end,
        # labelled as the divergence is)
        "approximate_dominance": {
            "a_over_b_min_D": {"value": ab.upper, "bound": ab.bound},
            "b_over_a_min_D": {"value": ba.upper, "bound": ba.bound},
        },
        "weighted": None,
        "accountants": {"a": ra.accountant, "b": rb.accountant},
    }
    if args.weight is not None:
        out["weighted"] = {
            "weight": args.weight,
            **_divergences(
                get_delta_divergence(ra, rb, weight=args.weight), get_delta_divergence(rb, ra, weight=args.weight)
            ),
        }
    return out


def _divergences(ab: Any, ba: Any) -> dict[str, Any]:
    def div(d: Any) -> dict[str, Any]:
        return {
            "value": d.value,
            "lower": d.lower,
            "upper": d.upper,
            "bound": d.bound,
            "most_exposed_prior": d.argmax_prior,
        }

    return {
        "delta_a_b": div(ab),
        "delta_b_a": div(ba),
        "symmetric": {"value": max(ab.value, ba.value), "bound": ab.bound if ab.value >= ba.value else ba.bound},
    }


def _compare(args: argparse.Namespace) -> int:
    out = compare_point(args)

    def line(name: str, d: dict[str, Any], meaning: str) -> str:
        prior = "" if math.isnan(d["most_exposed_prior"]) else f"; most exposed prior {d['most_exposed_prior']:.4g}"
        return f"  {name}  {_g(d['value'])}   ({d['bound']}; bracket [{_g(d['lower'])}, {_g(d['upper'])}]{prior})" + (
            f"\n                  {meaning}" if meaning else ""
        )

    lines = [
        f"A  {describe_mechanism(out['a'])}",
        f"B  {describe_mechanism(out['b'])}",
        line("Delta(A || B)", out["delta_a_b"], "how much more an attacker can gain against B than against A"),
        line("Delta(B || A)", out["delta_b_a"], "how much more an attacker can gain against A than against B"),
        f"  symmetric Delta  {_g(out['symmetric']['value'])}   ({out['symmetric']['bound']}; seed 002 Eq. 5)",
        f"  Blackwell        {out['verdict']}",
        "  crossing priors  "
        + (", ".join(f"{p:.5g}" for p in out["crossing_priors"]) or "none (the Delta order is the same at every prior)")
        + "   (seed 002 Fig. 3: where the order flips)",
        "  approx. dominance  "
        + ", ".join(
            f"{x} >=_D {y} for D >= {_g(d['value'])} ({d['bound']})"
            for x, y, d in (
                ("A", "B", out["approximate_dominance"]["a_over_b_min_D"]),
                ("B", "A", out["approximate_dominance"]["b_over_a_min_D"]),
            )
        )
        + "   (seed 002 Def. 2)",
    ]
    w = out["weighted"]
    if w is not None:
        lines += [
            f"  {w['weight']}-weighted (seed 002 Sec. 5):",
            line("Delta(A || B)", w["delta_a_b"], ""),
            line("Delta(B || A)", w["delta_b_a"], ""),
            f"  symmetric Delta  {_g(w['symmetric']['value'])}   ({w['symmetric']['bound']})",
        ]
    return _emit(args, out, lines)


# -- gdp convert -------------------------------------------------------------------------------------------------------
TABLE3_EPSILONS = (0.1, 0.5, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0)
TABLE3_DELTAS = (1e-5, 1e-6, 1e-9)
"""The rows and columns of seed 000 Table 3 (mu for common (eps, delta)): ``gdp convert`` with no values prints it."""


def _convert_args(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Convert between mu-GDP and (eps, delta) for the Gaussian profile (seed 000 Table 3, Dong et al. Cor. 2.13): "
        "give values for two of --mu, --epsilon, --delta (lists: every combination is converted) and get the third; "
        "--mu or --epsilon alone uses Table 3's deltas; no values prints Table 3."
    )
    p.add_argument("--mu", nargs="+", type=_number("--mu", low=0, low_open=True), metavar="MU", help="mu-GDP values")
    p.add_argument("--epsilon", nargs="+", type=_number("--epsilon", low=0), metavar="EPS", help="epsilon values")
    p.add_argument("--delta", nargs="+", type=_probability("--delta"), metavar="DELTA", help="delta values in (0, 1)")
    _json_option(p)


def convert_point(args: argparse.Namespace) -> dict[str, Any]:
    """Rows of (mu, eps, delta), the missing one computed exactly (closed form; eps and mu by root finding)."""
    from gdpcore import closed_form

    mus, epss, deltas = args.mu, args.epsilon, args.delta
    if mus and epss and deltas:
        raise ValueError("give two of --mu, --epsilon, --delta (the third is computed), got all three")
    if not mus and not epss:
        epss = list(TABLE3_EPSILONS)
    if not (mus and epss) and not deltas:
        deltas = list(TABLE3_DELTAS)
    rows = []
    if mus and epss:
        solve = "delta"
        for mu in mus:
            for e in epss:
                rows.append({"mu": mu, "epsilon": e, "delta": float(closed_form.get_delta_from_gdp(mu=mu, epsilon=e))})
    elif mus:
        solve = "epsilon"
        for mu in mus:
            for d in deltas:
                rows.append({"mu": mu, "epsilon": float(closed_form.get_epsilon_from_gdp(mu=mu, delta=d)), "delta": d})
    else:
        solve = "mu"
        for e in epss:
            for d in deltas:
                rows.append(
                    {"mu": float(closed_form.get_mu_from_epsilon_delta(epsilon=e, delta=d)), "epsilon": e, "delta": d}
                )
    return {
        "computed": solve,
        "bound": "exact",
        "source": "Gaussian privacy profile delta_mu(eps) (Dong et al. Cor. 2.13; seed 000 Eq. 5, Table 3)",
        "rows": rows,
    }


def _convert(args: argparse.Namespace) -> int:
    out = convert_point(args)
    lines = [
        f"mu-GDP <-> (eps, delta), {out['computed']} computed (exact; {out['source']})",
        "  mu          eps         delta",
    ]
    for r in out["rows"]:
        lines.append(f"  {_g(r['mu'], 6):<11} {_g(r['epsilon'], 6):<11} {_g(r['delta'], 6)}")
    return _emit(args, out, lines)


# -- gdp bayes-security ------------------------------------------------------------------------------------------------
def _bayes_args(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Bayes security beta* = 1 - advantage of DP-SGD in closed form (seed 004 Cor. 7), with its validity "
        "warnings and the accountant's value next to it: give --sampling-rate, --noise-multiplier and --steps; or "
        "--target BETA and two of them to plan the third (Eq. 4); or --epsilon and --delta for the (eps, delta) "
        "lower bound (Eq. 5)."
    )
    p.add_argument(
        "--sampling-rate",
        type=_number("--sampling-rate", low=0, low_open=True, high=1),
        metavar="Q",
        help="Poisson sampling rate p in (0, 1]",
    )
    p.add_argument(
        "--noise-multiplier", type=_number("--noise-multiplier", low=0, low_open=True), metavar="SIGMA", help="sigma"
    )
    p.add_argument(
        "--steps",
        type=_number("--steps", low=0, low_open=True),
        metavar="T",
        help="number of steps (the paper's T = epochs / p; may be fractional for the closed form)",
    )
    p.add_argument("--target", type=_probability("--target"), metavar="BETA", help="plan: the Bayes security to reach")
    p.add_argument("--epsilon", type=_number("--epsilon", low=0), help="(eps, delta) -> beta* lower bound (Eq. 5)")
    p.add_argument("--delta", type=_number("--delta", low=0, high=1), help="with --epsilon")
    p.add_argument(
        "--relation",
        choices=("replace_one", "add_remove"),
        default="replace_one",
        help="neighbouring relation (default replace_one, the paper's substitution; add_remove halves the erf argument)",
    )
    p.add_argument("--no-accountant", action="store_true", help="skip the accountant's value (closed form only)")
    _json_option(p)


def bayes_security_point(args: argparse.Namespace) -> dict[str, Any]:
    """The seed 004 closed forms (:mod:`gdpcore.bayes_security`) for one DP-SGD configuration, one plan or one
    (eps, delta) pair, as a JSON-ready dict."""
    from gdpcore import bayes_security as bs

    q, sigma, t = args.sampling_rate, args.noise_multiplier, args.steps
    if args.epsilon is not None or args.delta is not None:
        if args.epsilon is None or args.delta is None:
            raise ValueError("--epsilon and --delta go together")
        if any(v is not None for v in (q, sigma, t, args.target)):
            raise ValueError("--epsilon/--delta take no mechanism options")
        r = bs.get_bayes_security_from_epsilon_delta(epsilon=args.epsilon, delta=args.delta)
        return {
            "mode": "epsilon_delta",
            "epsilon": args.epsilon,
            "delta": args.delta,
            "bayes_security": {"value": r.value, "bound": r.bound, "source": r.source},
        }
    given = {"sampling_rate": q, "noise_multiplier": sigma, "steps": t}
    missing = [k for k, v in given.items() if v is None]
    if args.target is not None:
        if len(missing) != 1:
            raise ValueError("--target plans one of --sampling-rate, --noise-multiplier, --steps: give the other two")
        solve = missing[0]
        kw = {k: v for k, v in given.items() if v is not None}
        plan: dict[str, Callable[..., float]] = {
            "sampling_rate": bs.get_sampling_rate_for_bayes_security,
            "noise_multiplier": bs.get_noise_multiplier_for_bayes_security,
            "steps": bs.get_max_steps_for_bayes_security,
        }
        value = plan[solve](target=args.target, relation=args.relation, **kw)
        given[solve] = value
        est = bs.get_bayes_security_from_dpsgd(relation=args.relation, **given)
        return {
            "mode": "plan",
            "target": args.target,
            "solved_for": solve,
            "value": value,
            "value_bound": "estimate",
            "source": "seed 004 Eq. 4 (inverse of Cor. 7)",
            "relation": args.relation,
            "warnings": list(est.warnings),
        }
    if missing:
        raise ValueError("give --sampling-rate, --noise-multiplier and --steps (or --target and two of them)")
    est = bs.get_bayes_security_from_dpsgd(sampling_rate=q, noise_multiplier=sigma, steps=t, relation=args.relation)
    out: dict[str, Any] = {
        "mode": "dpsgd",
        **given,
        "relation": args.relation,
        "closed_form": {"value": est.value, "bound": est.bound, "error_term": est.error_term, "source": est.source},
        "warnings": list(est.warnings),
        "accountant": None,
    }
    if not args.no_accountant:
        out["accountant"] = _accountant_value(q, sigma, t, args.relation)
    return out


def _accountant_value(q: float, sigma: float, t: float, relation: str) -> dict[str, Any]:
    """beta* of the same run from the PLD accountant, next to Cor. 7: :func:`gdpcore.bayes_security.
    check_bayes_security_from_dpsgd` (both relations; replace-one is seed 004's substitution pair)."""
    from gdpcore import bayes_security as bs

    if t != int(t):
        return {"value": None, "reason": f"steps {t:g} is not a whole number: no accountant value"}
    check = bs.check_bayes_security_from_dpsgd(sampling_rate=q, noise_multiplier=sigma, steps=int(t), relation=relation)
    return {
        "value": check.exact_lower,
        "bound": "lower",
        "upper": check.exact_upper if math.isfinite(check.exact_upper) else None,
        "source": check.source,
        "status": check.status,
    }


def _bayes_security(args: argparse.Namespace) -> int:
    out = bayes_security_point(args)
    if out["mode"] == "epsilon_delta":
        b = out["bayes_security"]
        lines = [
            f"({out['epsilon']:g}, {out['delta']:g})-DP: Bayes security >= {_g(b['value'])}   ({_bound(b['bound'])}; {b['source']})"
        ]
    elif out["mode"] == "plan":
        lines = [
            f"plan for Bayes security {out['target']:g} ({out['relation']}): {out['solved_for']} = {_g(out['value'])}   "
            f"(estimate; {out['source']})"
        ]
    else:
        c = out["closed_form"]
        lines = [
            f"DP-SGD q={out['sampling_rate']:g}, sigma={out['noise_multiplier']:g}, T={out['steps']:g} ({out['relation']})",
            f"  closed form     {_g(c['value'])}   (estimate; {c['source']}; rigorous error term {_g(c['error_term'], 3)})",
        ]
        acc = out["accountant"]
        if acc is not None:
            lines.append(
                f"  accountant      {_g(acc['value'])}   ({_bound(acc['bound'])}; 1 - advantage, {acc['source'].split(' (')[0]})"
                if acc["value"] is not None
                else f"  accountant      n/a   ({acc['reason']})"
            )
    lines += [f"  WARNING         {w}" for w in out.get("warnings", [])]
    return _emit(args, out, lines)


POINT_COMMANDS: dict[str, Command] = {
    "calibrate": Command(
        "calibrate sigma, q or T of DP-SGD to one attack-risk target (seed 001)", _calibrate_args, _calibrate
    ),
    "compare": Command(
        "Delta-divergence and Blackwell verdict between two mechanisms (seed 002)", _compare_args, _compare
    ),
    "convert": Command(
        "mu-GDP <-> (eps, delta) for any lists (seed 000 Table 3 and its inverse)", _convert_args, _convert
    ),
    "bayes-security": Command(
        "closed-form Bayes security of DP-SGD with its validity warnings (seed 004)", _bayes_args, _bayes_security
    ),
}
