"""Errors of the duty scheduler."""

from __future__ import annotations

from pathlib import Path

__all__ = ["DutyNotFound", "DutyStateError"]


class DutyStateError(Exception):
    """A duty state or execution file that cannot be read (names the file)."""

    def __init__(self, path: Path, problem: str) -> None:
        self.path = path
        super().__init__(f"{path}: {problem}")


class DutyNotFound(LookupError):
    """No such duty (or it is not active) on the worker."""
