"""Windows (placeholder: being written)."""

from __future__ import annotations

from samzamp.operators.impl import OperatorImpl

__all__ = ["WindowOperator"]


class WindowOperator(OperatorImpl):
    pass
