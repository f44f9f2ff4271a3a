"""SpaceService: a worker's sensed facts gathered into context spaces before they become tasks.

`absorb(item)` is what the heartbeat calls for a fact (when the worker opted in):

::

    ContextEvent from the item ─▶ routed (router.py) ─▶ appended to the event log
      ─▶ joined to its space (or a new / resurrected one), file + index
      ─▶ the space's fresh evidence reaches tasks.evidence_threshold and its last task run is over?
           yes: Candidate (a TaskCandidate and the task text; the heartbeat starts the run)
           no:  Gathered

Facts of one worker are absorbed one at a time in this process (a lock per worker), and every change
of a space is made under the store's lock (a file lock, or a Redis lock in the shared profile), so
processes sharing the spaces never lose one another's update. Absorbing the same item again finds
its event in a space and returns what it returned the first time, so an item retried after a crash
never lands twice.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final, assert_never

from genworker.autonomy.inbox import InboxItem
from genworker.autonomy.spaces import review as reviews
from genworker.autonomy.spaces.chooser import ChooserUnavailable
from genworker.autonomy.spaces.config import SpaceSettings
from genworker.autonomy.spaces.errors import SpaceFileError, SpaceNotFound, SpaceTransitionError
from genworker.autonomy.spaces.evidence import evidence_score, fresh_evidence, make_candidate, task_text
from genworker.autonomy.spaces.facts import event_from_item
from genworker.autonomy.spaces.file_event_log import FileEventLog
from genworker.autonomy.spaces.file_store import FileSpaceStore
from genworker.autonomy.spaces.index import Embed, SpaceIndex
from genworker.autonomy.spaces.lifecycle import DEADLINE_GRACE, join, new_space, resurrect, settle
from genworker.autonomy.spaces.merging import duplicates_of
from genworker.autonomy.spaces.models import ContextEvent, ContextSpace, Review, SpaceState, TaskCandidate
from genworker.autonomy.spaces.router import Anchored, Chosen, ContextSpaceRouter, CreateNew, Resurrect, Routing
from genworker.autonomy.spaces.store import EventLog, SpaceStore
from genworker.observability.metrics import (
    CONTEXT_SPACES,
    GaugeSample,
    record_space_created,
    record_space_route,
    record_space_route_error,
    record_space_task,
    register_collector,
    unregister_collector,
)

__all__ = ["BYPASS_SOURCES", "Absorbed", "Candidate", "Gathered", "RunOpen", "SpaceService"]

log = logging.getLogger("genworker.spaces")

BYPASS_SOURCES: Final = frozenset({"confirmation"})  # the runtime's own notices, not facts about work
BYPASS_EVENTS: Final = frozenset({"goal.proposed"})
SWEEP_EVERY: Final = timedelta(minutes=10)
_COLLECTOR: Final = "context-spaces"

RunOpen = Callable[[str, str, str], Awaitable[bool]]  # (tenant, worker, run_id) -> the run is still going


@dataclass(frozen=True, slots=True)
class Gathered:
    space_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class Candidate:
    space: ContextSpace
    candidate: TaskCandidate
    text: str  # the task the run gets

    @property
    def reason(self) -> str:
        c = self.candidate
        return f"{self.space.space_id}: evidence {c.score:.2f} from {', '.join(c.sources)} reached the threshold"


Absorbed = Gathered | Candidate


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class _Worker:
    index: SpaceIndex
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    syncing: threading.Lock = field(default_factory=threading.Lock)
    mark: int | None = None  # how far the index has followed the store's changes (a separate index)
    swept: datetime | None = None
    counts: dict[str, int] = field(default_factory=dict)


class SpaceService:
    def __init__(
        self,
        workspace: Path,
        router: ContextSpaceRouter,
        settings_of: Callable[[str, str], SpaceSettings],
        *,
        run_open: RunOpen | None = None,
        clock: Callable[[], datetime] = _utc_now,
        durable: bool = True,
        store: SpaceStore | None = None,
        log: EventLog | None = None,
        embed: Embed | None = None,
    ) -> None:
        """Files under `workspace` unless a `store` and `log` are given (Redis, in the shared profile);
        `embed` (the embeddings extra) for the workers whose `router.embeddings` is on."""
        self.workspace = workspace
        self.router = router
        self.settings_of = settings_of
        self.run_open = run_open
        self.clock = clock
        self.store: SpaceStore = store if store is not None else FileSpaceStore(workspace, durable=durable)
        self.log: EventLog = log if log is not None else FileEventLog(workspace, durable=durable)
        self.embed = embed
        self._workers: dict[tuple[str, str], _Worker] = {}

    # -- parts -------------------------------------------------------------------------------

    def _worker(self, tenant_id: str, worker_id: str) -> _Worker:
        key = (tenant_id, worker_id)
        found = self._workers.get(key)
        if found is None:
            path = self.store.index_path(tenant_id, worker_id)
            embed = self.embed if self.settings_of(tenant_id, worker_id).embeddings else None
            if embed is None and self.settings_of(tenant_id, worker_id).embeddings:
                log.warning(
                    "[Spaces] %s/%s: router.embeddings is on without the embeddings extra", tenant_id, worker_id
                )
            index = SpaceIndex(path, lambda: self.store.all(tenant_id, worker_id), embed=embed)
            found = self._workers[key] = _Worker(index)
        return found

    def index(self, tenant_id: str, worker_id: str) -> SpaceIndex:
        """Blocking: the worker's index, caught up with what other processes saved."""
        state = self._worker(tenant_id, worker_id)
        with state.syncing:
            changed = self.store.changed_since(tenant_id, worker_id, state.mark)
            if changed is not None:
                last, (state.mark, space_ids) = state.mark, changed
                if last is None or state.mark < last:  # first use, or a Redis that lost its data
                    state.index.rebuild()
                elif space_ids:
                    state.index.put(list(self._readable(tenant_id, worker_id, space_ids)))
        return state.index

    def _readable(self, t: str, w: str, space_ids: Iterable[str]) -> Iterable[ContextSpace]:
        for space_id in space_ids:
            try:
                yield self.store.load(t, w, space_id)
            except (SpaceNotFound, SpaceFileError) as exc:
                log.error("[Spaces] %s/%s %s left out of the index: %s", t, w, space_id, exc)

    def has_spaces(self, tenant_id: str, worker_id: str) -> bool:
        """Blocking: whether the worker ever had a space (without creating anything)."""
        return self.store.has_spaces(tenant_id, worker_id)

    async def exists(self, tenant_id: str, worker_id: str) -> bool:
        return await asyncio.to_thread(self.has_spaces, tenant_id, worker_id)

    async def count(self, tenant_id: str, worker_id: str) -> dict[str, int]:
        return await asyncio.to_thread(self.counts, tenant_id, worker_id)

    def gathers(self, item: InboxItem) -> bool:
        """Whether `item` goes through spaces: its worker opted in, and it is a fact about work."""
        if item.source_type in BYPASS_SOURCES or item.event_type in BYPASS_EVENTS:
            return False
        return self.settings_of(item.tenant_id, item.worker_id).enabled

    # -- absorbing a fact --------------------------------------------------------------------

    async def absorb(self, item: InboxItem, *, actionable: bool = False) -> Absorbed:
        """Route `item`'s fact into a space; raises ChooserUnavailable when the model cannot be
        reached (retry the item later)."""
        t, w = item.tenant_id, item.worker_id
        s = self.settings_of(t, w)
        state = self._worker(t, w)
        async with state.lock:
            now = self.clock()
            event = event_from_item(item, now).model_copy(update={"actionable": actionable})
            index = await asyncio.to_thread(self.index, t, w)
            held = await asyncio.to_thread(index.space_of_event, event.event_id)
            if held is not None:
                return await asyncio.to_thread(self._again, t, w, held, event.event_id)
            await self._sweep_if_due(t, w, s, now)
            started = time.perf_counter()
            try:
                routing = await self.router.route(index, event, s, now)
            except ChooserUnavailable:
                record_space_route_error("model_unavailable")
                raise
            await asyncio.to_thread(self.log.append, event)
            space = await asyncio.to_thread(self._apply, routing, event, s, now)
            _record(routing, time.perf_counter() - started)
            return await self._candidate(space, event, s, now)

    def _again(self, t: str, w: str, space_id: str, event_id: str) -> Absorbed:
        """The item was absorbed before (a retry): its unsubmitted candidate again, if it made one."""
        space = self.store.load(t, w, space_id)
        for candidate in space.candidates:
            if event_id in candidate.evidence_events and candidate.run_id is None:
                return Candidate(space, candidate, task_text(space, candidate))
        return Gathered(space_id, f"already gathered into {space_id}")

    def _apply(self, routing: Routing, event: ContextEvent, s: SpaceSettings, now: datetime) -> ContextSpace:
        """The fact in its space (saved), then that space merged into an older one it duplicates;
        the space the fact is in at the end."""
        t, w = event.tenant_id, event.worker_id
        with self.store.locked(t, w):
            space = self._routed(routing, event, s, now)
            self.store.save(space)
            self._put(t, w, [space])
            for target_id, score in duplicates_of(self.index(t, w), space, s, now):
                target = self.store.load(t, w, target_id)
                if target.review != "confirmed":
                    continue
                merged, space = reviews.refile(space, target, now, s, similarity=score)
                for changed in (merged, space):
                    self.store.save(changed)
                self._put(t, w, [merged, space])
                break
        return space

    def _routed(self, routing: Routing, event: ContextEvent, s: SpaceSettings, now: datetime) -> ContextSpace:
        t, w = event.tenant_id, event.worker_id
        match routing:
            case Anchored(space_id=space_id, anchor=anchor):
                return join(self.store.load(t, w, space_id), event, now, s, f"anchor {anchor}")
            case Chosen(space_id=space_id, confidence=confidence, reason=reason):
                return join(self.store.load(t, w, space_id), event, now, s, f"model {confidence:.2f}: {reason}")
            case Resurrect(space_id=space_id, via=via, similarity=similarity):
                old = settle(self.store.load(t, w, space_id), now, s)
                if old.state is SpaceState.ACTIVE:  # taken back meanwhile (pinned, or another fact)
                    return join(old, event, now, s, f"{via}: {routing.reason}")
                return resurrect(old, event, now, s, similarity=similarity, via=via)
            case CreateNew(pending=pending, confidence=confidence, reason=reason, suggested=suggested):
                record_space_created()
                review: Review = "pending" if pending else "confirmed"
                space_id = self.store.next_id(t, w)
                return new_space(
                    space_id, event, now, s, review=review, confidence=confidence, reason=reason, suggested=suggested
                )
            case _:
                assert_never(routing)

    async def _candidate(self, space: ContextSpace, event: ContextEvent, s: SpaceSettings, now: datetime) -> Absorbed:
        t, w = space.tenant_id, space.worker_id
        fresh = fresh_evidence(space)
        if space.review == "merged" or not fresh or all(e.source == "screen" for e in fresh):
            return Gathered(space.space_id, f"gathered into {space.space_id}")
        score = evidence_score(fresh)
        if score < s.evidence_threshold:
            return Gathered(
                space.space_id, f"gathered into {space.space_id}: evidence {score:.2f} < {s.evidence_threshold:.2f}"
            )
        last = space.candidates[-1] if space.candidates else None
        if last is not None and last.run_id is None:  # not submitted yet: the item that made it is retried
            return Gathered(space.space_id, f"gathered into {space.space_id}: {last.task_id} is not submitted yet")
        if last is not None and self.run_open is not None and await self.run_open(t, w, str(last.run_id)):
            return Gathered(space.space_id, f"gathered into {space.space_id}: its run {last.run_id} is going")

        def add() -> tuple[ContextSpace, TaskCandidate]:
            with self.store.locked(t, w):
                current = self.store.load(t, w, space.space_id)
                candidate = make_candidate(current, fresh_evidence(current), score, now)
                stored = current.model_copy(update={"candidates": (*current.candidates, candidate)})
                self.store.save(stored)
                self._put(t, w, [stored])
            return stored, candidate

        stored, candidate = await asyncio.to_thread(add)
        record_space_task()
        return Candidate(stored, candidate, task_text(stored, candidate))

    async def submitted(self, tenant_id: str, worker_id: str, space_id: str, task_id: str, run_id: str) -> None:
        """The task path accepted the candidate: its run is recorded on it."""

        def record() -> None:
            with self.store.locked(tenant_id, worker_id):
                space = self.store.load(tenant_id, worker_id, space_id)
                candidates = tuple(
                    c.model_copy(update={"run_id": run_id}) if c.task_id == task_id else c for c in space.candidates
                )
                stored = space.model_copy(update={"candidates": candidates})
                self.store.save(stored)
                self._put(tenant_id, worker_id, [stored])

        await asyncio.to_thread(record)

    # -- reading and reviewing ---------------------------------------------------------------

    async def cards(
        self,
        tenant_id: str,
        worker_id: str,
        *,
        state: SpaceState | None = None,
        review: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[dict[str, object]]:
        def read() -> list[dict[str, object]]:
            return self.index(tenant_id, worker_id).cards(state=state, review=review, limit=limit, offset=offset)

        return await asyncio.to_thread(read)

    async def get(self, tenant_id: str, worker_id: str, space_id: str) -> ContextSpace:
        return await asyncio.to_thread(self.store.load, tenant_id, worker_id, space_id)

    async def events(self, tenant_id: str, worker_id: str, space_id: str) -> list[ContextEvent]:
        space = await self.get(tenant_id, worker_id, space_id)
        return await asyncio.to_thread(self.log.read, tenant_id, worker_id, space.evidence_events)

    async def confirm(self, tenant_id: str, worker_id: str, space_id: str) -> ContextSpace:
        def change(now: datetime, s: SpaceSettings) -> list[ContextSpace]:
            return [reviews.confirm(self.store.load(tenant_id, worker_id, space_id), now)]

        return (await self._review(tenant_id, worker_id, space_id, change))[0]

    async def refile(self, tenant_id: str, worker_id: str, space_id: str, target_id: str) -> list[ContextSpace]:
        """[the re-filed space, now merged; the target]."""

        def change(now: datetime, s: SpaceSettings) -> list[ContextSpace]:
            source = self.store.load(tenant_id, worker_id, space_id)
            target = self.store.load(tenant_id, worker_id, target_id)
            return list(reviews.refile(source, target, now, s))

        return await self._review(tenant_id, worker_id, space_id, change)

    async def pin(self, tenant_id: str, worker_id: str, space_id: str, on: bool | None) -> ContextSpace:
        def change(now: datetime, s: SpaceSettings) -> list[ContextSpace]:
            return [reviews.pin(self.store.load(tenant_id, worker_id, space_id), on, now, s)]

        return (await self._review(tenant_id, worker_id, space_id, change))[0]

    async def unmerge(self, tenant_id: str, worker_id: str, space_id: str) -> list[ContextSpace]:
        """[the space taken back out, confirmed again; the space it had been merged or re-filed into]."""

        def change(now: datetime, s: SpaceSettings) -> list[ContextSpace]:
            source = self.store.load(tenant_id, worker_id, space_id)
            if source.merged_into is None:
                raise SpaceTransitionError(f"{space_id} is not merged into another space")
            target = self.store.load(tenant_id, worker_id, source.merged_into)
            return list(reviews.unmerge(source, target, self.log, now, s))

        return await self._review(tenant_id, worker_id, space_id, change)

    async def revert(self, tenant_id: str, worker_id: str, space_id: str, event_id: str) -> list[ContextSpace]:
        """[the space as it was before the resurrection; the fact's new space]."""

        def change(now: datetime, s: SpaceSettings) -> list[ContextSpace]:
            space = self.store.load(tenant_id, worker_id, space_id)
            new_id = self.store.next_id(tenant_id, worker_id)
            record_space_created()
            return list(reviews.revert_resurrection(space, event_id, new_id, self.log, now, s))

        return await self._review(tenant_id, worker_id, space_id, change)

    async def _review(
        self, t: str, w: str, space_id: str, change: Callable[[datetime, SpaceSettings], list[ContextSpace]]
    ) -> list[ContextSpace]:
        s = self.settings_of(t, w)

        def apply() -> list[ContextSpace]:
            if not self.store.exists(t, w, space_id):  # before the lock: nothing made for a typo
                raise SpaceNotFound(space_id)
            with self.store.locked(t, w):
                spaces = change(self.clock(), s)
                for space in spaces:
                    self.store.save(space)
                self._put(t, w, spaces)
            return spaces

        async with self._worker(t, w).lock:
            return await asyncio.to_thread(apply)

    # -- lifecycle ---------------------------------------------------------------------------

    async def _sweep_if_due(self, t: str, w: str, s: SpaceSettings, now: datetime) -> None:
        state = self._worker(t, w)
        if state.swept is not None and now - state.swept < SWEEP_EVERY and now >= state.swept:
            return
        state.swept = now
        await asyncio.to_thread(self.sweep_now, t, w, s, now)

    def sweep_now(self, t: str, w: str, s: SpaceSettings, now: datetime) -> int:
        """Blocking: move spaces to the state their last activity and pins say; how many changed."""
        index = self.index(t, w)
        day = 86_400.0
        stale = index.stale(
            now,
            s.dormant_after_hours * 3600.0,
            s.parked_after_days * day,
            s.archive_after_days * day,
            (now - DEADLINE_GRACE).timestamp(),
        )
        if not stale:
            return 0
        changed = []
        with self.store.locked(t, w):
            for space_id in stale:
                space = self.store.load(t, w, space_id)
                settled = settle(space, now, s)
                if settled != space:
                    self.store.save(settled)
                    changed.append(settled)
            self._put(t, w, changed)
        return len(changed)

    async def sweep(self, tenant_id: str, worker_id: str) -> int:
        if not await self.exists(tenant_id, worker_id):
            return 0
        s, now = self.settings_of(tenant_id, worker_id), self.clock()
        self._worker(tenant_id, worker_id).swept = now
        return await asyncio.to_thread(self.sweep_now, tenant_id, worker_id, s, now)

    # -- bookkeeping -------------------------------------------------------------------------

    def _put(self, t: str, w: str, spaces: Iterable[ContextSpace]) -> None:
        state = self._worker(t, w)
        state.index.put(list(spaces))
        state.counts = state.index.counts()

    def counts(self, tenant_id: str, worker_id: str) -> dict[str, int]:
        """Blocking: the worker's spaces by state (and merged)."""
        state = self._worker(tenant_id, worker_id)
        state.counts = self.index(tenant_id, worker_id).counts()
        return dict(state.counts)

    def samples(self) -> list[GaugeSample]:
        """context_space_count_by_state over the workers this process has touched (no I/O)."""
        totals: dict[str, int] = {s.value: 0 for s in SpaceState}
        for state in list(self._workers.values()):
            for name, count in state.counts.items():
                if name in totals:
                    totals[name] += count
        help_text = "Context spaces by lifecycle state, summed over the workers whose spaces this process keeps."
        return [(CONTEXT_SPACES, help_text, (("state", k),), float(v)) for k, v in totals.items()]

    async def start(self, workers: Iterable[tuple[str, str]]) -> None:
        """Read the counts of the workers that have spaces, and publish them as a gauge."""

        def load() -> None:
            for t, w in workers:
                if self.settings_of(t, w).enabled or self.has_spaces(t, w):
                    self.counts(t, w)

        await asyncio.to_thread(load)
        register_collector(_COLLECTOR, self.samples)

    async def stop(self) -> None:
        unregister_collector(_COLLECTOR)
        for state in self._workers.values():
            await asyncio.to_thread(state.index.close)
        await asyncio.to_thread(self.store.close)


def _record(routing: Routing, seconds: float) -> None:
    match routing:
        case Anchored():
            path = "anchor"
        case Chosen():
            path = "model"
        case Resurrect():
            path = "resurrected"
        case CreateNew(pending=pending, usable=usable):
            path = "new_pending" if pending else "new"
            if not usable:
                record_space_route_error("unusable_answer")
        case _:
            assert_never(routing)
    record_space_route(path, seconds)
