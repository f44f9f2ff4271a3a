"""HeartbeatSettings: how often heartbeats run and how much each may take, from GENWORKER_HEARTBEAT_*.

======================================  ========  ===========================================
key                                     default   meaning
======================================  ========  ===========================================
GENWORKER_HEARTBEAT_ENABLED             true      schedule a heartbeat per loaded worker
GENWORKER_HEARTBEAT_INTERVAL_S          300       seconds between a worker's heartbeats
GENWORKER_HEARTBEAT_BATCH_SIZE          20        items claimed (and at most summarised) per run
GENWORKER_HEARTBEAT_LEASE_S             600       how long a run holds the items it claimed
GENWORKER_HEARTBEAT_ATTENTION_WINDOW_S  21600     a concern is processed at most once per window
======================================  ========  ===========================================
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from genworker.settings import Settings, SettingsError

__all__ = ["HeartbeatSettings", "heartbeat_settings"]


@dataclass(frozen=True, slots=True)
class HeartbeatSettings:
    enabled: bool = True
    interval_s: float = 300.0
    batch_size: int = 20
    lease_s: float = 600.0
    attention_window: timedelta = timedelta(hours=6)
    item_tokens: int = 400  # budget of one item's payload in a prompt
    stop_grace_s: float = 10.0  # how long stop() waits for a running heartbeat and its runs
    inbox_retention: timedelta = timedelta(days=7)  # consumed items older than this are deleted
    purge_every: timedelta = timedelta(hours=1)  # per worker, at the end of a heartbeat

    def __post_init__(self) -> None:
        if self.interval_s <= 0 or self.lease_s <= 0 or self.batch_size < 1 or self.item_tokens < 1:
            raise ValueError("interval_s, lease_s, batch_size and item_tokens must be positive")
        if self.attention_window <= timedelta(0) or self.inbox_retention <= timedelta(0):
            raise ValueError("attention_window and inbox_retention must be positive")


def heartbeat_settings(settings: Settings) -> HeartbeatSettings:
    raw_enabled = (settings.get("GENWORKER_HEARTBEAT_ENABLED") or "true").strip().lower()
    if raw_enabled not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        raise SettingsError(f"GENWORKER_HEARTBEAT_ENABLED={raw_enabled!r}: must be true or false")
    return HeartbeatSettings(
        enabled=raw_enabled in ("1", "true", "yes", "on"),
        interval_s=settings.number("GENWORKER_HEARTBEAT_INTERVAL_S", 300.0, 0.01, 86_400.0),
        batch_size=int(settings.number("GENWORKER_HEARTBEAT_BATCH_SIZE", 20, 1, 500)),
        lease_s=settings.number("GENWORKER_HEARTBEAT_LEASE_S", 600.0, 1.0, 86_400.0),
        attention_window=timedelta(
            seconds=settings.number("GENWORKER_HEARTBEAT_ATTENTION_WINDOW_S", 21_600.0, 1.0, 30 * 86_400.0)
        ),
        inbox_retention=timedelta(
            seconds=settings.number("GENWORKER_INBOX_RETENTION_S", 7 * 86_400.0, 60.0, 3650 * 86_400.0)
        ),
    )
