"""How a ``gdp`` command names one mechanism: a KIND with its ``--param`` options (generated from gdpcore's kind
registry), ``--spec`` text or file, or a training-run file (``--dp-event``, ``--opacus``, ``--tf-privacy``); shared by
``gdp analyze`` (:mod:`flows.cli`) and ``gdp evidence`` (:mod:`flows.evidence_command`), and argparse's one-line
errors (:class:`_Parser`)."""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

__all__ = [
    "_Parser",
    "_add_kind_parsers",
    "_error_line",
    "_mechanism_from_args",
    "_mechanism_kinds",
    "_probability",
    "_reading",
    "_shown",
    "_shown_number",
    "_training_run_from_args",
]


def _shown(value: Any) -> str:
    """A value the user typed, in an error message: bounded (a 30 MB argument is not echoed whole)."""
    from tasks.safe_yaml import shown

    return shown(value)


def _shown_number(text: str) -> str:
    """A number the user typed (it parsed), as typed when short, else bounded."""
    return text if len(text) <= 40 and text.isprintable() else _shown(text)


@contextlib.contextmanager
def _reading(option: str) -> Iterator[None]:
    """Errors reading the file named by ``option`` name the option too: a ``ValueError`` (the reader names the file
    and the field) gets it as a prefix, an ``OSError`` (a name too long, a folder) becomes one."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None:
            raise
        raise ValueError(f"{option}: {exc.strerror or type(exc).__name__}: {_shown(str(exc.filename))}") from None
    except ValueError as exc:
        if str(exc).startswith(option):
            raise
        raise ValueError(f"{option}: {exc}") from None


def _error_line(exc: BaseException) -> str:
    """The one line ``gdp`` prints for a user error: an ``OSError`` as its reason and (bounded) path, anything else
    as its message, cut to :data:`tasks.safe_yaml.MAX_MESSAGE_CHARS` (the head names the file and the field)."""
    from tasks.safe_yaml import bounded_message

    if isinstance(exc, OSError) and exc.filename is not None:
        return bounded_message(f"{exc.strerror or type(exc).__name__}: {_shown(str(exc.filename))}")
    return bounded_message(str(exc))


class _Parser(argparse.ArgumentParser):
    """argparse, but errors are one line (``gdp CMD: error: ...`` + where to look) and exit 2, like ValueErrors."""

    def error(self, message: str) -> NoReturn:
        from tasks.safe_yaml import bounded_message

        # argparse quotes what was typed whole (invalid choice: '<30 MB>'); the head names the argument
        message = bounded_message(message.replace("argument kind: invalid choice", "invalid mechanism kind"))
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def _mechanism_kinds() -> dict[str, tuple[str, tuple[Any, ...]]]:
    """{kind: (summary, declared parameters)} of the flat kinds in gdpcore's kind registry (composed ones come with
    --spec): options, types, defaults and help all come from the parameter declarations (gdpcore.kinds)."""
    from gdpcore import kinds

    return {name: (kinds.get(name).summary, kinds.get(name).params) for name in kinds.flat_kinds()}


def _add_kind_parsers(
    parser: argparse.ArgumentParser,
    *,
    help: str,
    add_options: Callable[[argparse.ArgumentParser], None],
    limits_in_help: bool,
) -> None:
    """One KIND sub-parser of ``parser`` per flat kind (:func:`_mechanism_kinds`), with a ``--param`` option
    (dest ``param_<name>``) per declared parameter; ``add_options`` adds the command's own options to each (they
    must not override the values given before KIND). ``limits_in_help`` adds each parameter's constraint and
    default to its help. ``kind`` defaults to None (no KIND: ``--spec`` or a training-run file)."""
    kinds = parser.add_subparsers(dest="kind", metavar="KIND", parser_class=_Parser, help=help)
    for kind, (doc, params) in _mechanism_kinds().items():
        kp = kinds.add_parser(kind, help=doc, description=doc)
        for prm in params:
            kp.add_argument(
                "--" + prm.name.replace("_", "-"),
                dest=f"param_{prm.name}",
                type=prm.type,
                required=prm.required,
                metavar=prm.type.__name__.upper(),
                help=(
                    f"{prm.doc} ({prm.constraint.describe()}"
                    + ("" if prm.required else f"; default {prm.default}")
                    + ")"
                    if limits_in_help
                    else prm.doc
                ),
            )
        add_options(kp)
    parser.set_defaults(kind=None)


def _probability(name: str, *, open_low: bool = False, open_high: bool = False) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            x = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, got {_shown(text)}") from None
        low_ok = x > 0 if open_low else x >= 0
        high_ok = x < 1 if open_high else x <= 1
        if not (low_ok and high_ok):
            lo, hi = "(" if open_low else "[", ")" if open_high else "]"
            raise argparse.ArgumentTypeError(f"must be in {lo}0, 1{hi}, got {_shown_number(text)}")
        return x

    return parse


def _load_spec_text(spec: str) -> Any:
    """--spec: YAML or JSON text (a mapping) or a file holding one, read like every other YAML the project reads
    (:mod:`tasks.safe_yaml`: bounded size, depth and alias expansion, YAML 1.2 scalars)."""
    from tasks.safe_yaml import MAX_BYTES, YamlError, load_yaml_file, load_yaml_text

    try:
        if spec.lstrip().startswith("{"):
            if len(spec) > MAX_BYTES:
                raise YamlError("--spec", f"refused: longer than {MAX_BYTES:,} characters")
            return load_yaml_text(spec, "--spec")
        if not os.path.lexists(spec):
            raise ValueError(f"--spec: no such file {_shown(spec)} (give a file or YAML/JSON text)")
        return load_yaml_file(spec)
    except YamlError as exc:
        raise ValueError(
            f"--spec: {exc}" if exc.source != "--spec" else f"--spec is not valid YAML/JSON: {exc.detail}"
        ) from None


_RUN_SOURCES = ("spec", "dp_event", "opacus", "tf_privacy")


def _training_run_from_args(args: argparse.Namespace) -> Any:
    """--dp-event FILE / --opacus FILE / --tf-privacy ...: the training run (gdpcore.adapters.TrainingRun) or None."""
    from gdpcore import adapters

    given = [s for s in _RUN_SOURCES if getattr(args, s, None) not in (None, False)]
    if len(given) > 1 or (given and args.kind is not None):
        both = [f"--{s.replace('_', '-')}" for s in given] + ([args.kind] if args.kind is not None else [])
        raise ValueError(f"give one mechanism source, got {' and '.join(both)}")
    tf_fields = ("number_of_examples", "batch_size", "epochs", "noise_multiplier", "max_examples_per_user")
    if not args.tf_privacy:
        stray = [f for f in tf_fields if getattr(args, f"tf_{f}") is not None] + (
            ["no_microbatching"] if args.tf_no_microbatching else []
        )
        if stray:
            raise ValueError(f"--{stray[0].replace('_', '-')} is an option of --tf-privacy")
    if args.sampler is not None and not (args.opacus or args.tf_privacy):
        raise ValueError("--sampler applies to --opacus and --tf-privacy runs")
    if args.dp_event is not None:
        from gdpcore.events import from_dp_event
        from tasks.training_runs import load_dp_event_file

        with _reading("--dp-event"):
            event = load_dp_event_file(args.dp_event)
        relation = args.neighbouring or "add_remove"
        return adapters.TrainingRun(
            mechanism=from_dp_event(event, neighboring_relation=relation),
            sampler=None,
            neighbouring=relation,
            steps=None,
            source=f"dp_accounting {type(event).__name__} from {args.dp_event}, read under {relation}",
        )
    if args.neighbouring is not None and not args.tf_privacy:
        raise ValueError("--neighbouring applies to --dp-event and --tf-privacy (with --sampler fixed)")
    if args.opacus is not None:
        from tasks.training_runs import load_opacus_file

        with _reading("--opacus"):
            return load_opacus_file(args.opacus, sampler=args.sampler)
    if args.tf_privacy:
        missing = [f for f in tf_fields[:4] if getattr(args, f"tf_{f}") is None]
        if missing:
            raise ValueError(f"--tf-privacy needs --{missing[0].replace('_', '-')}")
        run = adapters.from_tf_privacy(
            number_of_examples=args.tf_number_of_examples,
            batch_size=args.tf_batch_size,
            num_epochs=args.tf_epochs,
            noise_multiplier=args.tf_noise_multiplier,
            used_microbatching=not args.tf_no_microbatching,
            max_examples_per_user=args.tf_max_examples_per_user,
            sampler=args.sampler or "poisson",
            neighbouring=args.neighbouring or "add_remove",
        )
        return run
    return None


def _mechanism_from_args(args: argparse.Namespace):
    from gdpcore import mechanism_from_dict

    if args.spec is not None:
        if args.kind is not None:
            raise ValueError("give either --spec or a mechanism kind with parameters, not both")
        given = _load_spec_text(args.spec)
        try:
            return mechanism_from_dict(given)
        except ValueError as exc:  # gdpcore names the field inside the mechanism; say where it came from
            raise ValueError(f"--spec: {exc}") from None
    if args.kind is None:
        raise ValueError("a mechanism kind is required, e.g. 'gdp analyze subsampled_gaussian --noise-multiplier 1'")
    params = _mechanism_kinds()[args.kind][1]
    data: dict[str, Any] = {"kind": args.kind}
    for prm in params:
        value = getattr(args, f"param_{prm.name}", None)
        if value is not None:
            data[prm.name] = value
    return mechanism_from_dict(data)
