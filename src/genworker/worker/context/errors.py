"""Context assembly errors: misuse by the caller, named precisely."""

from __future__ import annotations

__all__ = ["ContextError", "ThreadIsolationError"]


class ContextError(Exception):
    """Base of context assembly errors."""


class ThreadIsolationError(ContextError):
    """History handed to the assembler belongs to another thread than the one requested."""
