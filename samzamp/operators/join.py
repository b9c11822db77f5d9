"""Joins (placeholder: being written)."""

from __future__ import annotations

from samzamp.operators.impl import OperatorImpl

__all__ = ["StreamStreamJoinOperator", "StreamTableJoinOperator"]


class StreamStreamJoinOperator(OperatorImpl):
    pass


class StreamTableJoinOperator(OperatorImpl):
    pass
