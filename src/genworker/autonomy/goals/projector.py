"""GoalProgressProjector: completed runs judged against their goal task, and met verdicts written
back into the goal through the GoalAggregate.

Which goal task a completed run serves (`target_of`):

- its provenance names the goal (`goal_id`, an active goal): among the goal's open tasks, the one
  with the run's `process_id`/`step_id`, else its `duty_id`;
- it names only a duty: the first active goal (by file name) with an open task bound to that duty.

A run that serves no open goal task is not judged (nothing a verdict could move).

Several candidates: the first one that is not blocked, in file order. The `GoalEvaluator` judges
the run once; the verdict is recorded on the run (`goal_status`, `goal_verdict`) through the task
lifecycle, then:

- ``met`` on a goal task: the task becomes ``done`` and its milestone moves with it;
- ``not_met``: nothing moves; the reasons are on the run and the goal's last verdict;
- ``inconclusive``: nothing moves; a ``goal.verdict_inconclusive`` inbox item asks a person to look.

Completed never means met: a run without a verdict moves nothing. A run is judged once (its
recorded verdict is reused, so projecting it again is a no-op); ``again=True`` asks for a new
judgement, and the task edit is a set, so nothing advances twice. Projected run ids are remembered
per worker (``runtime/goals/projected.json``), so catching up after a restart projects each run once.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from genworker.autonomy.goals.aggregate import GoalAggregate, GoalChange
from genworker.autonomy.goals.errors import GoalError
from genworker.autonomy.goals.evaluator import GoalEvaluator, Target, run_evidence
from genworker.autonomy.goals.verdicts import LastVerdict, VerdictLog
from genworker.autonomy.inbox import InboxWriter, new_item
from genworker.bus import EventBus, EventBusError, new_event
from genworker.fsutil import file_lock, write_atomic
from genworker.ids import safe_join
from genworker.worker.lifecycle import TaskLifecycle
from genworker.worker.task import GoalStatus as RunGoalStatus
from genworker.worker.task import GoalVerdict, RunRecord, RunRef, RunState
from genworker.workspace.models import Goal, GoalStatus
from genworker.workspace.models.goal import GoalTask, Milestone, TaskStatus

__all__ = [
    "GOAL_EVALUATED",
    "GOAL_VERDICT_INCONCLUSIVE",
    "Evaluation",
    "GoalProgressProjector",
    "Projection",
    "match_task",
    "target_of",
]

log = logging.getLogger("genworker.goals")

GOAL_EVALUATED: Final = "goal.evaluated"
GOAL_VERDICT_INCONCLUSIVE: Final = "goal.verdict_inconclusive"
SCHEMA_VERSION: Final = 1
REMEMBERED: Final = 2000  # projected run ids kept per worker
_CLOSED: Final = ("done", "cancelled")


@dataclass(frozen=True, slots=True)
class Projection:
    goal_id: str
    task_id: str
    status: TaskStatus


@dataclass(frozen=True, slots=True)
class Evaluation:
    run: RunRecord  # as recorded, with its goal_verdict (None: nothing to judge it against)
    changes: tuple[GoalChange, ...] = ()
    judged: bool = False  # a verdict was made now (not reused)


def _task_for(goal: Goal, run: RunRecord) -> tuple[GoalTask, Milestone] | None:
    p = run.provenance
    open_tasks = [(t, m) for m in goal.milestones for t in m.tasks if t.status not in _CLOSED]
    candidates: list[tuple[GoalTask, Milestone]] = []
    if p.goal_id is not None and p.step_id is not None:
        candidates = [(t, m) for t, m in open_tasks if t.step_id == p.step_id and t.process_id in (None, p.process_id)]
    if not candidates and p.duty_id is not None:
        candidates = [(t, m) for t, m in open_tasks if t.duty_id == p.duty_id]
    if not candidates:
        return None
    return next(((t, m) for t, m in candidates if t.status != "blocked"), candidates[0])


def target_of(goals: Sequence[Goal], run: RunRecord) -> Target | None:
    """What a completed `run` is judged against (None: nothing)."""
    p = run.provenance
    if run.state is not RunState.COMPLETED:
        return None
    named = [g for g in goals if g.goal_id == p.goal_id] if p.goal_id is not None else goals
    for goal in named:
        found = _task_for(goal, run) if goal.status == GoalStatus.ACTIVE else None
        if found is not None:
            return Target(goal, *found)
    return None


def _judged_target(goals: Sequence[Goal], verdict: GoalVerdict) -> Target | None:
    """What a run judged before was judged against (to judge it again, whatever its task's status now)."""
    for goal in goals:
        if goal.goal_id == verdict.goal_id:
            found = next(((t, m) for m in goal.milestones for t in m.tasks if t.id == verdict.task_id), None)
            return None if found is None else Target(goal, *found)
    return None


def match_task(goal: Goal, run: RunRecord) -> Projection | None:
    """What `run`'s verdict means for `goal`: met on an open task of this active goal -> done."""
    verdict = run.goal_verdict
    if run.state is not RunState.COMPLETED or verdict is None or verdict.status is not RunGoalStatus.MET:
        return None
    if verdict.goal_id != goal.goal_id or verdict.task_id is None or goal.status != GoalStatus.ACTIVE:
        return None
    task = next((t for t in goal.tasks() if t.id == verdict.task_id), None)
    if task is None or task.status in _CLOSED:
        return None
    return Projection(goal.goal_id, task.id, "done")


def _statuses(goal: Goal) -> Mapping[str, str]:
    return {f"task {t.id}": t.status for t in goal.tasks()} | {f"milestone {m.id}": m.status for m in goal.milestones}


def _moved(before: Goal, after: Goal) -> list[str]:
    """What changed, e.g. ["task api: done", "milestone build: done"]."""
    was = _statuses(before)
    return [f"{what}: {status}" for what, status in _statuses(after).items() if was.get(what) != status]


class GoalProgressProjector:
    def __init__(
        self,
        goals: GoalAggregate,
        tasks: TaskLifecycle,
        evaluator: GoalEvaluator | None = None,
        *,
        bus: EventBus | None = None,
        inbox: InboxWriter | None = None,
    ) -> None:
        self.goals = goals
        self.tasks = tasks
        self.evaluator = evaluator
        self.bus = bus
        self.inbox = inbox
        self.verdicts = VerdictLog(goals.root)
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        self._pending: set[asyncio.Task[None]] = set()
        self._closed = False

    # -- after each run ---------------------------------------------------------------

    def after_run(self, run: RunRecord) -> None:
        """TaskLifecycle listener: judge and project a completed run that names a goal or a duty, in
        the background (the run's caller does not wait for the evaluator)."""
        if self._closed or self.evaluator is None or run.state is not RunState.COMPLETED:
            return
        if run.provenance.goal_id is None and run.provenance.duty_id is None:
            return
        task = asyncio.get_running_loop().create_task(self._after_run(run), name=f"goal-evaluation:{run.run_id}")
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _after_run(self, run: RunRecord) -> None:
        try:
            await self.project(run)
            await asyncio.to_thread(self._remember, run.tenant_id, run.worker_id, [run.run_id])
        except Exception:
            log.exception("[Goals] run %s: goal evaluation failed", run.ref)

    async def stop(self, grace_s: float = 10.0) -> None:
        self._closed = True
        pending = list(self._pending)
        if pending:
            _, late = await asyncio.wait(pending, timeout=grace_s)
            for task in late:
                task.cancel()

    # -- judging and projecting -------------------------------------------------------

    async def evaluate(self, ref: RunRef, *, again: bool = False) -> Evaluation:
        """Judge the run (anew with `again`) and project its verdict."""
        return await self._evaluate(await self.tasks.get_run(ref), again)

    async def project(self, run: RunRecord) -> list[GoalChange]:
        """Judge `run` when it has no verdict yet, then write a met verdict into its goal task."""
        return list((await self._evaluate(run, False)).changes)

    async def _evaluate(self, run: RunRecord, again: bool) -> Evaluation:
        key = str(run.ref)
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        async with lock:  # the listener and a catch-up never judge one run twice at once
            goals = await asyncio.to_thread(self.goals.goals, run.tenant_id, run.worker_id)
            judged = False
            if (run.goal_verdict is None or again) and self.evaluator is not None:
                run, judged = await self._judge(run, goals, again)
            changes, moved = await self._apply(run, goals)
            verdict = run.goal_verdict
            if verdict is not None and (judged or moved):
                await self._report(run, verdict, moved, judged)
            return Evaluation(run, tuple(changes), judged)

    async def _judge(self, run: RunRecord, goals: Sequence[Goal], again: bool) -> tuple[RunRecord, bool]:
        assert self.evaluator is not None
        run = await self.tasks.get_run(run.ref)  # judged meanwhile by another process?
        if run.goal_verdict is not None and not again:
            return run, False
        target = target_of(goals, run) if run.goal_verdict is None else _judged_target(goals, run.goal_verdict)
        if target is None:
            return run, False
        worker = safe_join(self.goals.root, "tenants", run.tenant_id, "workers", run.worker_id)
        evidence = await asyncio.to_thread(run_evidence, run, worker)
        verdict = await self.evaluator.judge(target, run, evidence)
        recorded = await self.tasks.record_goal_verdict(run.ref, verdict, again=again)
        log.info("[Goals] run %s: %s for %s/%s", run.ref, verdict.status, verdict.goal_id, verdict.task_id)
        return recorded, recorded.goal_verdict == verdict

    async def _apply(self, run: RunRecord, goals: Sequence[Goal]) -> tuple[list[GoalChange], list[str]]:
        changes: list[GoalChange] = []
        moved: list[str] = []
        for goal in goals:
            projection = match_task(goal, run)
            if projection is None:
                continue
            try:
                change = await self.goals.set_task(
                    run.tenant_id, run.worker_id, goal.goal_id, projection.task_id, projection.status, by=run.run_id
                )
            except GoalError as exc:
                log.warning("[Goals] run %s not projected into %s: %s", run.run_id, goal.goal_id, exc)
                continue
            changes.append(change)
            moved += _moved(goal, change.goal)
        return changes, moved

    async def _report(self, run: RunRecord, verdict: GoalVerdict, moved: list[str], judged: bool) -> None:
        """The goal's last verdict (dashboard), a `goal.evaluated` event, and for a new inconclusive
        verdict an inbox item for a person."""
        last = LastVerdict(run.run_id, verdict, tuple(moved))
        try:
            await asyncio.to_thread(self.verdicts.keep, run.tenant_id, run.worker_id, last)
        except (GoalError, OSError, ValueError) as exc:
            log.warning("[Goals] last verdict of %s not kept: %s", verdict.goal_id, exc)
        payload = {"goal_id": verdict.goal_id, **last.as_dict()}
        if judged and verdict.status is RunGoalStatus.INCONCLUSIVE and self.inbox is not None:
            day = verdict.evaluated_at.astimezone(dt.UTC).date().isoformat()
            item = new_item(
                run.tenant_id,
                run.worker_id,
                "goal",
                verdict.goal_id,
                GOAL_VERDICT_INCONCLUSIVE,
                {**payload, "action": "review_goal_run"},
                dedupe_key=f"goal-verdict:{verdict.goal_id}:{verdict.task_id or '-'}:{day}",
            )
            await self.inbox.write(item)
        if self.bus is None:
            return
        event = new_event(
            GOAL_EVALUATED, source="goals", tenant_id=run.tenant_id, worker_id=run.worker_id, payload=payload
        )
        try:
            await self.bus.publish(event)
        except EventBusError as exc:
            log.warning("[Goals] %s not published: %s", GOAL_EVALUATED, exc)

    # -- catching up ------------------------------------------------------------------

    async def catch_up(self, tenant_id: str, worker_id: str, *, limit: int = 200) -> list[GoalChange]:
        """Project the worker's recent finished runs not projected yet, oldest first."""
        runs = await self.tasks.list_runs(tenant_id, worker_id, limit=limit)
        done = await asyncio.to_thread(self._projected, tenant_id, worker_id)
        fresh = [r for r in reversed(runs) if r.terminal and r.run_id not in done]
        if not fresh:
            return []
        changes = []
        for run in fresh:
            changes += await self.project(run)
        await asyncio.to_thread(self._remember, tenant_id, worker_id, [r.run_id for r in fresh])
        return changes

    def _state_path(self, tenant_id: str, worker_id: str) -> Path:
        return safe_join(self.goals.root, "tenants", tenant_id, "workers", worker_id) / "runtime" / "goals"

    def _projected(self, tenant_id: str, worker_id: str) -> set[str]:
        path = self._state_path(tenant_id, worker_id) / "projected.json"
        if not path.is_file():
            return set()
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("schema_version") != SCHEMA_VERSION:
            raise GoalError(f"{path}: unsupported schema_version {data.get('schema_version')!r}")
        return set(data.get("run_ids", ()))

    def _remember(self, tenant_id: str, worker_id: str, run_ids: list[str]) -> None:
        folder = self._state_path(tenant_id, worker_id)
        with file_lock(folder / "projected.lock"):
            path = folder / "projected.json"
            known: list[str] = []
            if path.is_file():
                known = list(json.loads(path.read_text(encoding="utf-8")).get("run_ids", ()))
            merged = list(dict.fromkeys([*known, *run_ids]))[-REMEMBERED:]
            body = {"schema_version": SCHEMA_VERSION, "run_ids": merged}
            write_atomic(path, json.dumps(body, indent=1).encode("utf-8"))
