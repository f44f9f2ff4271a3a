"""Memory errors: a bad file on disk (naming the file and field) versus a memory operation misused."""

from __future__ import annotations

__all__ = ["MemoryFileError", "MemoryPolicyError", "MemoryStoreError"]


class MemoryStoreError(Exception):
    """Base of memory errors."""


class MemoryFileError(MemoryStoreError, ValueError):
    """A memory file cannot be read: the message names the file and the field at fault."""

    def __init__(self, path: object, message: str) -> None:
        self.path = str(path)
        super().__init__(f"{path}: {message}")


class MemoryPolicyError(MemoryStoreError, PermissionError):
    """A write the partition rules forbid (e.g. a run writing straight to worker or tenant scope)."""
