"""The one way an event becomes JSON and back: a single TypeAdapter, schema_version checked first."""

from __future__ import annotations

import json
from typing import Any, Final

from pydantic import TypeAdapter, ValidationError

from genworker.bus.errors import EventDecodeError
from genworker.bus.models import SCHEMA_VERSION, Event

__all__ = ["EVENT_ADAPTER", "decode_event", "encode_event", "event_from_json", "event_to_json"]

EVENT_ADAPTER: Final = TypeAdapter(Event)


def event_to_json(event: Event) -> dict[str, Any]:
    """The event as JSON-ready Python values (for embedding in a larger message)."""
    result: dict[str, Any] = EVENT_ADAPTER.dump_python(event, mode="json")
    return result


def encode_event(event: Event) -> bytes:
    return EVENT_ADAPTER.dump_json(event)


def event_from_json(data: object, source: str) -> Event:
    """Validate parsed JSON; `source` (a channel, a file) names the message in every error."""
    if not isinstance(data, dict):
        raise EventDecodeError(source, f"expected a JSON object, got {type(data).__name__}")
    version = data.get("schema_version")
    if type(version) is not int or version != SCHEMA_VERSION:
        raise EventDecodeError(
            source, f"unsupported event schema_version {version!r} (this runtime reads version {SCHEMA_VERSION})"
        )
    try:
        return EVENT_ADAPTER.validate_python(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<event>'}: {err['msg']}"
            for err in exc.errors(include_url=False, include_input=False)[:5]
        )
        raise EventDecodeError(source, problems) from None


def decode_event(raw: bytes | str, source: str) -> Event:
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise EventDecodeError(source, f"not valid JSON ({exc})") from None
    return event_from_json(data, source)
