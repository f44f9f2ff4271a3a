"""HeartbeatRunner.run_once: one heartbeat of one worker (seed §3.5).

::

    claim up to batch_size items ── none: return (no model call, no file written)
      └─ AttentionLedger.admit: a concern another item took up within its window ─▶ consumed as duplicate
      └─ HeartbeatStrategy.decide_action(item)
           a worker with context spaces on: the fact is gathered into its space instead, and only a
                    space whose evidence reached the threshold starts a task (docs/context-spaces.md)
           summary  ─▶ one main-session cognition turn for all of them ─▶ reported | silent | failed
           task     ─▶ a standard task through the router (runs on in the background)
           isolated ─▶ an isolated run in its own thread, reporting back to the main session
      └─ consume / fail each item through InboxAggregate
      └─ heartbeat meta: cursor, open concerns, task refs, counters

Task and isolated runs are started here and followed in background tasks this runner owns; their
items are consumed once the router has accepted the run (its RunRecord exists). A summary turn that
fails releases its concerns and fails its items, so they are retried with the inbox's backoff.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Final, Literal, assert_never

from genworker.autonomy.heartbeat.answer import NeedsAttention, NothingToReport, Unreadable, parse_answer
from genworker.autonomy.heartbeat.config import HeartbeatSettings
from genworker.autonomy.heartbeat.errors import HeartbeatFileError
from genworker.autonomy.heartbeat.ledger import Admitted, AlreadySeen, AttentionLedger, Settlement, concern_of
from genworker.autonomy.heartbeat.main_session import MainSessionHeartbeat
from genworker.autonomy.heartbeat.meta import (
    HeartbeatCursor,
    HeartbeatMeta,
    HeartbeatMetaStore,
    LastRun,
    OpenConcern,
    RunKind,
    TaskRef,
)
from genworker.autonomy.heartbeat.notice import AttentionReport, NotifyOwner, report_priority
from genworker.autonomy.heartbeat.outcomes import (
    HeartbeatReport,
    ItemAction,
    ItemOutcome,
    ItemResult,
    Reported,
    Silent,
    SummaryFailed,
    SummaryOutcome,
)
from genworker.autonomy.heartbeat.prompts import isolated_prompt, summary_prompt, task_prompt, title_of
from genworker.autonomy.heartbeat.strategy import (
    Decision,
    DefaultHeartbeatStrategy,
    Dismiss,
    HeartbeatStrategy,
    RunIsolated,
    SubmitTask,
    Summarize,
    preferred_skills,
)
from genworker.autonomy.inbox import InboxAggregate, InboxError, InboxItem
from genworker.autonomy.spaces import Candidate, Gathered, SpaceService
from genworker.bus import EventBus, EventBusError, new_event
from genworker.observability.metrics import record_heartbeat
from genworker.worker.context.tokens import truncate_tokens
from genworker.worker.governance.errors import GovernanceInputError
from genworker.worker.governance.evidence import evidence_from
from genworker.worker.governance.models import SourceType
from genworker.worker.router import (
    RouteAccepted,
    RouteDone,
    RouteError,
    RouteRequest,
    RouterEvent,
    WorkerRouter,
    run_to_end,
)
from genworker.worker.skill_matcher import SkillMatcher
from genworker.workspace.snapshot import Worker

__all__ = [
    "HEARTBEAT_THREAD",
    "TOPIC_COMPLETED",
    "TOPIC_ISOLATED_REPORTED",
    "TOPIC_REPORTED",
    "HeartbeatRunner",
]

log = logging.getLogger("genworker.heartbeat")

HEARTBEAT_THREAD: Final = "heartbeat"  # the summary turns' thread: one turn at a time per tenant
TOPIC_REPORTED: Final = "heartbeat.reported"
TOPIC_ISOLATED_REPORTED: Final = "heartbeat.isolated_reported"
TOPIC_COMPLETED: Final = "heartbeat.completed"
SENSOR_SOURCES: Final = frozenset({"webhook", "workspace_file", "git", "email"})
RESULT_TOKENS: Final = 120  # an isolated run's report back


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class _Claim:
    item: InboxItem
    concern: str


@dataclass(slots=True)
class _Batch:
    """What one heartbeat decided for its admitted items, as it goes."""

    results: dict[str, ItemResult] = field(default_factory=dict)
    summarise: list[tuple[_Claim, Summarize]] = field(default_factory=list)
    started: list[TaskRef] = field(default_factory=list)
    quiet: list[tuple[_Claim, ItemAction, ItemOutcome, str]] = field(default_factory=list)  # no model call

    def ran(self, result: ItemResult, ref: TaskRef | None) -> None:
        self.results[result.item_id] = result
        self.started.extend([ref] if ref is not None else [])


class HeartbeatRunner:
    def __init__(
        self,
        router: WorkerRouter,
        inbox: InboxAggregate,
        ledger: AttentionLedger,
        meta: HeartbeatMetaStore,
        settings: HeartbeatSettings,
        *,
        main: MainSessionHeartbeat | None = None,
        strategy: HeartbeatStrategy | None = None,
        bus: EventBus | None = None,
        clock: Callable[[], datetime] = _utc_now,
        owner: str | None = None,
    ) -> None:
        self.router = router
        self.inbox = inbox
        self.ledger = ledger
        self.meta = meta
        self.settings = settings
        self.main = main or MainSessionHeartbeat(router.sessions)
        self.strategy: HeartbeatStrategy = strategy or DefaultHeartbeatStrategy()
        self.bus = bus
        self.notify_owner: NotifyOwner | None = None  # reports that need attention go to the owner (composition)
        self.spaces: SpaceService | None = None  # facts of workers that opted in go through context spaces
        self.clock = clock
        self.owner = owner or f"heartbeat-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._runs: dict[str, asyncio.Task[None]] = {}
        # run id -> (state, finished_at, reported) of a run that ended before its beat recorded its ref
        self._ended: dict[str, tuple[str, datetime, bool]] = {}
        self._matcher = SkillMatcher()
        self._purged: dict[tuple[str, str], datetime] = {}

    # -- one heartbeat -----------------------------------------------------------------

    async def run_once(self, tenant_id: str, worker_id: str) -> HeartbeatReport:
        """One heartbeat of the worker; runs of the same worker never overlap in this process."""
        async with self._locks.setdefault((tenant_id, worker_id), asyncio.Lock()):
            started = self.clock()
            worker = self.router.registry.worker(tenant_id, worker_id)
            if worker is None:
                return HeartbeatReport(tenant_id, worker_id, started, skipped="the worker is not loaded")
            items = await self.inbox.claim(
                tenant_id, worker_id, self.owner, limit=self.settings.batch_size, lease_s=self.settings.lease_s
            )
            if not items:
                record_heartbeat("silent")
                await self._purge(tenant_id, worker_id, started)
                return HeartbeatReport(tenant_id, worker_id, started)
            try:
                report = await self._process(worker, items, started)
            except Exception as exc:  # e.g. an unreadable ledger: say why on the items, not only in the log
                record_heartbeat("failed")
                for item in items:
                    await self._fail(item, f"heartbeat failed: {type(exc).__name__}: {exc}", retry=True, quiet=True)
                raise
            record_heartbeat(_metric_outcome(report))
            await self._purge(tenant_id, worker_id, started)
            return report

    async def _purge(self, tenant_id: str, worker_id: str, now: datetime) -> None:
        """Consumed items past their retention go, at most once per `purge_every` per worker."""
        last = self._purged.get((tenant_id, worker_id))
        if last is not None and now - last < self.settings.purge_every:
            return
        self._purged[(tenant_id, worker_id)] = now
        try:
            purged = await self.inbox.purge_consumed(tenant_id, worker_id, self.settings.inbox_retention)
        except Exception:  # housekeeping never fails a heartbeat
            log.exception("[Heartbeat] %s/%s: purging consumed inbox items failed", tenant_id, worker_id)
            return
        if purged:
            log.info("[Heartbeat] %s/%s: purged %d consumed inbox items", tenant_id, worker_id, purged)

    async def _process(self, worker: Worker, items: Sequence[InboxItem], started: datetime) -> HeartbeatReport:
        claims = [_Claim(item, concern_of(item)) for item in items]
        admissions = await self.ledger.admit(
            worker.tenant_id, worker.worker_id, [(c.concern, c.item.item_id) for c in claims]
        )
        batch = _Batch()
        for claim, admission in zip(claims, admissions, strict=True):
            match admission:
                case AlreadySeen(entry=entry):
                    reason = f"concern already taken up by {entry.item_id} within the attention window"
                    batch.quiet.append((claim, "duplicate", "duplicate", reason))
                case Admitted():
                    await self._take(worker, claim, batch)
                case _:
                    assert_never(admission)
        results, summarise, quiet = batch.results, batch.summarise, batch.quiet
        errors = await self._consume_many([c.item for c, _, _, _ in quiet])
        for (claim, action, outcome, reason), error in zip(quiet, errors, strict=True):
            item_id = claim.item.item_id
            results[item_id] = ItemResult(item_id, claim.concern, action, outcome, reason, error=error)
        summary: SummaryOutcome | None = None
        if summarise:
            summary = await self._summarize(worker, [c for c, _ in summarise], started)
            for result in await self._settle_summary(worker, summarise, summary):
                results[result.item_id] = result
        ordered = tuple(results[item.item_id] for item in items)
        report = HeartbeatReport(worker.tenant_id, worker.worker_id, started, len(items), ordered, summary)
        await self._record(report, claims, batch.started)
        return report

    async def _take(self, worker: Worker, claim: _Claim, batch: _Batch) -> None:
        """Act on one admitted item: into the batch's summary, a run, or the quietly consumed."""
        decision = self.strategy.decide_action(claim.item, worker.persona.heartbeat)
        if self._gathers(claim.item, decision):
            match await self._gather(worker, claim, decision):
                case str() as reason:
                    batch.quiet.append((claim, "space", "gathered", reason))
                case (result, ref):
                    batch.ran(result, ref)
            return
        match decision:
            case Summarize():
                batch.summarise.append((claim, decision))
            case SubmitTask() | RunIsolated():
                batch.ran(*await self._start(worker, claim, decision))
            case Dismiss(reason=reason):
                batch.quiet.append((claim, "dismiss", "dismissed", reason))
            case _:
                assert_never(decision)

    # -- the summary turn ----------------------------------------------------------------

    async def _summarize(self, worker: Worker, claims: Sequence[_Claim], now: datetime) -> SummaryOutcome:
        try:
            meta = await self.meta.get(worker.tenant_id, worker.worker_id)
        except HeartbeatFileError as exc:  # the meta is a view: the turn goes on without the open concerns
            log.error("[Heartbeat] %s", exc)
            meta = None
        items = [c.item for c in claims]
        req = RouteRequest(
            worker.tenant_id,
            worker.worker_id,
            summary_prompt(items, meta.open_concerns if meta else (), item_tokens=self.settings.item_tokens),
            "heartbeat",
            items[0].item_id if len(items) == 1 else f"{items[0].item_id}+{len(items) - 1}",
            HEARTBEAT_THREAD,
            conversational=False,
            skill_id=self._matcher.match(worker, "").skill_id,  # the worker's default skill, never a keyword pick
            history=await self.main.history(worker.tenant_id, worker.worker_id),
        )
        try:
            done = await _route_to_end(self.router.route_stream(req))
        except RouteError as exc:
            return SummaryFailed(f"{exc.code}: {exc}", retry=False)
        except Exception as exc:  # a provider or store failure: the items are retried later
            log.exception("[Heartbeat] %s/%s: summary turn failed", worker.tenant_id, worker.worker_id)
            return SummaryFailed(f"{type(exc).__name__}: {exc}", retry=True)
        run_id, result = done.record.run_id, done.result
        if result.status != "completed":
            detail = result.error or result.error_code or "no output"
            return SummaryFailed(f"summary run {result.status}: {detail}", result.status != "approval_required", run_id)
        answer = parse_answer(result.output)
        match answer:
            case NothingToReport():
                return Silent(run_id)
            case NeedsAttention(message=message):
                stored = await self.main.say(worker.tenant_id, worker.worker_id, message, run_id=run_id, now=now)
                item_ids = [c.item.item_id for c in claims]
                await self._publish(TOPIC_REPORTED, worker, message=stored, run_id=run_id, item_ids=item_ids)
                report = AttentionReport(stored, run_id, tuple(item_ids), report_priority(items))
                return Reported(stored, run_id, await self._notify_owner(worker, report))
            case Unreadable(error=error):
                return SummaryFailed(error, retry=True, run_id=run_id)
            case _:
                assert_never(answer)

    async def _notify_owner(self, worker: Worker, report: AttentionReport) -> str | None:
        """Take the report to the owner (or into the brief); never fails the heartbeat: the report
        is in the main session and on the bus whatever happens here."""
        if self.notify_owner is None:
            return None
        try:
            return await self.notify_owner(worker, report)
        except Exception as exc:
            log.exception("[Heartbeat] %s/%s: the owner was not notified of run %s",
                          worker.tenant_id, worker.worker_id, report.run_id)  # fmt: skip
            return f"failed: {type(exc).__name__}: {exc}"

    async def _settle_summary(
        self, worker: Worker, summarised: Sequence[tuple[_Claim, Summarize]], summary: SummaryOutcome
    ) -> list[ItemResult]:
        """Consume or fail the items of one summary turn; one ledger write for all of them."""
        results = []
        match summary:
            case Reported(run_id=run_id) | Silent(run_id=run_id):
                outcome: ItemOutcome = "reported" if isinstance(summary, Reported) else "silent"
                errors = await self._consume_many([claim.item for claim, _ in summarised])
                for (claim, decision), error in zip(summarised, errors, strict=True):
                    results.append(_summary_result(claim, decision, outcome, run_id, error))
                done = Settlement("summary", outcome, run_id)
                await self.ledger.settle(worker.tenant_id, worker.worker_id, {c.concern: done for c, _ in summarised})
            case SummaryFailed(error=error, retry=retry, run_id=run_id):
                claims = [(c.concern, c.item.item_id) for c, _ in summarised]
                await self.ledger.release(worker.tenant_id, worker.worker_id, claims)
                for claim, decision in summarised:
                    await self._fail(claim.item, error, retry=retry)
                    results.append(_summary_result(claim, decision, "failed", run_id, error))
            case _:
                assert_never(summary)
        return results

    # -- context spaces ----------------------------------------------------------------------

    def _gathers(self, item: InboxItem, decision: Decision) -> bool:
        return self.spaces is not None and not isinstance(decision, Dismiss) and self.spaces.gathers(item)

    async def _gather(
        self, worker: Worker, claim: _Claim, decision: Decision
    ) -> str | tuple[ItemResult, TaskRef | None]:
        """File the fact into its space: the reason it was only gathered, or the result of the task
        its space's evidence called for. A failure fails the item for a retry."""
        assert self.spaces is not None
        item = claim.item
        try:
            absorbed = await self.spaces.absorb(item, actionable=isinstance(decision, SubmitTask | RunIsolated))
        except Exception as exc:  # the model unreachable, an unreadable space file: the fact is retried
            why = f"context space routing failed: {type(exc).__name__}: {exc}"
            log.warning("[Heartbeat] %s/%s: %s", item.tenant_id, item.worker_id, why)
            await self.ledger.release(item.tenant_id, item.worker_id, [(claim.concern, item.item_id)])
            await self._fail(item, why, retry=True)
            return ItemResult(item.item_id, claim.concern, "space", "failed", "context spaces", error=why), None
        match absorbed:
            case Gathered(reason=reason):
                return reason
            case Candidate():
                return await self._start(worker, claim, SubmitTask(absorbed.reason, preferred_skills(item)), absorbed)
            case _:
                assert_never(absorbed)

    # -- tasks and isolated runs -------------------------------------------------------------

    async def _start(
        self, worker: Worker, claim: _Claim, decision: SubmitTask | RunIsolated, space: Candidate | None = None
    ) -> tuple[ItemResult, TaskRef | None]:
        item = claim.item
        kind: RunKind = "isolated" if isinstance(decision, RunIsolated) else "task"
        main_key = self.main.key(worker.worker_id) if kind == "isolated" else None
        try:
            request = self._run_request(worker, item, decision, main_key)
            if space is not None:  # the space's task: its text, its sources, once per candidate
                evidence = replace(request.evidence, confidence=space.candidate.score, sources=space.candidate.sources)
                key = f"space:{space.candidate.task_id}"
                request = replace(request, text=space.text, evidence=evidence, idempotency_key=key)
            stream = self.router.route_stream(request)
            accepted = await anext(stream)
        except Exception as exc:
            # a route error or malformed evidence in the payload is a configuration problem: no retry
            retry = not isinstance(exc, RouteError | GovernanceInputError)
            why = f"{exc.code}: {exc}" if isinstance(exc, RouteError) else f"{type(exc).__name__}: {exc}"
            await self.ledger.release(item.tenant_id, item.worker_id, [(claim.concern, item.item_id)])
            await self._fail(item, why, retry=retry)
            return ItemResult(item.item_id, claim.concern, kind, "failed", decision.reason, error=why), None
        assert isinstance(accepted, RouteAccepted)
        ref = TaskRef(
            kind,
            item.item_id,
            claim.concern,
            accepted.run_id,
            accepted.task_id,
            accepted.thread_id,
            self.clock(),
            main_session_key=main_key,
        )
        task = asyncio.create_task(self._follow(worker, item, ref, stream), name=f"heartbeat-{kind}:{ref.run_id}")
        self._runs[ref.run_id] = task
        task.add_done_callback(lambda _: self._runs.pop(ref.run_id, None))
        if space is not None:
            await self._submitted(space, ref.run_id)
        error = await self._consume(item)
        await self.ledger.settle(
            item.tenant_id, item.worker_id, {claim.concern: Settlement(kind, "submitted", ref.run_id)}
        )
        return ItemResult(item.item_id, claim.concern, kind, "submitted", decision.reason, ref.run_id, error), ref

    def _run_request(
        self, worker: Worker, item: InboxItem, decision: SubmitTask | RunIsolated, main_key: str | None
    ) -> RouteRequest:
        tokens = self.settings.item_tokens
        goal_id = _text(item.payload.get("goal_id"))
        source: SourceType
        if main_key is not None:
            source, source_id, thread = "heartbeat", item.item_id, f"iso-{uuid.uuid4().hex[:16]}"
            text = isolated_prompt(item, decision.reason, main_key, item_tokens=tokens)
        else:
            source = (
                "goal"
                if goal_id and item.event_type.startswith("goal.")
                else "sensor"
                if item.source_type in SENSOR_SOURCES
                else "event"
            )
            # a sensor's facts keep its key as source_id: governance looks up the sensor's require_approval
            source_id, thread = (item.source_id if source == "sensor" else item.item_id), None
            text = task_prompt(item, decision.reason, item_tokens=tokens)
        return RouteRequest(
            worker.tenant_id,
            worker.worker_id,
            text,
            source,
            source_id,
            thread,
            conversational=False,
            preferred_skill_ids=decision.preferred_skill_ids,
            duty_id=_text(item.metadata.get("duty_id")),
            trigger_id=_text(item.metadata.get("trigger_id")),
            goal_id=goal_id,
            evidence=evidence_from(item.payload),  # raises GovernanceInputError naming a malformed field
        )

    async def _submitted(self, space: Candidate, run_id: str) -> None:
        s, c = space.space, space.candidate
        if self.spaces is None:
            return
        try:
            await self.spaces.submitted(s.tenant_id, s.worker_id, s.space_id, c.task_id, run_id)
        except Exception:  # the run is started; a retry of the item finds it again by its idempotency key
            log.exception("[Heartbeat] %s: run %s not recorded on %s", s.space_id, run_id, c.task_id)

    async def _follow(self, worker: Worker, item: InboxItem, ref: TaskRef, stream: AsyncIterator[RouterEvent]) -> None:
        """Drive the accepted run to its end, then record it (and report an isolated run back)."""
        state, output = "failed", ""
        try:
            done = await _route_to_end(stream)
            state = str(done.record.state)
            output = done.result.output or done.result.error or done.result.error_code or ""
        except Exception as exc:
            log.exception("[Heartbeat] %s run %s of %s/%s broke", ref.kind, ref.run_id, ref.item_id, worker.worker_id)
            output = f"{type(exc).__name__}: {exc}"
        now = self.clock()
        reported = False
        if ref.kind == "isolated":
            reported = await self._report_back(worker, item, ref, state, output, now)

        def change(meta: HeartbeatMeta) -> HeartbeatMeta:
            if not any(r.run_id == ref.run_id for r in meta.task_refs):  # its beat has not recorded it yet:
                self._ended[ref.run_id] = (state, now, reported)  # `_record` applies this (same file lock)
                return meta
            refs = tuple(
                replace(r, run_state=state, finished_at=now, reported=reported) if r.run_id == ref.run_id else r
                for r in meta.task_refs
            )
            closed = state == "completed"
            concerns = tuple(c for c in meta.open_concerns if not (closed and c.run_id == ref.run_id))
            return replace(meta, task_refs=refs, open_concerns=concerns)

        await self.meta.update(worker.tenant_id, worker.worker_id, now, change)

    async def _report_back(
        self, worker: Worker, item: InboxItem, ref: TaskRef, state: str, output: str, now: datetime
    ) -> bool:
        short = truncate_tokens(" ".join(output.split()) or "(no output)", RESULT_TOKENS, what="result")
        text = f"Isolated run {ref.run_id} on {title_of(item)} ended {state}: {short}"
        try:
            stored = await self.main.say(worker.tenant_id, worker.worker_id, text, run_id=ref.run_id, now=now)
        except Exception:
            log.exception("[Heartbeat] isolated run %s could not report back to %s", ref.run_id, ref.main_session_key)
            return False
        await self._publish(
            TOPIC_ISOLATED_REPORTED, worker, message=stored, run_id=ref.run_id, state=state, item_id=item.item_id
        )
        return True

    async def wait_runs(self, run_ids: Iterable[str] | None = None) -> None:
        """Until the given background runs (default: all) have ended and been recorded."""
        wanted = list(self._runs.values()) if run_ids is None else [t for r in run_ids if (t := self._runs.get(r))]
        if wanted:
            await asyncio.gather(*(asyncio.shield(t) for t in wanted), return_exceptions=True)

    async def close(self, grace_s: float) -> None:
        """Let background runs finish for `grace_s` seconds, then cancel the rest (their RunRecords
        say `running` until the next start marks them interrupted)."""
        try:
            async with asyncio.timeout(grace_s):
                await self.wait_runs()
        except TimeoutError:
            log.warning("[Heartbeat] %d runs still going after %.1f s at shutdown: cancelled", len(self._runs), grace_s)
        tasks = list(self._runs.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    @property
    def running(self) -> tuple[str, ...]:
        return tuple(self._runs)

    # -- bookkeeping -------------------------------------------------------------------

    async def _record(self, report: HeartbeatReport, claims: Sequence[_Claim], refs: Sequence[TaskRef]) -> None:
        now = self.clock()
        window = self.settings.attention_window
        by_id = {c.item.item_id: c.item for c in claims}
        opened = tuple(
            OpenConcern(r.concern, r.item_id, r.action, title_of(by_id[r.item_id]), now, now + window, r.run_id)
            for r in report.items
            if r.outcome in ("reported", "submitted")
        )
        newest = max((c.item for c in claims), key=lambda i: (i.created_at, i.item_id))
        outcomes = Counter(r.outcome for r in report.items)
        actions = Counter(r.action for r in report.items if r.outcome == "submitted")
        summary = _summary_kind(report.summary)
        last = LastRun(
            now,
            report.claimed,
            summary,
            getattr(report.summary, "run_id", None),
            outcomes["duplicate"],
            actions["task"],
            actions["isolated"],
            outcomes["failed"],
        )

        def change(meta: HeartbeatMeta) -> HeartbeatMeta:
            ended = {r.run_id: self._ended[r.run_id] for r in refs if r.run_id in self._ended}
            recorded = tuple(
                replace(r, run_state=e[0], finished_at=e[1], reported=e[2]) if (e := ended.get(r.run_id)) else r
                for r in refs
            )
            still_open = tuple(c for c in opened if ended.get(c.run_id or "", ("",))[0] != "completed")
            c, cur = meta.counters, meta.cursor
            counters = replace(
                c,
                model_turns=c.model_turns + report.model_turns,
                reports=c.reports + (summary == "reported"),
                silent=c.silent + (summary == "silent"),
                duplicates=c.duplicates + outcomes["duplicate"],
                tasks=c.tasks + actions["task"],
                isolated=c.isolated + actions["isolated"],
                failures=c.failures + outcomes["failed"],
            )
            cursor = HeartbeatCursor(now, newest.created_at, newest.item_id, cur.runs + 1, cur.items + report.claimed)
            return replace(
                meta,
                cursor=cursor,
                counters=counters,
                open_concerns=(*meta.open_concerns, *still_open),
                task_refs=(*meta.task_refs, *recorded),
                last_run=last,
            )

        try:
            await self.meta.update(report.tenant_id, report.worker_id, now, change)
        except Exception:  # the items are already settled; the meta is a view of them
            log.exception("[Heartbeat] %s/%s: heartbeat meta not updated", report.tenant_id, report.worker_id)
        for r in refs:
            self._ended.pop(r.run_id, None)
        worker_key = {"tenant_id": report.tenant_id, "worker_id": report.worker_id}
        await self._publish_raw(TOPIC_COMPLETED, worker_key, {"claimed": report.claimed, "summary": summary})

    async def _consume(self, item: InboxItem) -> str | None:
        try:
            await self.inbox.consume(item, self.owner)
        except InboxError as exc:  # the lease was lost: another runner has the item now
            log.warning("[Heartbeat] could not consume %s: %s", item.item_id, exc)
            return str(exc)
        return None

    async def _consume_many(self, items: Sequence[InboxItem]) -> list[str | None]:
        """Consume items together (one flush); per item None, or why it could not be consumed."""
        if not items:
            return []
        errors: list[str | None] = []
        for item, result in zip(items, await self.inbox.consume_many(items, self.owner), strict=True):
            if isinstance(result, InboxError):  # the lease was lost: another runner has the item now
                log.warning("[Heartbeat] could not consume %s: %s", item.item_id, result)
                errors.append(str(result))
            else:
                errors.append(None)
        return errors

    async def _fail(self, item: InboxItem, error: str, *, retry: bool, quiet: bool = False) -> None:
        try:
            await self.inbox.fail(item, self.owner, error, retry=retry)
        except InboxError as exc:  # quiet: items this run already settled are expected here
            log.log(logging.DEBUG if quiet else logging.WARNING, "[Heartbeat] could not fail %s: %s", item.item_id, exc)

    async def _publish(self, topic: str, worker: Worker, **payload: object) -> None:
        await self._publish_raw(topic, {"tenant_id": worker.tenant_id, "worker_id": worker.worker_id}, payload)

    async def _publish_raw(self, topic: str, who: dict[str, str], payload: dict[str, object]) -> None:
        if self.bus is None:
            return
        tenant_id, worker_id = who["tenant_id"], who["worker_id"]
        event = new_event(topic, source="heartbeat", tenant_id=tenant_id, worker_id=worker_id, payload=payload)
        try:
            await self.bus.publish(event)
        except EventBusError as exc:
            log.warning("[Heartbeat] event %s not published: %s", topic, exc)


async def _route_to_end(stream: AsyncIterator[RouterEvent]) -> RouteDone:
    done = await run_to_end(stream)
    if done is None:
        raise RuntimeError("the router ended without a result")
    return done


def _metric_outcome(report: HeartbeatReport) -> Literal["ran", "silent", "failed"]:
    outcomes = {r.outcome for r in report.items}
    if outcomes & {"reported", "submitted"}:
        return "ran"
    return "failed" if "failed" in outcomes else "silent"


def _summary_result(
    claim: _Claim, decision: Summarize, outcome: ItemOutcome, run_id: str | None, error: str | None
) -> ItemResult:
    return ItemResult(claim.item.item_id, claim.concern, "summary", outcome, decision.reason, run_id, error)


def _summary_kind(summary: SummaryOutcome | None) -> Literal["reported", "silent", "failed"] | None:
    match summary:
        case Reported():
            return "reported"
        case Silent():
            return "silent"
        case SummaryFailed():
            return "failed"
        case None:
            return None
        case _:
            assert_never(summary)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None
