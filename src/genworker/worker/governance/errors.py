"""Errors of the governance stage: misuse of its inputs, and snapshot files it cannot trust."""

from __future__ import annotations

__all__ = ["GovernanceError", "GovernanceInputError", "SnapshotError"]


class GovernanceError(Exception):
    """Base of the governance stage's errors."""


class GovernanceInputError(GovernanceError, ValueError):
    """The caller built a GovernanceInput that cannot be evaluated (a programming error, not a denial)."""


class SnapshotError(GovernanceError):
    """A policy or contract snapshot file is missing, unreadable, tampered with or of an unknown schema."""

    def __init__(self, file: str, message: str) -> None:
        super().__init__(f"{file}: {message}")
        self.file = file
        self.message = message
