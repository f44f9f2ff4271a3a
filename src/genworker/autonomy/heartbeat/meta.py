"""Heartbeat meta: where a worker's heartbeat stands, in ``runtime/heartbeat_meta.json``.

The cursor (last run, newest item processed), open concerns (what the heartbeat took up and has
not seen settled), refs of the tasks and isolated runs it started, running counters and the
outcome of the last run that did something. Every list is capped and expired concerns are dropped
on each write, so the file stays the same size however long the worker runs. A run that found
nothing to do does not write it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Final, Literal

from pydantic import AwareDatetime, TypeAdapter

from genworker.autonomy.heartbeat.errors import HeartbeatFileError
from genworker.autonomy.heartbeat.files import read_document, runtime_file, update_document

__all__ = [
    "MAX_OPEN_CONCERNS",
    "MAX_TASK_REFS",
    "META_FILE",
    "META_SCHEMA_VERSION",
    "Counters",
    "HeartbeatCursor",
    "HeartbeatMeta",
    "HeartbeatMetaStore",
    "LastRun",
    "OpenConcern",
    "RunKind",
    "TaskRef",
    "meta_json",
]

META_SCHEMA_VERSION: Final = 1
META_FILE: Final = "heartbeat_meta.json"
MAX_OPEN_CONCERNS: Final = 50
MAX_TASK_REFS: Final = 50

RunKind = Literal["task", "isolated"]


@dataclass(frozen=True, slots=True)
class HeartbeatCursor:
    last_run_at: AwareDatetime | None = None
    last_item_created_at: AwareDatetime | None = None  # the newest item a run processed
    last_item_id: str | None = None
    runs: int = 0  # runs that processed at least one item
    items: int = 0


@dataclass(frozen=True, slots=True)
class OpenConcern:
    concern: str
    item_id: str
    action: str  # summary | task | isolated
    title: str
    opened_at: AwareDatetime
    expires_at: AwareDatetime
    run_id: str | None = None


@dataclass(frozen=True, slots=True)
class TaskRef:
    """A task or isolated run the heartbeat started, and where it stands."""

    kind: RunKind
    item_id: str
    concern: str
    run_id: str
    task_id: str
    thread_id: str
    started_at: AwareDatetime
    run_state: str = "running"
    finished_at: AwareDatetime | None = None
    main_session_key: str | None = None  # isolated runs report back to this session
    reported: bool = False


@dataclass(frozen=True, slots=True)
class Counters:
    model_turns: int = 0  # summary turns (tasks and isolated runs are counted apart)
    reports: int = 0
    silent: int = 0
    duplicates: int = 0
    tasks: int = 0
    isolated: int = 0
    failures: int = 0


@dataclass(frozen=True, slots=True)
class LastRun:
    at: AwareDatetime
    claimed: int
    summary: Literal["reported", "silent", "failed"] | None = None
    summary_run_id: str | None = None
    duplicates: int = 0
    tasks: int = 0
    isolated: int = 0
    failed: int = 0


@dataclass(frozen=True, slots=True)
class HeartbeatMeta:
    schema_version: int
    tenant_id: str
    worker_id: str
    main_session_key: str
    cursor: HeartbeatCursor = field(default_factory=HeartbeatCursor)
    open_concerns: tuple[OpenConcern, ...] = ()
    task_refs: tuple[TaskRef, ...] = ()
    counters: Counters = field(default_factory=Counters)
    last_run: LastRun | None = None

    def bounded(self, now: datetime) -> HeartbeatMeta:
        """Expired concerns dropped; the newest `MAX_*` entries of each list kept."""
        live = tuple(c for c in self.open_concerns if c.expires_at > now)
        return replace(self, open_concerns=live[-MAX_OPEN_CONCERNS:], task_refs=self.task_refs[-MAX_TASK_REFS:])


_ADAPTER: Final = TypeAdapter(HeartbeatMeta)


def meta_json(meta: HeartbeatMeta) -> dict[str, object]:
    data: dict[str, object] = _ADAPTER.dump_python(meta, mode="json")
    return data


class HeartbeatMetaStore:
    def __init__(self, workspace: Path, *, main_session_key: Callable[[str], str]) -> None:
        self.workspace = workspace
        self._main_key = main_session_key

    def path(self, tenant_id: str, worker_id: str) -> Path:
        return runtime_file(self.workspace, tenant_id, worker_id, META_FILE)

    async def get(self, tenant_id: str, worker_id: str) -> HeartbeatMeta | None:
        return await asyncio.to_thread(self._get, tenant_id, worker_id)

    async def update(
        self, tenant_id: str, worker_id: str, now: datetime, change: Callable[[HeartbeatMeta], HeartbeatMeta]
    ) -> HeartbeatMeta:
        """Apply `change` to the stored meta (a fresh one when there is none) under the file's lock."""
        return await asyncio.to_thread(self._update, tenant_id, worker_id, now, change)

    def _get(self, tenant_id: str, worker_id: str) -> HeartbeatMeta | None:
        path = self.path(tenant_id, worker_id)
        return self._check(read_document(_ADAPTER, path, META_SCHEMA_VERSION), path, tenant_id, worker_id)

    def _update(
        self, tenant_id: str, worker_id: str, now: datetime, change: Callable[[HeartbeatMeta], HeartbeatMeta]
    ) -> HeartbeatMeta:
        path = self.path(tenant_id, worker_id)

        def apply(current: HeartbeatMeta | None) -> HeartbeatMeta:
            base = self._check(current, path, tenant_id, worker_id) or HeartbeatMeta(
                META_SCHEMA_VERSION, tenant_id, worker_id, self._main_key(worker_id)
            )
            return change(base).bounded(now)

        result = update_document(_ADAPTER, path, META_SCHEMA_VERSION, apply)
        assert result is not None
        return result

    @staticmethod
    def _check(meta: HeartbeatMeta | None, path: Path, tenant_id: str, worker_id: str) -> HeartbeatMeta | None:
        if meta is not None and (meta.tenant_id, meta.worker_id) != (tenant_id, worker_id):
            raise HeartbeatFileError(path, f"belongs to {meta.tenant_id}/{meta.worker_id}, not {tenant_id}/{worker_id}")
        return meta
