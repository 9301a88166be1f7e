"""The pipeline sub-commands of ``gdp`` (sweep, regret-map, calibration-sweep, publish, sql, export, plot, demo,
audit, card, evidence; and the one-point questions calibrate, compare, convert, bayes-security), in the order ``gdp --help`` lists them; :func:`flows.cli.main` builds its parser from :data:`COMMANDS`.

The commands live by family (:mod:`flows.commands_runs`, :mod:`flows.commands_report`,
:mod:`flows.commands_registry`, :mod:`flows.commands_point`); each command's ``run`` imports Prefect/DuckDB lazily so that ``gdp analyze`` and
``gdp --help`` stay fast.
"""

from __future__ import annotations

from flows.command_common import Command
from flows.commands_point import POINT_COMMANDS
from flows.commands_registry import REGISTRY_COMMANDS
from flows.commands_report import REPORT_COMMANDS
from flows.commands_runs import RUN_COMMANDS
from flows.evidence_command import EVIDENCE_COMMANDS

__all__ = ["COMMANDS", "Command"]

_ALL = {**RUN_COMMANDS, **REPORT_COMMANDS, **REGISTRY_COMMANDS, **EVIDENCE_COMMANDS, **POINT_COMMANDS}
_ORDER = (
    "sweep",
    "regret-map",
    "calibration-sweep",
    "publish",
    "sql",
    "export",
    "plot",
    "demo",
    "audit",
    "card",
    "evidence",
    "calibrate",
    "compare",
    "convert",
    "bayes-security",
)
COMMANDS: dict[str, Command] = {name: _ALL[name] for name in _ORDER}
