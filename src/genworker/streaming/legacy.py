"""The legacy SSE shape: `event: <snake_case type>` and the internal event's fields as JSON."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from genworker.engine.events import EngineEvent

__all__ = ["legacy_event"]


def legacy_event(event: EngineEvent) -> tuple[str, dict[str, Any]]:
    name = re.sub(r"(?<!^)(?=[A-Z])", "_", type(event).__name__).lower()
    return name, dataclasses.asdict(event)
