"""Packed runs (samzamp.consume.packed): a lane's messages encoded once on the fetch thread for a task in
a worker; what the worker decodes from a Process frame is the same whether a run was packed or not."""

from __future__ import annotations

import msgspec

from samzamp.consume.packed import PackedRun, messages_held, messages_in, pack, unpack
from samzamp.dispatch.process import frames as f
from samzamp.systems.base import DRAIN, END_OF_STREAM, WATERMARK_MAX, RawMessage


def messages(first: int, n: int) -> list[RawMessage]:
    return [(o, None if o % 3 == 0 else f"k{o}".encode(), f"v{o}".encode(), 1000 + o) for o in range(first, first + n)]


def test_runs_hold_at_most_size_messages_in_order_and_give_them_back_unchanged() -> None:
    msgs = messages(10, 10)
    runs = pack(msgs, 4)
    assert all(isinstance(r, PackedRun) for r in runs)
    assert [messages_in(r) for r in runs] == [4, 4, 2]
    assert [r[0] for r in runs] == [10, 14, 18]  # item 0: the first offset, as a message's
    assert [m for r in runs for m in unpack(r)] == msgs  # type: ignore[arg-type]
    assert [list(r.offsets) for r in runs] == [[10, 11, 12, 13], [14, 15, 16, 17], [18, 19]]  # type: ignore[union-attr]


def test_a_control_marker_stays_itself_between_the_runs() -> None:
    eos: RawMessage = (END_OF_STREAM, None, None, 0)
    marks: list[RawMessage] = [(WATERMARK_MAX, None, None, 0), (DRAIN, None, None, 0)]
    runs = pack([*messages(0, 3), eos, *messages(3, 5), *marks], 4)
    assert [r if r[0] < 0 else [m[0] for m in unpack(r)] for r in runs] == [  # type: ignore[arg-type]
        [0, 1, 2],
        eos,
        [3, 4, 5, 6],
        [7],
        *marks,
    ]
    assert messages_in(eos) == 1
    assert messages_held(runs) == 8 + 3  # the messages, and each marker as one
    assert messages_held(runs[2:4]) == 5  # runs only: the fast count
    assert messages_held([]) == 0


def test_a_worker_decodes_a_packed_run_as_the_messages_it_was_packed_from() -> None:
    msgs = messages(0, 7)
    (run,) = pack(msgs, 64)
    assert isinstance(run, PackedRun)
    frame = f.encode(f.ProcessOut(3, 1, [(0, msgs[:2]), (1, msgspec.Raw(run.encoded))]))
    decoded = f.decode_from_loop(frame)
    assert decoded == f.Process(3, 1, [(0, msgs[:2]), (1, msgs)])
