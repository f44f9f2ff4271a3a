"""Inbox errors: misuse, unreadable stored items, refused transitions and lost races."""

from __future__ import annotations

__all__ = [
    "InboxConflictError",
    "InboxCorruptError",
    "InboxError",
    "InboxItemNotFoundError",
    "InboxSchemaError",
    "InvalidItemError",
    "InvalidTransitionError",
    "StaleLeaseError",
]


class InboxError(Exception):
    """Base of every inbox failure."""


class InvalidItemError(InboxError, ValueError):
    """An item handed to `write` cannot be stored (not pending, bad ids, naive or pre-1970 created_at ...)."""


class InboxSchemaError(InboxError):
    """A stored item has a schema_version this runtime cannot read; it is left where it is."""

    def __init__(self, source: str, version: object, supported: int) -> None:
        self.source = source
        self.version = version
        super().__init__(
            f"{source}: unsupported inbox item schema_version {version!r} (this runtime reads version {supported})"
        )


class InboxCorruptError(InboxError):
    """A stored item is not valid JSON or does not match the schema; `source` names the file or Redis key."""

    def __init__(self, source: str, detail: str) -> None:
        self.source = source
        super().__init__(f"{source}: unreadable inbox item: {detail}")


class InboxItemNotFoundError(InboxError):
    def __init__(self, tenant_id: str, worker_id: str, item_id: str) -> None:
        self.item_id = item_id
        super().__init__(f"inbox item {item_id!r} of worker {worker_id!r} (tenant {tenant_id!r}) does not exist")


class StaleLeaseError(InboxError):
    """The caller no longer holds the item: its lease was taken over, or the item moved on."""

    def __init__(self, item_id: str, owner: str, holder: str | None, state: str) -> None:
        self.item_id = item_id
        self.owner = owner
        self.holder = holder
        self.state = state
        super().__init__(
            f"inbox item {item_id!r} is not held by {owner!r}: it is {state}"
            + (f" under a lease of {holder!r}" if holder and state == "processing" else "")
        )


class InvalidTransitionError(InboxError):
    """The requested change does not apply to the item's current state (e.g. requeue of a consumed item)."""

    def __init__(self, item_id: str, action: str, state: str, why: str = "") -> None:
        self.item_id = item_id
        self.state = state
        super().__init__(f"cannot {action} inbox item {item_id!r}: it is {state}{f' ({why})' if why else ''}")


class InboxConflictError(InboxError):
    """An item kept changing under the aggregate's compare-and-set (bounded retries exhausted)."""

    def __init__(self, item_id: str, attempts: int) -> None:
        self.item_id = item_id
        super().__init__(f"inbox item {item_id!r} changed concurrently {attempts} times in a row; giving up")
