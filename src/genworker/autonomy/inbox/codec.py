"""The one way an inbox item becomes JSON and back: a single TypeAdapter, schema_version checked first."""

from __future__ import annotations

import json
from typing import Any, Final

from pydantic import TypeAdapter, ValidationError

from genworker.autonomy.inbox.errors import InboxCorruptError, InboxSchemaError
from genworker.autonomy.inbox.models import SCHEMA_VERSION, InboxItem

__all__ = ["INBOX_ITEM_ADAPTER", "check_owner", "decode_item", "encode_item", "item_from_json", "item_to_json"]

INBOX_ITEM_ADAPTER: Final = TypeAdapter(InboxItem)


def encode_item(item: InboxItem, *, indent: int | None = None) -> bytes:
    return INBOX_ITEM_ADAPTER.dump_json(item, indent=indent)


def item_to_json(item: InboxItem) -> dict[str, Any]:
    result: dict[str, Any] = INBOX_ITEM_ADAPTER.dump_python(item, mode="json")
    return result


def decode_item(raw: bytes | str, source: str) -> InboxItem:
    """Parse a stored item; `source` (a file path or Redis key) names it in every error."""
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InboxCorruptError(source, f"not valid JSON ({exc})") from None
    return item_from_json(data, source)


def item_from_json(data: object, source: str) -> InboxItem:
    if not isinstance(data, dict):
        raise InboxCorruptError(source, f"expected a JSON object, got {type(data).__name__}")
    version = data.get("schema_version")
    if type(version) is not int or version != SCHEMA_VERSION:
        raise InboxSchemaError(source, version, SCHEMA_VERSION)
    try:
        return INBOX_ITEM_ADAPTER.validate_python(data)
    except ValidationError as exc:
        raise InboxCorruptError(source, _describe(exc)) from None


def check_owner(item: InboxItem, tenant_id: str, worker_id: str, source: str) -> InboxItem:
    """An item stored under one worker's inbox must say so; anything else is refused, never returned."""
    if (item.tenant_id, item.worker_id) != (tenant_id, worker_id):
        raise InboxCorruptError(
            source,
            f"holds an item of worker {item.worker_id!r} (tenant {item.tenant_id!r}), "
            f"expected worker {worker_id!r} of tenant {tenant_id!r}",
        )
    return item


def _describe(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors(include_url=False, include_input=False)[:5]:
        where = ".".join(str(p) for p in error["loc"]) or "<item>"
        parts.append(f"{where}: {error['msg']}")
    more = exc.error_count() - len(parts)
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")
