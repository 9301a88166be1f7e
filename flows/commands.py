"""Pipeline sub-commands of ``gdp`` (sweep, publish, sql, audit ...), registered into :data:`flows.cli.SUBCOMMANDS`.

Each command's ``run`` imports Prefect/DuckDB lazily so that ``gdp analyze`` stays fast.
"""
