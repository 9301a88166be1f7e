"""The ``gdp`` command's entry point: a sweep's process pool starts first, then the command line runs.

``gdp sweep`` and ``gdp regret-map`` (process runner) spend their first second importing the CLI (gdpcore, the kind
registry the options are generated from) and planning; the pool's worker needs the same imports before it can
compute. Spawned here, before those imports (:func:`flows.pool_start.pool_request`, standard library only), the
worker imports while the CLI does and gets the first chunk as soon as the CLI has planned it
(benchmarks/RESULTS.md, "CLI fixed costs"). Every other command, and ``python -m flows.cli``, runs as before.
"""

from __future__ import annotations

import sys

__all__ = ["main"]


def main() -> int:
    from flows.pool_start import discard_pool, pool_request, spawn_workers

    request = pool_request(sys.argv[1:])
    if request is not None:
        from flows.command_common import _prefect_env

        workers, verbose, first_chunk = request
        try:
            _prefect_env(verbose)  # Prefect's environment for this command: the workers inherit it
        except ValueError:  # a bad setting: the command reports it, naming the variable
            request = None
        else:
            spawn_workers(workers, first_chunk=first_chunk)
    try:
        from flows.cli import main as cli_main

        return cli_main()
    finally:
        discard_pool()  # a pool no flow took (nothing to compute, a bad spec): stopped before the command exits


if __name__ == "__main__":  # `python -m flows.launch ...`, what the `gdp` script runs
    sys.exit(main())
