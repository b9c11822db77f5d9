"""2. Choose: which buffered envelope the loop handles next."""

from samzamp.choose.round_robin import RoundRobinChooser

__all__ = ["RoundRobinChooser"]
