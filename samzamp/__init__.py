"""samzamp: Apache Samza's container model in Python.

The public API is re-exported here from ``samzamp.api``; everything else is internal.
"""

from samzamp._version import __version__
from samzamp.api import *  # noqa: F403
from samzamp.api import __all__ as _api_all

__all__ = [*_api_all, "__version__"]
