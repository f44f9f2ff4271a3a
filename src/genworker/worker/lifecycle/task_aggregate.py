"""TaskLifecycle: the aggregate of a task and its run, and the only code that writes either.

Every command reads the run under its lock, checks the move against `TRANSITIONS`, writes the
new record (version + 1) and, when the run has ended, moves the manifest to tasks/done/.
Runners, routers, heartbeat and confirmation flows call these commands and nothing else.
Blocking reads run in a worker thread (`asyncio.to_thread`); writes through the store's
`DurableFiles.run` (on the event loop when the write journal is on: write_journal.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar, assert_never

from genworker.engine.state import GraphRecord, PlanRecord
from genworker.ids import InvalidIdError, PathEscapeError
from genworker.observability.metrics import record_run_state
from genworker.tools.journal import StepJournal, UnfinishedStep
from genworker.worker.contract_record import ContractCheck, DeliveryRecord, EscalationRecord
from genworker.worker.lifecycle.errors import (
    IllegalTransition,
    RunClosed,
    RunExists,
    TaskFileError,
    TaskLifecycleError,
)
from genworker.worker.lifecycle.store import IdempotencyClaim, TaskStore
from genworker.worker.task import (
    ChildRun,
    Deliverable,
    GoalStatus,
    GoalVerdict,
    ModelUsage,
    PendingApproval,
    RunError,
    RunFallback,
    RunRecord,
    RunRef,
    RunState,
    RunTimings,
    StateChange,
    TaskManifest,
    ToolCallRecord,
    can_transition,
)
from genworker.write_journal import DIRECT, DurableFiles

if TYPE_CHECKING:  # keeps reading and writing runs free of the model stack
    from genworker.engine.base import RunResult
    from genworker.tools.base import ToolCall

__all__ = ["RESTART_NOTE", "Clock", "RunListener", "TaskLifecycle"]

log = logging.getLogger("genworker.worker.lifecycle")

Clock = Callable[[], datetime]
Change = Callable[[RunRecord, datetime], RunRecord | None]
RunListener = Callable[[RunRecord], None]
RESTART_NOTE = "runtime restarted while running"
_RECOVERED = frozenset({RunState.RUNNING, RunState.EVALUATING})


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _ms(start: datetime | None, end: datetime) -> float | None:
    return None if start is None else round((end - start).total_seconds() * 1000, 3)


def _timed(timings: RunTimings, target: RunState, now: datetime) -> RunTimings:
    if target is RunState.RUNNING and timings.started_at is None:
        return replace(timings, started_at=now, queue_ms=_ms(timings.queued_at, now))
    if target.terminal:
        return replace(
            timings, finished_at=now, run_ms=_ms(timings.started_at, now), total_ms=_ms(timings.queued_at, now)
        )
    return timings


def _advance(run: RunRecord, target: RunState, now: datetime, note: str = "") -> RunRecord:
    """`run` moved to `target`: the transition checked, history and timings updated."""
    if not can_transition(run.state, target):
        raise IllegalTransition(run.ref, run.state, target)
    return replace(
        run,
        state=target,
        timings=_timed(run.timings, target, now),
        history=(*run.history, StateChange(now, run.state, target, note)),
        pending_approval=run.pending_approval if target is RunState.WAITING_APPROVAL else None,
    )


def _settled(run: RunRecord, result: RunResult, goal_status: GoalStatus | None, now: datetime) -> RunRecord:
    """`run` after its engine returned `result` (see docs/runs.md, "Engine results")."""
    run = replace(
        run,
        engine=result.engine or run.engine,
        model_usage=(*run.model_usage, *(ModelUsage.from_record(r) for r in result.llm_calls)),
        fallback=RunFallback.from_mapping(result.fallback) or run.fallback,
        goal_status=goal_status or run.goal_status,
    )
    output = (Deliverable("text", content=result.output),) if result.output else ()
    match result.status:
        case "completed":
            moved = _advance(run, RunState.COMPLETED, now)
            return replace(moved, deliverables=(*run.deliverables, *output))
        case "condition_stopped":
            moved = _advance(run, RunState.COMPLETED, now, "stop condition met")
            return replace(
                moved, deliverables=(*run.deliverables, *output), goal_status=goal_status or GoalStatus.NOT_APPLICABLE
            )
        case "supervisor_paused":  # a person resumes it (its confirmation of kind pause) or it is cancelled
            moved = _advance(run, RunState.PAUSED, now, result.error or "paused by a supervisor")
            partial = tuple(replace(d, title="partial output") for d in output)
            return replace(moved, deliverables=(*run.deliverables, *partial))
        case "supervisor_stopped":  # a supervisor's check ended it: not done, not failed (docs/supervisor.md)
            moved = _advance(run, RunState.CANCELLED, now, "supervisor_stopped")
            partial = tuple(replace(d, title="partial output") for d in output)
            error = RunError("supervisor_stopped", result.error or result.output or "stopped by a supervisor")
            return replace(moved, deliverables=(*run.deliverables, *partial), error=error)
        case "max_turns_exceeded" | "budget_exceeded":
            moved = _advance(run, RunState.BUDGET_EXCEEDED, now, result.status)
            partial = tuple(replace(d, title="partial output") for d in output)
            limit = "turn limit" if result.status == "max_turns_exceeded" else "token budget"
            error = RunError(result.status, result.error or f"the engine reached its {limit}")
            return replace(moved, deliverables=(*run.deliverables, *partial), error=error)
        case "waiting":  # a tool parked the task (e.g. wait_for_event); a WAITING plan resumes it
            return _advance(run, RunState.PAUSED, now, result.output or "waiting")
        case "approval_required":
            if result.pending_approval is None:
                raise TaskLifecycleError(f"run {run.ref}: approval_required result without a pending tool call")
            return _waiting(run, result.pending_approval, result.error, now)
        case "failed":
            moved = _advance(run, RunState.FAILED, now, result.error_code)
            return replace(moved, error=RunError(result.error_code or "engine_failed", result.error))
        case _:
            assert_never(result.status)


def _waiting(run: RunRecord, call: ToolCall, reason: str, now: datetime) -> RunRecord:
    pending = PendingApproval(call_id=call.id, tool=call.name, requested_at=now, reason=reason)
    return replace(_advance(run, RunState.WAITING_APPROVAL, now, f"approval for {call.name}"), pending_approval=pending)


class TaskLifecycle:
    """Commands on tasks and runs under `workspace_root` (see docs/runs.md)."""

    def __init__(
        self, workspace_root: Path, *, clock: Clock = _utc_now, owner: str | None = None, files: DurableFiles = DIRECT
    ) -> None:
        self._store = TaskStore(workspace_root, files)
        self._steps = StepJournal(workspace_root)
        self._clock = clock
        self.owner = owner  # this runtime instance: written on the runs it creates or resumes
        self.on_completed: list[RunListener] = []  # told of each run `complete` ends completed; must not block

    def _now(self) -> datetime:
        now = self._clock()
        if now.utcoffset() is None:
            raise ValueError("the lifecycle clock must return timezone-aware datetimes")
        return now

    # -- reads -------------------------------------------------------------------------

    async def get_run(self, ref: RunRef) -> RunRecord:
        return await asyncio.to_thread(self._store.read_run, ref)

    async def get_manifest(self, tenant_id: str, worker_id: str, task_id: str) -> TaskManifest:
        return await asyncio.to_thread(self._store.read_manifest, tenant_id, worker_id, task_id)

    async def list_runs(
        self, tenant_id: str, worker_id: str, *, limit: int = 50, offset: int = 0, before: datetime | None = None
    ) -> list[RunRecord]:
        """Newest first; `before` keeps runs queued strictly earlier (a cursor)."""
        return await asyncio.to_thread(
            lambda: self._store.list_runs(tenant_id, worker_id, limit=limit, offset=offset, before=before)
        )

    # -- creation ----------------------------------------------------------------------

    async def persist_initial(self, manifest: TaskManifest, *, start: bool = False) -> RunRecord:
        """Write the manifest and its queued run. With an idempotency key that already made a run,
        return that run instead (its run_id then differs from `manifest.run_id`).

        `start=True` records queued -> running in the same write, for a caller that already holds
        its turn (one durable write instead of two)."""
        return await self._store.files.run(lambda: self._persist_initial(manifest, start))

    def _persist_initial(self, manifest: TaskManifest, start: bool = False) -> RunRecord:
        now = self._now()
        key = manifest.provenance.idempotency_key
        if key is None:
            return self._create(manifest, now, start)
        tenant, worker = manifest.tenant_id, manifest.worker_id
        claim = IdempotencyClaim(key, manifest.run_id, manifest.task_id, now)
        with self._store.claim_lock(tenant, worker, key):
            existing = self._store.read_claim(tenant, worker, key)
            if existing is not None:
                if existing.key != key:
                    path = self._store.claim_path(tenant, worker, key)
                    raise TaskFileError(path, f"holds key {existing.key!r}, not {key!r} (digest collision)")
                ref = RunRef(tenant, worker, existing.run_id)
                if self._store.run_path(ref).exists():
                    return self._store.read_run(ref)
                # its claimer crashed before creating the run: the claim is stale
                self._store.discard_claim(tenant, worker, key)
            self._check_new(manifest)
            if not self._store.claim_idempotency(tenant, worker, claim):
                # only a writer that skipped the lock can get here; its claim wins
                raise TaskLifecycleError(f"idempotency key {key!r} was claimed concurrently")
            try:
                return self._create(manifest, now, start)
            except BaseException:
                self._store.discard_claim(tenant, worker, key)
                raise

    async def release_interrupted(self, tenant_id: str, worker_id: str, key: str, run_id: str) -> bool:
        """Free idempotency key `key` from run `run_id` when that run is `interrupted`, so the same
        request can run again under the same key; the caller has decided nothing the run did must be
        kept from repeating (an IM message interrupted before any tool ran). True when the key is
        free (now or already); False when it belongs to another run or `run_id` is not interrupted."""
        return await self._store.files.run(lambda: self._release_interrupted(tenant_id, worker_id, key, run_id))

    def _release_interrupted(self, tenant_id: str, worker_id: str, key: str, run_id: str) -> bool:
        with self._store.claim_lock(tenant_id, worker_id, key):
            claim = self._store.read_claim(tenant_id, worker_id, key)
            if claim is None:
                return True
            if claim.key != key or claim.run_id != run_id:
                return False
            if self._store.read_run(RunRef(tenant_id, worker_id, run_id)).state is not RunState.INTERRUPTED:
                return False
            self._store.discard_claim(tenant_id, worker_id, key)
            log.info("idempotency key %r freed from interrupted run %s to run it again", key, run_id)
            return True

    def _check_new(self, manifest: TaskManifest) -> None:
        ref = RunRef(manifest.tenant_id, manifest.worker_id, manifest.run_id)
        if self._store.run_path(ref).exists():
            raise RunExists(ref)

    def _create(self, manifest: TaskManifest, now: datetime, start: bool = False) -> RunRecord:
        run = RunRecord(
            run_id=manifest.run_id,
            task_id=manifest.task_id,
            tenant_id=manifest.tenant_id,
            worker_id=manifest.worker_id,
            thread_id=manifest.thread_id,
            state=RunState.QUEUED,
            timings=RunTimings(queued_at=now),
            goal_status=GoalStatus.NOT_APPLICABLE if manifest.provenance.goal_id is None else GoalStatus.INCONCLUSIVE,
            provenance=manifest.provenance,
            skill_id=manifest.skill_id,
            history=(StateChange(now, None, RunState.QUEUED),),
            owner=self.owner,
        )
        if start:
            run = _advance(run, RunState.RUNNING, now)
        self._check_new(manifest)
        with self._store.files.together():  # one durable wait for both files
            self._store.create_manifest(manifest)
            try:
                self._store.create_run(run)
            except BaseException:
                self._store.discard_manifest(manifest)
                raise
        for entry in run.history:
            record_run_state(entry.target.value)
        self._link_child(manifest, now)
        return run

    def _link_child(self, manifest: TaskManifest, now: datetime) -> None:
        """A delegated task's run joins its parent's `children` (also when the parent has ended: a
        delegate call held by the undo window runs after it). The child's own provenance names the
        parent, so a parent that cannot be read only costs the back link (logged)."""
        parent_id, parent_worker = manifest.provenance.parent_run_id, manifest.provenance.parent_worker_id
        if parent_id is None or parent_worker is None:
            return
        ref = RunRef(manifest.tenant_id, parent_worker, parent_id)
        child = ChildRun(manifest.worker_id, manifest.run_id, now)
        try:
            with self._store.run_lock(ref), self._store.files.together():
                parent = self._store.read_run(ref)
                if all(c.run_id != child.run_id for c in parent.children):
                    linked = replace(parent, children=(*parent.children, child), version=parent.version + 1)
                    self._store.save_run(linked)
        except (TaskLifecycleError, OSError) as exc:
            log.warning("run %s: not linked to its parent run %s: %s", manifest.run_id, ref, exc)

    # -- state changes -----------------------------------------------------------------

    def _write(self, ref: RunRef, change: Change) -> tuple[RunRecord, bool]:
        """Apply `change` under the run's lock; None from it means nothing to write. The manifest of
        an ended run is moved to tasks/done/ (again, if a crash interrupted the first move)."""
        with self._store.run_lock(ref), self._store.files.together():
            run = self._store.read_run(ref)
            before = run.state
            new = change(run, self._now())
            if new is not None:
                run = replace(new, version=run.version + 1)
                self._store.save_run(run)
                if run.state is not before:
                    record_run_state(run.state.value)
            if run.terminal and not self._store.finish_manifest(run.tenant_id, run.worker_id, run.task_id):
                log.warning("run %s: manifest of task %s is missing", ref, run.task_id)
            if run.terminal and new is not None:
                self._steps.discard(run.tenant_id, run.worker_id, run.run_id)
            return run, new is not None

    def _apply(self, ref: RunRef, change: Change) -> RunRecord:
        return self._write(ref, change)[0]

    async def _move(
        self,
        ref: RunRef,
        target: RunState,
        note: str = "",
        *,
        sources: frozenset[RunState] | None = None,
        error: RunError | None = None,
    ) -> RunRecord:
        def change(run: RunRecord, now: datetime) -> RunRecord:
            if sources is not None and run.state not in sources:
                allowed = ", ".join(sorted(s.value for s in sources))
                raise IllegalTransition(run.ref, run.state, target, f"only from {allowed}")
            moved = _advance(run, target, now, note)
            return moved if error is None else replace(moved, error=error)

        return await self._store.files.run(lambda: self._apply(ref, change))

    async def start(self, ref: RunRef) -> RunRecord:
        """queued -> running."""
        return await self._move(ref, RunState.RUNNING, "started", sources=frozenset({RunState.QUEUED}))

    async def resume(self, ref: RunRef, *, approval_ref: str | None = None) -> RunRecord:
        """waiting_approval | paused -> running; `approval_ref` records the approval that allowed it."""

        def change(run: RunRecord, now: datetime) -> RunRecord:
            if run.state not in (RunState.WAITING_APPROVAL, RunState.PAUSED):
                raise IllegalTransition(run.ref, run.state, RunState.RUNNING, "only from waiting_approval, paused")
            moved = _advance(run, RunState.RUNNING, now, "approved" if approval_ref else "resumed")
            moved = replace(moved, owner=self.owner)
            if approval_ref is None:
                return moved
            return replace(moved, provenance=replace(moved.provenance, approval_ref=approval_ref))

        return await self._store.files.run(lambda: self._apply(ref, change))

    async def wait_approval(self, ref: RunRef, call: ToolCall, reason: str = "") -> RunRecord:
        """running -> waiting_approval on `call` (the run keeps no LLM slot while it waits)."""
        return await self._store.files.run(lambda: self._apply(ref, lambda run, now: _waiting(run, call, reason, now)))

    async def pause(self, ref: RunRef, reason: str = "") -> RunRecord:
        return await self._move(ref, RunState.PAUSED, reason)

    async def evaluate(self, ref: RunRef) -> RunRecord:
        """running -> evaluating (the protocol finished; an evaluator judges the goal)."""
        return await self._move(ref, RunState.EVALUATING, "evaluating")

    async def complete(
        self,
        ref: RunRef,
        result: RunResult,
        *,
        goal_status: GoalStatus | None = None,
        tool_calls: Sequence[ToolCallRecord] = (),
    ) -> RunRecord:
        """Settle the engine's `result` (from running or evaluating); see docs/runs.md for the mapping.

        `tool_calls` made during the run are recorded in the same write (one fsync, not one per
        call); the per-call tool audit log has them as they happen."""

        def change(run: RunRecord, now: datetime) -> RunRecord:
            return _settled(replace(run, tool_calls=(*run.tool_calls, *tool_calls)), result, goal_status, now)

        record = await self._store.files.run(lambda: self._apply(ref, change))
        if record.state is RunState.COMPLETED:
            for listener in self.on_completed:
                try:
                    listener(record)
                except Exception:
                    log.exception("run %s: a completion listener failed", ref)
        return record

    async def record_goal_verdict(self, ref: RunRef, verdict: GoalVerdict, *, again: bool = False) -> RunRecord:
        """Set a completed run's `goal_status` from the goal evaluator's `verdict`. A run already
        judged keeps its first verdict unless `again` (a new judgement was asked for)."""

        def change(run: RunRecord, now: datetime) -> RunRecord | None:
            if run.state is not RunState.COMPLETED:
                raise TaskLifecycleError(f"run {run.ref} is {run.state}: only a completed run is judged against a goal")
            if run.goal_verdict == verdict or (run.goal_verdict is not None and not again):
                return None
            return replace(run, goal_status=verdict.status, goal_verdict=verdict)

        return await self._store.files.run(lambda: self._apply(ref, change))

    async def fail(self, ref: RunRef, code: str, message: str = "") -> RunRecord:
        return await self._move(ref, RunState.FAILED, code, error=RunError(code, message))

    async def exceed_budget(self, ref: RunRef, code: str, message: str = "") -> RunRecord:
        return await self._move(ref, RunState.BUDGET_EXCEEDED, code, error=RunError(code, message))

    async def cancel(self, ref: RunRef, reason: str = "") -> RunRecord:
        return await self._move(ref, RunState.CANCELLED, reason)

    async def interrupt(self, ref: RunRef, reason: str = "") -> RunRecord:
        return await self._move(ref, RunState.INTERRUPTED, reason, error=RunError("interrupted", reason))

    async def supersede(self, ref: RunRef, by_run_id: str) -> RunRecord:
        return await self._move(ref, RunState.SUPERSEDED, f"superseded by {by_run_id}")

    # -- facts recorded on a live run ------------------------------------------------

    async def record_tool_call(self, ref: RunRef, call: ToolCallRecord) -> RunRecord:
        def change(run: RunRecord, now: datetime) -> RunRecord:
            if run.terminal:
                raise RunClosed(run.ref, run.state, f"record tool call {call.call_id}")
            return replace(run, tool_calls=(*run.tool_calls, call))

        return await self._store.files.run(lambda: self._apply(ref, change))

    async def add_deliverable(self, ref: RunRef, deliverable: Deliverable) -> RunRecord:
        def change(run: RunRecord, now: datetime) -> RunRecord:
            if run.terminal:
                raise RunClosed(run.ref, run.state, "add a deliverable")
            return replace(run, deliverables=(*run.deliverables, deliverable))

        return await self._store.files.run(lambda: self._apply(ref, change))

    async def record_plan(self, ref: RunRef, plan: PlanRecord) -> RunRecord:
        """A planning run's plan and node states (written as they change, so a restart finds them)."""
        return await self._record_engine_state(ref, "plan", plan)

    async def record_graph(self, ref: RunRef, graph: GraphRecord) -> RunRecord:
        """A LangGraph run's checkpoint thread and where it stands."""
        return await self._record_engine_state(ref, "graph", graph)

    async def _record_engine_state(self, ref: RunRef, name: str, value: PlanRecord | GraphRecord) -> RunRecord:
        def change(run: RunRecord, now: datetime) -> RunRecord:
            if run.terminal:
                raise RunClosed(run.ref, run.state, f"record its {name}")
            return replace(run, plan=value) if isinstance(value, PlanRecord) else replace(run, graph=value)

        return await self._store.files.run(lambda: self._apply(ref, change))

    # -- a duty run's contract checks, deliveries and escalations (facts; also once it has ended) --

    async def record_checks(
        self, ref: RunRef, checks: Sequence[ContractCheck], audit_refs: Sequence[str] = ()
    ) -> RunRecord:
        """Append contract checks; `audit_refs` (the tool calls that are its audit evidence) join the
        provenance's."""

        def change(run: RunRecord, now: datetime) -> RunRecord:
            refs = tuple(dict.fromkeys((*run.provenance.audit_refs, *audit_refs)))
            return replace(run, checks=(*run.checks, *checks), provenance=replace(run.provenance, audit_refs=refs))

        return await self._store.files.run(lambda: self._apply(ref, change))

    async def record_deliveries(self, ref: RunRef, deliveries: Sequence[DeliveryRecord]) -> RunRecord:
        """Add deliveries, or update them by key; one that was `sent` stays so."""

        def change(run: RunRecord, now: datetime) -> RunRecord | None:
            merged = _by_key(run.deliveries, deliveries, final="sent")
            return None if merged == run.deliveries else replace(run, deliveries=merged)

        return await self._store.files.run(lambda: self._apply(ref, change))

    async def record_escalations(self, ref: RunRef, escalations: Sequence[EscalationRecord]) -> RunRecord:
        """Add escalations, or update them by key; one that was `sent` stays so."""

        def change(run: RunRecord, now: datetime) -> RunRecord | None:
            merged = _by_key(run.escalations, escalations, final="sent")
            return None if merged == run.escalations else replace(run, escalations=merged)

        return await self._store.files.run(lambda: self._apply(ref, change))

    # -- recovery ----------------------------------------------------------------------

    async def recover_interrupted(self, alive: Alive | None = None) -> list[RunRef]:
        """At start-up: mark every orphaned run left running or evaluating `interrupted` and finish
        manifests of ended runs. Without `alive`, every run not owned by this instance is an orphan
        (one process owns the workspace); with it, runs whose owner still holds a lease are left alone.

        Nothing is re-run: a side-effecting step may have happened, so a person or a new trigger
        decides; a journaled call that never finished is recorded as `outcome_unknown`. Queued,
        waiting_approval and paused runs are left as they are. Unreadable files are logged and
        skipped so one bad file cannot stop the runtime from starting.
        """
        return await asyncio.to_thread(self._recover, self._store.run_refs, alive)

    async def recover_orphans(self, alive: Alive) -> list[RunRef]:
        """While running: the same for runs of active tasks only (a cheap periodic sweep), so a
        process that died while others run is noticed without a restart."""
        return await asyncio.to_thread(self._recover, self._store.active_run_refs, alive)

    def _recover(self, refs: Callable[[str, str], list[RunRef]], alive: Alive | None) -> list[RunRef]:
        def orphaned(owner: str | None) -> bool:
            if owner == self.owner and owner is not None:
                return False
            return owner is None or alive is None or not alive(owner)

        recovered: list[RunRef] = []
        for tenant, worker in self._store.workers():
            for ref in refs(tenant, worker):
                try:
                    if self._recover_one(ref, orphaned):
                        recovered.append(ref)
                except (TaskFileError, PathEscapeError, InvalidIdError, OSError) as exc:
                    log.error("run recovery skipped %s: %s", ref, exc)
        return recovered

    def _recover_one(self, ref: RunRef, orphaned: Callable[[str | None], bool]) -> bool:
        steps = self._steps.unfinished(ref.tenant_id, ref.worker_id, ref.run_id)

        def change(run: RunRecord, now: datetime) -> RunRecord | None:
            if run.state not in _RECOVERED or not orphaned(run.owner):
                return None
            return _interrupted(run, steps, now)

        _, changed = self._write(ref, change)
        if changed:
            unknown = f"; {len(steps)} side-effecting calls have an unknown outcome" if steps else ""
            log.warning("run %s was running when its runtime stopped; marked interrupted%s", ref, unknown)
        return changed


