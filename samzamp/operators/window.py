"""The window operator (Samza's WindowOperatorImpl, in processing time): tumbling and session windows
whose state lives only in the operator's store, and whose triggers are rebuilt from it.

- **State.** The store named by the op id (JSON keys and values) holds one entry per open window:
  ``[key, start]`` -> ``{"v": value, "start": ms}`` for a tumbling window, ``[key]`` ->
  ``{"v": value, "start": ms, "last": ms}`` for a key's session. Each message reads, folds and writes
  its window's entry, so a checkpoint covers exactly the messages folded before it and a restart
  never folds one twice (the transactional commit reverts the rest).
- **Triggers** are an in-memory heap of ``(fire ms, sequence, key, start)``, rebuilt from the store at
  ``init``: a window whose end passed while the job was down fires at the first timer. A session's
  entry is not moved when a message extends it (that would cost a push per message): when it comes
  due the store says whether the session really closed, and if not it is pushed again at
  ``last + gap``. An entry whose window is gone or was replaced (another start) is skipped.
- **Firing.** ``on_timer(now)`` emits the pane of each window due by ``now`` (tumbling:
  ``now >= start + interval``; session: ``now >= last + gap``), in fire-time order, and deletes its
  entry; ``on_end_of_stream`` and ``on_drain`` emit every open window's pane once and delete them
  all (a tombstone each in the changelog; R-A9).
- **Write-behind.** The windows a message touched since the last commit are kept in memory (by
  ``(key, start)``) and written to the store at the task's commit (``flush``, before its
  changelog is flushed and its checkpoint written), when they fire, and when more than
  ``DIRTY_LIMIT`` are waiting: a window's hundreds of messages between two commits cost one store
  write, not one read and one write each (Samza's object cache does the same for its stores). What
  a crash loses of them was not committed, so the replay from the checkpoint folds it again. A key
  that cannot be a dict key (a list) goes to the store on each message.
- **Late messages.** A tumbling message always lands in the window ``now`` is in. A message for a
  session whose gap already passed (the timer has not run yet) closes it: its pane is emitted then
  and the message starts a new session, so a session never spans a silence longer than its gap.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from typing import Any

from samzamp.api.operators import OperatorSpec
from samzamp.api.windows import WindowKey, WindowPane, WindowSpec
from samzamp.operators.impl import NOTHING, GraphContext, OperatorImpl

__all__ = ["WindowOperator"]

# A trigger: when it fires, a tie-breaker (heap order never compares keys), the window's key and start.
_Trigger = tuple[int, int, Any, int]
DIRTY_LIMIT = 10_000  # windows waiting in memory for the store, at most


class WindowOperator(OperatorImpl):
    """``MessageStream.window``: folds each message into its key's window and emits a
    ``WindowPane(WindowKey(key, str(start)), value, "default")`` per window once it closed, or at
    end of stream. Keys and values must be what JSON can hold; keys come back from the store as
    JSON decodes them (a tuple as a list) for windows rebuilt after a restart."""

    def __init__(self, spec: OperatorSpec) -> None:
        super().__init__(spec)
        window = spec.window
        assert isinstance(window, WindowSpec)
        self.window = window
        self.session = window.kind == "session"
        self.duration_ms = window.duration_ms
        self.key_fn: Callable[[Any], Any] | None = window.key_fn
        self.initial = window.initial
        self.fold = window.fold
        self._heap: list[_Trigger] = []
        self._seq = 0
        # Windows written since the last flush: (key, start) -> (store key, state).
        self._dirty: dict[tuple[Any, int], tuple[list[Any], Any]] = {}

    # -- set-up ---------------------------------------------------------------------------------
    def init(self, context: GraphContext) -> None:
        self.context = context
        self.store = context.store(self.op_id)
        triggers: list[_Trigger] = []
        with self.store.all() as entries:
            for store_key, state in entries:
                key, start = self._identity(store_key, state)
                fire = (state["last"] if self.session else start) + self.duration_ms
                triggers.append((fire, len(triggers), key, start))
        heapq.heapify(triggers)
        self._heap = triggers
        self._seq = len(triggers)

    def _identity(self, store_key: Any, state: Any) -> tuple[Any, int]:
        """The (key, start) of a stored window; a store written by another kind of window is refused."""
        shape_ok = isinstance(store_key, list) and isinstance(state, dict) and "v" in state and "start" in state
        if self.session:
            shape_ok = shape_ok and len(store_key) == 1 and "last" in state
        else:
            shape_ok = shape_ok and len(store_key) == 2 and store_key[1] == state["start"]
        if not shape_ok:
            raise ValueError(
                f"window {self.op_id!r}: store entry {store_key!r} is not a {self.window.kind} window's "
                "(did the window's kind change? its store must then be emptied)"
            )
        return store_key[0], int(state["start"])

    def _schedule(self, fire: int, key: Any, start: int) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (fire, self._seq, key, start))

    # -- messages -------------------------------------------------------------------------------
    def process(self, message: Any) -> Iterable[Any]:
        now = self.context.now_ms()
        key = None if self.key_fn is None else self.key_fn(message)
        if self.session:
            store_key: list[Any] = [key]
            state = self._state(key, 0, store_key)
            closed = NOTHING
            if state is not None and now >= state["last"] + self.duration_ms:
                closed = (self._pane(key, state),)  # its gap passed before the timer saw it
                state = None
            if state is None:
                state = {"v": self.initial(), "start": now, "last": now}
                self._schedule(now + self.duration_ms, key, now)
            state["v"] = self.fold(message, state["v"])
            state["last"] = max(state["last"], now)  # a clock that steps back never shortens a session
            self._write(key, 0, store_key, state)
            return closed
        start = now - now % self.duration_ms
        store_key = [key, start]
        state = self._state(key, start, store_key)
        if state is None:
            state = {"v": self.initial(), "start": start}
            self._schedule(start + self.duration_ms, key, start)
        state["v"] = self.fold(message, state["v"])
        self._write(key, start, store_key, state)
        return NOTHING

    # -- the store, behind the dirty windows ------------------------------------------------------
    def _state(self, key: Any, start: int, store_key: list[Any]) -> Any:
        """The window's state: the one waiting in memory, else the store's (None: no such window).
        ``start`` is 0 for a session (one per key)."""
        try:
            held = self._dirty.get((key, start))
        except TypeError:  # an unhashable key: never held in memory
            return self.store.get(store_key)
        return held[1] if held is not None else self.store.get(store_key)

    def _write(self, key: Any, start: int, store_key: list[Any], state: Any) -> None:
        try:
            self._dirty[(key, start)] = (store_key, state)
        except TypeError:
            self.store.put(store_key, state)
            return
        if len(self._dirty) > DIRTY_LIMIT:
            self.flush()

    def _forget(self, key: Any, start: int, store_key: list[Any]) -> None:
        """The window fired: gone from memory and from the store."""
        try:
            self._dirty.pop((key, start), None)
        except TypeError:
            pass
        self.store.delete(store_key)

    def flush(self) -> None:
        """Write the windows waiting in memory to the store (the task's commit calls it first)."""
        if self._dirty:
            self.store.put_all(list(self._dirty.values()))
            self._dirty.clear()

    def _pane(self, key: Any, state: Any) -> WindowPane[Any, Any]:
        return WindowPane(WindowKey(key, str(state["start"])), state["v"], "default")

    # -- firing ---------------------------------------------------------------------------------
    def on_timer(self, now_ms: int) -> Iterable[Any]:
        """The pane of each window that closed by ``now_ms``, in fire-time order (deleted from the store)."""
        heap = self._heap
        if not heap or heap[0][0] > now_ms:
            return NOTHING
        out: list[WindowPane[Any, Any]] = []
        while heap and heap[0][0] <= now_ms:
            _fire, _seq, key, start = heapq.heappop(heap)
            store_key = [key] if self.session else [key, start]
            held = 0 if self.session else start
            state = self._state(key, held, store_key)
            if state is None or state["start"] != start:
                continue  # fired already, or replaced by a newer session of the key
            if self.session:
                due = state["last"] + self.duration_ms
                if due > now_ms:  # extended since this trigger was set
                    self._schedule(due, key, start)
                    continue
            out.append(self._pane(key, state))
            self._forget(key, held, store_key)
        return out

    def on_drain(self) -> Iterable[Any]:
        """As at end of stream (seed 003: windows emit early on a drain, and their state goes)."""
        return self.on_end_of_stream()

    def on_end_of_stream(self) -> Iterable[Any]:
        """Every open window's pane once, in fire-time order; the store is emptied."""
        self.flush()
        store = self.store
        windows: list[tuple[int, int, Any, Any]] = []
        with store.all() as entries:
            for store_key, state in entries:
                key, start = self._identity(store_key, state)
                fire = (state["last"] if self.session else start) + self.duration_ms
                windows.append((fire, len(windows), store_key, self._pane(key, state)))
        windows.sort(key=lambda w: (w[0], w[1]))
        for _fire, _i, store_key, _pane in windows:
            store.delete(store_key)
        self._heap = []
        return [pane for _fire, _i, _key, pane in windows]
