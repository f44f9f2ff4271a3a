"""The interfaces the file and Redis backends of context spaces share (blocking: callers use
threads). The composition root picks one (`wiring.build_spaces`): files in one process, Redis when
the profile shares one.

`SpaceStore` holds the spaces (the truth), numbers new ones and serialises a worker's writers
(`locked`: whoever changes a space loads it, changes it and saves it inside). `changed_since` tells a
process which spaces others changed, so its own derived index follows; the file backend's index is
shared with the files and answers None. `EventLog` is the append-only record of the facts.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Protocol

from genworker.autonomy.spaces.models import ContextEvent, ContextSpace

__all__ = ["EventLog", "SpaceStore"]


class SpaceStore(Protocol):
    def load(self, tenant_id: str, worker_id: str, space_id: str) -> ContextSpace:
        """Raises SpaceNotFound, or SpaceFileError for a stored space this build cannot read."""

    def save(self, space: ContextSpace) -> None:
        """Store `space` (the caller holds `locked`)."""

    def exists(self, tenant_id: str, worker_id: str, space_id: str) -> bool:
        """Raises SpaceNotFound for an id that is not a space id."""

    def all(self, tenant_id: str, worker_id: str) -> Iterator[ContextSpace]:
        """Every readable space; an unreadable one is logged and skipped."""

    def has_spaces(self, tenant_id: str, worker_id: str) -> bool:
        """Whether the worker ever had a space (nothing is created by asking)."""

    def next_id(self, tenant_id: str, worker_id: str) -> str:
        """A new space id, never given before (the caller holds `locked`)."""

    def locked(self, tenant_id: str, worker_id: str) -> contextlib.AbstractContextManager[None]:
        """Exclusive over the worker's spaces, across threads and processes."""

    def index_path(self, tenant_id: str, worker_id: str) -> Path:
        """Where this process keeps the worker's derived index."""

    def changed_since(self, tenant_id: str, worker_id: str, mark: int | None) -> tuple[int, list[str]] | None:
        """For an index kept apart from the store: (a new mark, the spaces saved after `mark`); for
        None, (the mark to start from, []) and the caller fills its index from `all`. None when the
        index is shared with the store and needs no catching up."""

    def close(self) -> None: ...


class EventLog(Protocol):
    def append(self, event: ContextEvent) -> None: ...

    def read(self, tenant_id: str, worker_id: str, event_ids: Iterable[str] | None = None) -> list[ContextEvent]:
        """The events with these ids (all of them when None), oldest first."""
