"""Shared test configuration: single-threaded numerics so CPU-heavy tests don't oversubscribe 2 cores."""

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
