"""What the Conflict Arbiter raises: misuse (unknown case, a case already decided, an illegal plan
move) apart from trouble with its files or its lock."""

from __future__ import annotations

__all__ = [
    "ConflictError",
    "ConflictFileError",
    "ConflictNotFound",
    "ConflictNotOpen",
    "IllegalPlanTransition",
    "ResourceBusy",
]


class ConflictError(Exception):
    """Base of every conflict error."""


class ConflictNotFound(ConflictError, LookupError):
    pass


class ConflictNotOpen(ConflictError, ValueError):
    """The case was already resolved or dropped; whoever decided first won."""


class IllegalPlanTransition(ConflictError, ValueError):
    pass


class ConflictFileError(ConflictError):
    """A case or plan file cannot be read (names the file)."""


class ResourceBusy(ConflictError, TimeoutError):
    """The resource's lock was not free within the wait (another plan is changing it)."""
