"""Events: one typed `Event`, the `EventBus` interface, an in-process bus and a Redis bus across processes."""

from genworker.bus.base import EventBus, Handler, Subscription, topic_matches, validate_pattern
from genworker.bus.codec import EVENT_ADAPTER, decode_event, encode_event
from genworker.bus.errors import BusClosedError, EventBusError, EventDecodeError, EventPublishError
from genworker.bus.local import InProcessEventBus
from genworker.bus.models import Event, new_event
from genworker.bus.redis_bus import RedisEventBus

__all__ = [
    "EVENT_ADAPTER",
    "BusClosedError",
    "Event",
    "EventBus",
    "EventBusError",
    "EventDecodeError",
    "EventPublishError",
    "Handler",
    "InProcessEventBus",
    "RedisEventBus",
    "Subscription",
    "decode_event",
    "encode_event",
    "new_event",
    "topic_matches",
    "validate_pattern",
]
