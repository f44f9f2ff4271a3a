"""What one binding's long connection is doing, for the debug view, the dashboard and metrics.

`connecting` (first attempt), `connected`, `reconnecting` (lost or refused; the next attempt is
at `next_attempt_at`), `standby` (another process holds the binding's lease), `failed` (the
binding cannot run: no SDK, no credentials; `error` says which), `stopped`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

__all__ = ["ConnectionState", "Status"]

Status = Literal["connecting", "connected", "reconnecting", "standby", "failed", "stopped"]


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass
class ConnectionState:
    adapter_id: str
    platform: str
    mode: str
    status: Status = "connecting"
    error: str = ""
    connected_at: datetime | None = None
    last_event_at: datetime | None = None
    events: int = 0  # messages stored from this connection (repeats included)
    reconnects: int = 0  # connections made again after one was lost
    failures: int = 0  # attempts in a row that did not connect
    next_attempt_at: datetime | None = None
    holder: str = ""  # on standby: the process holding the lease, when known
    on_change: Callable[[ConnectionState], None] = field(default=lambda _s: None, repr=False)

    def _set(self, status: Status, **changes: Any) -> None:
        self.status = status
        for name, value in changes.items():
            setattr(self, name, value)
        self.on_change(self)

    def connecting(self) -> None:
        if self.status != "reconnecting":  # an attempt after a loss stays `reconnecting` until it is up
            self._set("connecting", error="", holder="")

    def connected(self) -> bool:
        """True when this connection replaces a lost one (a reconnect)."""
        again = self.connected_at is not None
        self.reconnects += again
        self._set("connected", connected_at=_now(), failures=0, error="", next_attempt_at=None, holder="")
        return again

    def lost(self, error: str, retry_in_s: float, was_up: bool) -> None:
        self._set(
            "reconnecting",
            error=error,
            failures=0 if was_up else self.failures + 1,
            next_attempt_at=_now() + timedelta(seconds=retry_in_s),
        )

    def event(self) -> None:
        self.events += 1
        self.last_event_at = _now()  # not a status change: read when asked

    def standby(self, holder: str) -> None:
        if self.status != "standby" or holder != self.holder:
            self._set("standby", holder=holder, error="", next_attempt_at=None)

    def failed(self, error: str) -> None:
        self._set("failed", error=error, next_attempt_at=None)

    def stopped(self) -> None:
        self._set("stopped", next_attempt_at=None)

    def as_dict(self) -> dict[str, Any]:
        def iso(moment: datetime | None) -> str | None:
            return moment.isoformat() if moment is not None else None

        return {
            "adapter_id": self.adapter_id,
            "platform": self.platform,
            "connection_mode": self.mode,
            "status": self.status,
            "error": self.error,
            "connected_at": iso(self.connected_at),
            "last_event_at": iso(self.last_event_at),
            "events": self.events,
            "reconnects": self.reconnects,
            "failures": self.failures,
            "next_attempt_at": iso(self.next_attempt_at),
            "holder": self.holder,
        }
