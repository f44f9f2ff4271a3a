"""Wait, from a test's thread, for a runtime's long connection to reach a state."""

from __future__ import annotations

import threading
from collections.abc import Callable

from genworker.channels.longconn import LongConnections
from genworker.channels.longconn.state import ConnectionState

__all__ = ["Watch"]


class Watch:
    """A `LongConnections` listener; `until` blocks until a binding's state satisfies a predicate."""

    def __init__(self, connections: LongConnections) -> None:
        self.connections = connections
        self._changed = threading.Condition()
        connections.listeners.append(self)

    def __call__(self, state: ConnectionState) -> None:
        with self._changed:
            self._changed.notify_all()

    def until(self, adapter_id: str, ok: Callable[[ConnectionState], bool], timeout: float = 30) -> ConnectionState:
        def reached() -> bool:
            state = self.connections.states.get(adapter_id)
            return state is not None and ok(state)

        with self._changed:
            assert self._changed.wait_for(reached, timeout), self.connections.describe()
        return self.connections.states[adapter_id]

    def status(self, adapter_id: str, status: str, timeout: float = 30) -> ConnectionState:
        return self.until(adapter_id, lambda s: s.status == status, timeout)
