"""Token counting for context budgets, with LiteLLM's bundled cl100k tokenizer (offline).

One counter for every segment and message, so budgets compare like with like. Providers
tokenise differently; the reactive overflow retry covers the difference.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

__all__ = ["count_tokens", "load_tokenizer", "message_tokens", "truncate_tokens"]

# OpenAI's chat accounting for cl100k models: per message, per tool call, and the reply primer.
_PER_MESSAGE = 4
_PER_TOOL_CALL = 4
_REPLY_PRIMING = 3
_IMAGE_PART = 85  # a low-detail image

_CACHE: dict[tuple[int, int], int] = {}
_CACHE_MAX = 16_384


@functools.cache
def _encoder() -> Callable[[str], Sequence[int]]:
    from genworker.llm.tokenizer import cl100k  # LiteLLM's gpt-4 tokenizer, without importing LiteLLM

    return cl100k()


def load_tokenizer() -> None:
    """Load the tokenizer's tables now: the first count reads and parses them, a
    noticeable pause once per process. The runtime calls this in a worker thread at start-up, so that the first turn
    does not pay it on the event loop, stalling every other request meanwhile."""
    _encoder()("warm")


def _text_tokens(text: str) -> int:
    if not text:
        return 0
    # Keyed by hash and length, not the string: the cache must not keep large tool outputs alive.
    key = (hash(text), len(text))
    count = _CACHE.get(key)
    if count is None:
        if len(_CACHE) >= _CACHE_MAX:
            _CACHE.clear()
        count = _CACHE[key] = len(_encoder()(text))
    return count


def _content_tokens(content: Any) -> int:
    if content is None:
        return 0
    if isinstance(content, str):
        return _text_tokens(content)
    total = 0
    for part in content if isinstance(content, list | tuple) else (content,):
        if isinstance(part, Mapping) and part.get("type") == "text":
            total += _text_tokens(str(part.get("text", "")))
        elif isinstance(part, Mapping) and part.get("type") == "image_url":
            total += _IMAGE_PART
        else:
            total += _text_tokens(str(part))
    return total


def message_tokens(message: Mapping[str, Any]) -> int:
    """Tokens one chat message costs: role, content, name, tool calls and the call id it answers."""
    total = _PER_MESSAGE + _content_tokens(message.get("content"))
    if name := message.get("name"):
        total += _text_tokens(str(name))
    if call_id := message.get("tool_call_id"):
        total += _text_tokens(str(call_id))
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        total += _PER_TOOL_CALL + _text_tokens(str(function.get("name", "")))
        total += _text_tokens(str(function.get("arguments", "")))
    return total


def count_tokens(value: str | Sequence[Mapping[str, Any]]) -> int:
    """Tokens of a text, or of a list of chat messages as a model would receive them."""
    if isinstance(value, str):
        return _text_tokens(value)
    if not value:
        return 0
    return sum(message_tokens(m) for m in value) + _REPLY_PRIMING


def truncate_tokens(text: str, max_tokens: int, *, keep: Literal["head", "middle"] = "head", what: str = "text") -> str:
    """Cut `text` to at most `max_tokens`, keeping its head (or head and tail) and saying what was cut."""
    total = count_tokens(text)
    if total <= max_tokens:
        return text
    chars = int(len(text) * max_tokens / total)
    while chars > 0:
        if keep == "head":
            head, tail = text[:chars], ""
        else:
            head, tail = text[: chars // 2], text[len(text) - (chars - chars // 2) :]
        omitted = max(total - count_tokens(head) - count_tokens(tail), 0)
        marker = f"[… {omitted} tokens of {what} trimmed …]"
        candidate = f"{head}\n{marker}\n{tail}" if tail else f"{head}\n{marker}"
        if count_tokens(candidate) <= max_tokens:
            return candidate
        chars = int(chars * 0.85)
    marker = f"[… {total} tokens of {what} trimmed …]"
    return marker if count_tokens(marker) <= max_tokens else ""
