"""AttentionLedger: which concerns the heartbeat has already taken up, so the same concern is not
processed twice within its window, across runs and restarts.

A *concern* is what an item is about, not the item itself: the inbox already drops a fact written
twice under one dedupe_key, but the same alert re-sent every five minutes, or the same goal drifting
on every check, arrives as new items. Their concern key is the same, so within the window only the
first is processed; the others are consumed as duplicates without a model call.

``tenants/{t}/workers/{w}/runtime/attention_ledger.json``: expired entries are dropped on every
write and the number of entries is capped, so the file does not grow with time.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

from pydantic import AwareDatetime, TypeAdapter

from genworker.autonomy.heartbeat.errors import HeartbeatFileError
from genworker.autonomy.heartbeat.files import DocumentCache, read_document, runtime_file, update_document
from genworker.autonomy.inbox import InboxItem
from genworker.workspace.models.base import thaw

__all__ = [
    "DEFAULT_WINDOW",
    "LEDGER_FILE",
    "LEDGER_SCHEMA_VERSION",
    "Admission",
    "Admitted",
    "AlreadySeen",
    "AttentionLedger",
    "LedgerEntry",
    "Settlement",
    "concern_of",
    "describe_entry",
]

LEDGER_SCHEMA_VERSION: Final = 1
LEDGER_FILE: Final = "attention_ledger.json"
DEFAULT_WINDOW: Final = timedelta(hours=6)
DEFAULT_MAX_ENTRIES: Final = 2_000


def concern_of(item: InboxItem) -> str:
    """The concern key of `item`, first that applies:

    - an explicit ``concern`` string in the item's metadata, then in its payload;
    - for ``goal.*`` items naming a goal: the goal, the event type and the goal action;
    - otherwise a hash of the source, the event type and the payload (the same fact re-sent).
    """
    for source in (item.metadata, item.payload):
        explicit = source.get("concern")
        if isinstance(explicit, str) and explicit.strip():
            return f"concern:{explicit.strip()}"
    goal_id = item.payload.get("goal_id")
    if item.event_type.startswith("goal.") and isinstance(goal_id, str) and goal_id:
        action = item.payload.get("action") or item.payload.get("recommended_action") or ""
        return f"goal:{goal_id}:{item.event_type}:{action}"
    body = json.dumps(
        [item.source_type, item.source_id, item.event_type, thaw(item.payload)],
        sort_keys=True,
        ensure_ascii=False,
        default=str,
    )
    return "fact:" + hashlib.sha256(body.encode("utf-8")).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    concern: str
    item_id: str  # the item that took the concern up
    first_seen_at: AwareDatetime
    expires_at: AwareDatetime
    action: str = ""  # summary | task | isolated, once decided
    outcome: str = ""  # reported | silent | submitted ..., once settled
    ref: str | None = None  # the run that handled it


@dataclass(frozen=True, slots=True)
class _LedgerFile:
    schema_version: int
    tenant_id: str
    worker_id: str
    entries: tuple[LedgerEntry, ...] = ()


_ADAPTER: Final = TypeAdapter(_LedgerFile)


@dataclass(frozen=True, slots=True)
class Admitted:
    """The concern is new (or its window has passed, or this same item is being delivered again)."""

    concern: str
    item_id: str


@dataclass(frozen=True, slots=True)
class AlreadySeen:
    """Another item took this concern up within the window."""

    concern: str
    item_id: str
    entry: LedgerEntry


Admission = Admitted | AlreadySeen


@dataclass(frozen=True, slots=True)
class Settlement:
    action: str
    outcome: str
    ref: str | None = None


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class AttentionLedger:
    workspace: Path
    window: timedelta = DEFAULT_WINDOW
    max_entries: int = DEFAULT_MAX_ENTRIES
    clock: Callable[[], datetime] = field(default=_utc_now)
    _cache: DocumentCache = field(default_factory=dict, repr=False)  # parsed files while unchanged on disk

    def __post_init__(self) -> None:
        if self.window <= timedelta(0):
            raise ValueError(f"the attention window must be positive, got {self.window}")
        if self.max_entries < 1:
            raise ValueError("max_entries must be at least 1")

    def path(self, tenant_id: str, worker_id: str) -> Path:
        return runtime_file(self.workspace, tenant_id, worker_id, LEDGER_FILE)

    async def admit(self, tenant_id: str, worker_id: str, claims: Sequence[tuple[str, str]]) -> tuple[Admission, ...]:
        """For each (concern, item_id), in order: admitted (and recorded) or already seen. Atomic
        across processes: two runners never both admit one concern."""
        return await asyncio.to_thread(self._admit, tenant_id, worker_id, tuple(claims))

    async def settle(self, tenant_id: str, worker_id: str, settled: Mapping[str, Settlement]) -> None:
        """Record what became of admitted concerns (keyed by concern)."""
        if settled:
            await asyncio.to_thread(self._settle, tenant_id, worker_id, dict(settled))

    async def release(self, tenant_id: str, worker_id: str, claims: Sequence[tuple[str, str]]) -> None:
        """Forget concerns whose processing failed, so that a retry or a later item is not a duplicate."""
        if claims:
            await asyncio.to_thread(self._release, tenant_id, worker_id, tuple(claims))

    async def entries(self, tenant_id: str, worker_id: str) -> tuple[LedgerEntry, ...]:
        """The concerns still within their window, oldest first."""
        return await asyncio.to_thread(self._entries, tenant_id, worker_id)

    # -- blocking parts ------------------------------------------------------------

    def _admit(self, tenant_id: str, worker_id: str, claims: tuple[tuple[str, str], ...]) -> tuple[Admission, ...]:
        now = self.clock()
        result: list[Admission] = []

        def change(current: _LedgerFile | None) -> _LedgerFile:
            live = self._live(current, tenant_id, worker_id, now)
            for concern, item_id in claims:
                entry = live.get(concern)
                if entry is not None and entry.item_id != item_id:
                    result.append(AlreadySeen(concern, item_id, entry))
                    continue
                if entry is None:
                    live[concern] = LedgerEntry(concern, item_id, now, now + self.window)
                result.append(Admitted(concern, item_id))
            return self._file(tenant_id, worker_id, live)

        update_document(_ADAPTER, self.path(tenant_id, worker_id), LEDGER_SCHEMA_VERSION, change, self._cache)
        return tuple(result)

    def _settle(self, tenant_id: str, worker_id: str, settled: dict[str, Settlement]) -> None:
        now = self.clock()

        def change(current: _LedgerFile | None) -> _LedgerFile:
            live = self._live(current, tenant_id, worker_id, now)
            for concern, done in settled.items():
                entry = live.get(concern)
                if entry is not None:
                    live[concern] = replace(entry, action=done.action, outcome=done.outcome, ref=done.ref)
            return self._file(tenant_id, worker_id, live)

        update_document(_ADAPTER, self.path(tenant_id, worker_id), LEDGER_SCHEMA_VERSION, change, self._cache)

    def _release(self, tenant_id: str, worker_id: str, claims: tuple[tuple[str, str], ...]) -> None:
        now = self.clock()

        def change(current: _LedgerFile | None) -> _LedgerFile:
            live = self._live(current, tenant_id, worker_id, now)
            for concern, item_id in claims:
                entry = live.get(concern)
                if entry is not None and entry.item_id == item_id:
                    del live[concern]
            return self._file(tenant_id, worker_id, live)

        update_document(_ADAPTER, self.path(tenant_id, worker_id), LEDGER_SCHEMA_VERSION, change, self._cache)

    def _entries(self, tenant_id: str, worker_id: str) -> tuple[LedgerEntry, ...]:
        current = read_document(_ADAPTER, self.path(tenant_id, worker_id), LEDGER_SCHEMA_VERSION, self._cache)
        return tuple(self._live(current, tenant_id, worker_id, self.clock()).values())

    def _live(
        self, current: _LedgerFile | None, tenant_id: str, worker_id: str, now: datetime
    ) -> dict[str, LedgerEntry]:
        if current is None:
            return {}
        if (current.tenant_id, current.worker_id) != (tenant_id, worker_id):
            owner, wanted = f"{current.tenant_id}/{current.worker_id}", f"{tenant_id}/{worker_id}"
            raise HeartbeatFileError(self.path(tenant_id, worker_id), f"belongs to {owner}, not {wanted}")
        ordered = sorted(current.entries, key=lambda e: e.first_seen_at)
        return {e.concern: e for e in ordered if e.expires_at > now}

    def _file(self, tenant_id: str, worker_id: str, live: dict[str, LedgerEntry]) -> _LedgerFile:
        entries = sorted(live.values(), key=lambda e: e.first_seen_at)[-self.max_entries :]
        return _LedgerFile(LEDGER_SCHEMA_VERSION, tenant_id, worker_id, tuple(entries))


def describe_entry(entry: LedgerEntry) -> dict[str, Any]:
    return {
        "concern": entry.concern,
        "item_id": entry.item_id,
        "first_seen_at": entry.first_seen_at.isoformat(),
        "expires_at": entry.expires_at.isoformat(),
        "action": entry.action,
        "outcome": entry.outcome,
        "ref": entry.ref,
    }
