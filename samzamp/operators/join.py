"""Joins (placeholder: being written).

``StreamStreamJoinOperator`` is the join of two streams; the graph gives the messages of its
first input to ``left`` and of its second to ``right`` (Samza's PartialJoinOperatorImpl), whose
results go to the join's downstream operators. ``StreamTableJoinOperator`` joins one stream with
a table.
"""

from __future__ import annotations

from samzamp.api.operators import OperatorSpec
from samzamp.operators.impl import OperatorImpl

__all__ = ["StreamStreamJoinOperator", "StreamTableJoinOperator"]


class StreamStreamJoinOperator(OperatorImpl):
    def __init__(self, spec: OperatorSpec) -> None:
        super().__init__(spec)
        self.left = OperatorImpl(spec)
        self.right = OperatorImpl(spec)


class StreamTableJoinOperator(OperatorImpl):
    pass
