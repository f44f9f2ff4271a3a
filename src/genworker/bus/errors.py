"""Event-bus errors: misuse, closed buses, failed transports and unreadable wire messages."""

from __future__ import annotations

__all__ = ["BusClosedError", "EventBusError", "EventDecodeError", "EventPublishError"]


class EventBusError(Exception):
    """Base of every event-bus failure."""


class BusClosedError(EventBusError):
    """publish() or subscribe() on a bus that has been closed."""


class EventPublishError(EventBusError):
    """The event reached local subscribers but the transport to other processes failed."""

    def __init__(self, event_id: str, detail: str) -> None:
        self.event_id = event_id
        super().__init__(f"event {event_id} was delivered locally but not published to other processes: {detail}")


class EventDecodeError(EventBusError):
    """A wire message is not a readable event; `source` names where it came from."""

    def __init__(self, source: str, detail: str) -> None:
        self.source = source
        super().__init__(f"{source}: unreadable event: {detail}")
