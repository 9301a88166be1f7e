"""Old import path of :mod:`gdpcore.pld` (the name was about speed, not content): every name, including the
private helpers tests reach (tests/test_roundoff.py), is the package's own object."""

from gdpcore.pld import *  # noqa: F403
from gdpcore.pld import __all__  # noqa: F401
from gdpcore.pld.buckets import _mean_residual  # noqa: F401
from gdpcore.pld.powers import (  # noqa: F401
    _fft_error,
    _fft_plan,
    _linear_convolution,
    _power,
    _power_roundoff,
)
from gdpcore.pld.subsampled_gaussian import _residual_lower_bounds  # noqa: F401
