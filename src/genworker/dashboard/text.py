"""Text as the dashboard shows it: shortened at a word boundary, never mid-word."""

from __future__ import annotations

__all__ = ["clip"]


def clip(text: str, limit: int) -> str:
    """At most `limit` characters: cut at the last space when that keeps at least half, with an
    ellipsis when cut; a single word longer than half the limit is cut where it must be."""
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    space = head.rfind(" ")
    if space > limit // 2:
        head = head[:space]
    return head.rstrip() + "…"
