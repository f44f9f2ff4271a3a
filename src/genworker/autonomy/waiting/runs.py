"""Runs that park themselves (the `wait_for_event` tool) and their continuation.

Parking binds the plan to the run's tenant, worker, thread, task and skill, and to the
conversation the run answers when it came from a channel (`plan.resume`). When the plan resumes,
a new run continues the same thread with the arriving event's payload as input, through the
router (governance judges it again); the parked run, `paused` until then, is `superseded` by it.
When the plan ends without resuming (cancelled, closed after its timeout) or its continuation
cannot start, the parked run ends too. docs/waiting.md describes the flow.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from genworker.autonomy.waiting.models import WaitingPlan
from genworker.conversation.models import session_id_for
from genworker.tools.builtin.waiting import WaitRequest
from genworker.tools.context import ToolScope
from genworker.worker.lifecycle.errors import TaskLifecycleError
from genworker.worker.task import RunRecord, RunRef
from genworker.workspace.models.base import thaw

if TYPE_CHECKING:
    from genworker.autonomy.waiting.service import WaitingService
    from genworker.worker.router import RouteRequest, WorkerRouter

__all__ = ["Address", "cancel_parked", "continuation", "continues_run", "fail_parked", "park_run", "supersede_parked"]

log = logging.getLogger("genworker.waiting")

_MAX_PAYLOAD_CHARS: Final = 20_000  # of the event payload shown to the model
_WAITING_SOURCE: Final = "waiting:"  # a continuation's source_id: waiting:{plan_id}

Address = Callable[[RunRecord], Mapping[str, Any] | None]
"""The conversation a run answers (ChannelReplies.address); None: not from a channel."""


async def park_run(
    waiting: WaitingService,
    router: WorkerRouter,
    scope: ToolScope,
    request: WaitRequest,
    *,
    address: Address | None = None,
) -> WaitingPlan:
    """Park the run of `scope` as a WAITING plan on `request.match_key` (the same plan id again
    returns the stored plan: a retried tool call does not park twice)."""
    run = await router.tasks.get_run(RunRef(scope.tenant_id, scope.worker_id, scope.run_id))
    manifest = await router.tasks.get_manifest(scope.tenant_id, scope.worker_id, run.task_id)
    conversational = scope.conversational  # a new thread's session is stored with the turn that parks
    if not conversational and run.thread_id is not None:  # a scope from outside a routed turn
        session_id = session_id_for("thread", scope.worker_id, run.thread_id)
        conversational = await router.sessions.get(scope.tenant_id, session_id) is not None
    resume: dict[str, Any] = {
        "run_id": run.run_id,
        "task_id": run.task_id,
        "thread_id": run.thread_id,
        "conversational": conversational,  # the thread's history carries the request
        "text": manifest.text,
        "reason": request.reason,
        "instructions": request.resume_instructions,
        "skill_id": scope.skill_id or run.skill_id,  # the skill it ran with, matched or explicit
        "duty_id": run.provenance.duty_id,
        "goal_id": run.provenance.goal_id,
        "reply_to": await _reply_to(waiting, run, address),
    }
    return await waiting.wait(
        scope.tenant_id,
        scope.worker_id,
        request.match_key,
        title=request.reason,
        wait_for=request.timeout,
        resume=resume,
        plan_id=request.plan_id,
    )


async def _reply_to(waiting: WaitingService, run: RunRecord, address: Address | None) -> Mapping[str, Any] | None:
    """The conversation `run` answers: its channel message, or, for a continuation that waits
    again, the conversation of the plan it continues."""
    found = address(run) if address is not None else None
    source = run.provenance.source_id or ""
    if found is not None or run.provenance.source_type != "event" or not source.startswith(_WAITING_SOURCE):
        return found
    previous = await waiting.store.get(run.tenant_id, run.worker_id, source.removeprefix(_WAITING_SOURCE))
    return previous.resume.get("reply_to") if previous is not None else None


def continues_run(plan: WaitingPlan) -> bool:
    """Whether `plan` was parked by a run (wait_for_event) rather than through the API."""
    return "run_id" in plan.resume


def continuation(plan: WaitingPlan) -> RouteRequest:
    """The request that continues a parked run's thread with what arrived."""
    from genworker.worker.router import RouteRequest

    r = plan.resume
    return RouteRequest(
        tenant_id=plan.tenant_id,
        worker_id=plan.worker_id,
        text=_continuation_text(plan),
        source_type="event",
        source_id=f"{_WAITING_SOURCE}{plan.plan_id}",
        thread_id=_str(r.get("thread_id")),
        conversational=bool(r.get("conversational")),
        skill_id=_str(r.get("skill_id")),
        duty_id=_str(r.get("duty_id")),
        goal_id=_str(r.get("goal_id")),
        idempotency_key=f"waiting:{plan.plan_id}:{plan.version}",
    )


async def supersede_parked(router: WorkerRouter, plan: WaitingPlan, by_run_id: str) -> None:
    """The parked run ends `superseded` by its continuation (already ended: left as it is)."""
    with contextlib.suppress(TaskLifecycleError):
        await router.tasks.supersede(_parked(plan), by_run_id)


async def cancel_parked(router: WorkerRouter, plan: WaitingPlan, reason: str) -> None:
    """The plan ended without resuming: its parked run ends `cancelled` with `reason` (a plan
    parked through the API has no run; a run that already ended is left as it is — the start-up
    recovery hands every ended plan here again)."""
    if not continues_run(plan):
        return
    try:
        if not (await router.tasks.get_run(_parked(plan))).terminal:
            await router.tasks.cancel(_parked(plan), reason)
    except TaskLifecycleError as exc:
        log.info("[Waiting] parked run of plan %s not cancelled: %s", plan.plan_id, exc)


async def fail_parked(router: WorkerRouter, plan: WaitingPlan, message: str) -> None:
    """The continuation could not start: the parked run ends `failed` (resume_failed)."""
    with contextlib.suppress(TaskLifecycleError):
        await router.tasks.fail(_parked(plan), "resume_failed", message)


def _parked(plan: WaitingPlan) -> RunRef:
    return RunRef(plan.tenant_id, plan.worker_id, str(plan.resume["run_id"]))


def _continuation_text(plan: WaitingPlan) -> str:
    r = plan.resume
    if plan.event_id is not None and plan.gated_by == "event":
        lines = [f"The event you were waiting for arrived: {plan.match_key} (event {plan.event_id})."]
    else:
        lines = [f"A person resumed your wait for {plan.match_key} before the event arrived."]
    lines.append(f"You were waiting because: {r.get('reason') or plan.title}")
    if r.get("instructions"):
        lines.append(f"Your notes for this moment: {r['instructions']}")
    if not r.get("conversational"):  # no thread history: repeat the task
        lines.append(f"The task: {r.get('text')}")
    if plan.event is not None:
        payload = json.dumps(thaw(plan.event), ensure_ascii=False, default=str, indent=2)
        lines.append(f"Event payload:\n{payload[:_MAX_PAYLOAD_CHARS]}")
    lines.append("Continue the task from here.")
    return "\n".join(lines)


def _str(value: object) -> str | None:
    return str(value) if value else None
