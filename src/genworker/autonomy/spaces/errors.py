"""Errors of the context-space layer: a file that cannot be read (naming it), an unknown space, and
a change a space's state does not allow."""

from __future__ import annotations

__all__ = ["SpaceError", "SpaceFileError", "SpaceNotFound", "SpaceTransitionError"]


class SpaceError(Exception):
    pass


class SpaceFileError(SpaceError):
    """A space file or the event log is unreadable or of an unknown schema_version."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")
        self.where = where


class SpaceNotFound(SpaceError, LookupError):
    def __init__(self, space_id: str) -> None:
        super().__init__(f"no context space {space_id!r}")
        self.space_id = space_id


class SpaceTransitionError(SpaceError):
    """E.g. confirming a space that is not pending, or re-filing a space into itself."""
