"""What a vendor session gets from its supervisor, and the reconnect backoff.

A session (`slack.py`, `feishu.py`, `dingtalk.py`) opens one connection with the vendor's SDK,
calls `connected()` once it is up, hands every verified event to `take` (which returns once the
message is stored: claimed in the dedupe store and journaled, exactly as a webhook's) and acks it
only then; it returns or raises when the connection ends.
"""

from __future__ import annotations

import math
import random
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from genworker.channels.base import InboundAck
from genworker.channels.outbound.platform import VendorEndpoints
from genworker.channels.registry import ChannelBinding

__all__ = ["Backoff", "Link", "Session"]


@dataclass(frozen=True, slots=True)
class Link:
    binding: ChannelBinding
    endpoints: VendorEndpoints
    connected: Callable[[], None]  # on the supervisor's loop
    take: Callable[[InboundAck], Coroutine[Any, Any, None]]  # raises when the event was not stored: do not ack it


Session = Callable[[Link], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delay before the next attempt: `base_s` after a connection was lost, doubling with each
    attempt in a row that fails (at most `max_exponent` doublings, never over `max_s`), ±`jitter`."""

    base_s: float = 1.0
    max_s: float = 60.0
    max_exponent: int = 10
    jitter: float = 0.2

    def delay(self, failures: int) -> float:
        raw = min(self.base_s * 2 ** min(max(failures, 0), self.max_exponent), self.max_s)
        return raw * random.uniform(1 - self.jitter, 1 + self.jitter) if self.jitter else float(raw)

    def with_features(self, features: Mapping[str, Any]) -> Backoff:
        """A binding's own settings, as upstream reads them from `features` (invalid values ignored):
        `reconnect_backoff_base_seconds` (`reconnect_base_delay`), `reconnect_backoff_max_seconds`
        (`reconnect_max_delay`), `reconnect_max_retries` (the most doublings), `reconnect_jitter_ratio`."""
        base = _positive(features.get("reconnect_backoff_base_seconds", features.get("reconnect_base_delay")))
        top = _positive(features.get("reconnect_backoff_max_seconds", features.get("reconnect_max_delay")))
        doublings = _positive(features.get("reconnect_max_retries"))
        jitter = _positive(features.get("reconnect_jitter_ratio"), allow_zero=True)
        base_s = base if base is not None else self.base_s
        return Backoff(
            base_s=base_s,
            max_s=max(top if top is not None else self.max_s, base_s),
            max_exponent=int(doublings) if doublings is not None else self.max_exponent,
            jitter=min(jitter, 1.0) if jitter is not None else self.jitter,
        )


def _positive(value: Any, *, allow_zero: bool = False) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    if not math.isfinite(number) or number < 0 or (number == 0 and not allow_zero):
        return None
    return number