Alive = Callable[[str], bool]
_Keyed = TypeVar("_Keyed", DeliveryRecord, EscalationRecord)


def _by_key(current: tuple[_Keyed, ...], updates: Sequence[_Keyed], *, final: str) -> tuple[_Keyed, ...]:
    merged = {r.key: r for r in current}
    for update in updates:
        known = merged.get(update.key)
        if known is None or known.state != final or update.state == final:
            merged[update.key] = update
    return tuple(merged.values())


def _interrupted(run: RunRecord, steps: Sequence[UnfinishedStep], now: datetime) -> RunRecord:
    """`run` interrupted by a dead process; calls it had started and not finished are `outcome_unknown`."""
    moved = _advance(run, RunState.INTERRUPTED, now, RESTART_NOTE)
    if not steps:
        return replace(moved, error=RunError("runtime_restarted", RESTART_NOTE))
    unknown = tuple(ToolCallRecord(s.tool, s.call_id, "outcome_unknown", code="outcome_unknown") for s in steps)
    names = ", ".join(f"{step.tool} ({step.call_id})" for step in steps)
    message = f"{RESTART_NOTE}; the outcome of {names} is unknown and is not retried automatically"
    return replace(moved, tool_calls=(*run.tool_calls, *unknown), error=RunError("outcome_unknown", message))
