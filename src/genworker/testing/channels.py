"""What a channel processor did with each message, for a test thread to wait on."""

from __future__ import annotations

import threading

from genworker.channels.base import ChannelMessage

__all__ = ["Handled"]


class Handled:
    """A processor listener: the outcome of every message once it is handled and out of the journal."""

    def __init__(self) -> None:
        self.outcomes: dict[str, str] = {}
        self.history: list[tuple[str, str]] = []  # every (event id, outcome), in order
        self._changed = threading.Condition()

    def __call__(self, message: ChannelMessage, outcome: str) -> None:
        with self._changed:
            self.outcomes[message.event_id] = outcome
            self.history.append((message.event_id, outcome))
            self._changed.notify_all()

    def wait_count(self, event_id: str, outcome: str, count: int, timeout: float = 30) -> None:
        """Until `event_id` has been handled with `outcome` `count` times (an entry kept for a later
        attempt is handled again each time)."""
        with self._changed:
            done = self._changed.wait_for(lambda: self.history.count((event_id, outcome)) >= count, timeout)
            assert done, self.history

    def wait_for(self, *event_ids: str, timeout: float = 30) -> dict[str, str]:
        """Every outcome so far, once all of `event_ids` have one (a hang fails after `timeout`)."""
        with self._changed:
            done = self._changed.wait_for(lambda: set(event_ids) <= self.outcomes.keys(), timeout)
            assert done, self.outcomes
            return dict(self.outcomes)
