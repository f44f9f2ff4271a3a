"""OpenAI-style chat messages as the router takes them: the last user message is the task, the
messages before it the history a stateless caller sends along."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from genworker.api.errors import ApiError

__all__ = ["history_from_openai"]

Message = Mapping[str, Any]


def history_from_openai(messages: Sequence[Message]) -> tuple[str, tuple[Message, ...]]:
    """(the last user message, everything before it); 422 when there is no user message."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "user":
            content = messages[index].get("content")
            text = (
                content
                if isinstance(content, str)
                else " ".join(part.get("text", "") for part in content or () if isinstance(part, Mapping))
            )
            return text, tuple(dict(m) for m in messages[:index])
    raise ApiError(422, "validation_error", "messages must contain a user message")
