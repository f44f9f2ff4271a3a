"""Splitting long replies to fit a platform's message size limit.

Cuts prefer a paragraph break, then a line break, then a sentence end or space, and only
as a last resort the middle of a word; no piece is empty and nothing is lost but the
whitespace at a cut.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Measure", "chars", "split_text", "utf8_bytes"]

Measure = Callable[[str], int]
_BREAKS = ("\n\n", "\n", "。", ". ", "! ", "? ", "；", "; ", " ")


def chars(text: str, /) -> int:
    return len(text)


def utf8_bytes(text: str, /) -> int:
    return len(text.encode("utf-8"))


def _fitting(text: str, limit: int, measure: Measure) -> int:
    """The longest prefix length of `text` whose measure is within `limit` (binary search)."""
    low, high = 0, len(text)
    while low < high:
        mid = (low + high + 1) // 2
        if measure(text[:mid]) <= limit:
            low = mid
        else:
            high = mid - 1
    return low


def split_text(text: str, limit: int, measure: Measure = chars) -> list[str]:
    if limit <= 0:
        raise ValueError("limit must be positive")
    pieces: list[str] = []
    rest = text.strip()
    while rest:
        if measure(rest) <= limit:
            pieces.append(rest)
            break
        fit = max(_fitting(rest, limit, measure), 1)
        window = rest[:fit]
        cut = fit
        for mark in _BREAKS:
            at = window.rfind(mark)
            if at > fit // 4:  # a break too early would make tiny pieces
                cut = at + len(mark)
                break
        piece = rest[:cut].rstrip()
        if piece:
            pieces.append(piece)
        rest = rest[cut:].lstrip()
    return pieces
