"""The Inbox: sensed facts waiting for the heartbeat (pending -> processing -> consumed | failed | dead).

Sensors write through `InboxWriter` (any `InboxStore`); the heartbeat claims, consumes and fails
items through `InboxAggregate`, the only code that changes an item's state.
"""

from genworker.autonomy.inbox.aggregate import (
    DEFAULT_LEASE_S,
    DEFAULT_MAX_ATTEMPTS,
    InboxAggregate,
    RetryDelay,
    exponential_backoff,
)
from genworker.autonomy.inbox.codec import INBOX_ITEM_ADAPTER, decode_item, encode_item
from genworker.autonomy.inbox.errors import (
    InboxConflictError,
    InboxCorruptError,
    InboxError,
    InboxItemNotFoundError,
    InboxSchemaError,
    InvalidItemError,
    InvalidTransitionError,
    StaleLeaseError,
)
from genworker.autonomy.inbox.file_store import FileInboxStore
from genworker.autonomy.inbox.models import SCHEMA_VERSION, InboxFacts, InboxItem, InboxState, InboxWriter, new_item
from genworker.autonomy.inbox.redis_store import RedisInboxStore
from genworker.autonomy.inbox.store import InboxStore
from genworker.autonomy.inbox.topics import ITEM_CONSUMED, ITEM_DEAD, ITEM_FAILED, ITEM_REQUEUED, ITEM_WRITTEN

__all__ = [
    "DEFAULT_LEASE_S",
    "DEFAULT_MAX_ATTEMPTS",
    "INBOX_ITEM_ADAPTER",
    "ITEM_CONSUMED",
    "ITEM_DEAD",
    "ITEM_FAILED",
    "ITEM_REQUEUED",
    "ITEM_WRITTEN",
    "SCHEMA_VERSION",
    "FileInboxStore",
    "InboxAggregate",
    "InboxConflictError",
    "InboxCorruptError",
    "InboxError",
    "InboxFacts",
    "InboxItem",
    "InboxItemNotFoundError",
    "InboxSchemaError",
    "InboxState",
    "InboxStore",
    "InboxWriter",
    "InvalidItemError",
    "InvalidTransitionError",
    "RedisInboxStore",
    "RetryDelay",
    "StaleLeaseError",
    "decode_item",
    "encode_item",
    "exponential_backoff",
    "new_item",
]
