"""Runs that park themselves (the `wait_for_event` tool) and their continuation.

Parking binds the plan to the run's tenant, worker, thread and task (`plan.resume`). When the
plan resumes, a new run continues the same thread with the arriving event's payload as input,
through the router (governance judges it again); the parked run, `paused` until then, is
`superseded` by it. docs/waiting.md describes the flow.
"""

from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING, Any, Final

from genworker.autonomy.waiting.models import WaitingPlan
from genworker.conversation.models import session_id_for
from genworker.tools.builtin.waiting import WaitRequest
from genworker.tools.context import ToolScope
from genworker.worker.lifecycle.errors import TaskLifecycleError
from genworker.worker.task import RunRef
from genworker.workspace.models.base import thaw

if TYPE_CHECKING:
    from genworker.autonomy.waiting.service import WaitingService
    from genworker.worker.router import RouteRequest, WorkerRouter

__all__ = ["continuation", "continues_run", "park_run", "supersede_parked"]

_MAX_PAYLOAD_CHARS: Final = 20_000  # of the event payload shown to the model


async def park_run(
    waiting: WaitingService, router: WorkerRouter, scope: ToolScope, request: WaitRequest
) -> WaitingPlan:
    """Park the run of `scope` as a WAITING plan on `request.match_key` (the same plan id again
    returns the stored plan: a retried tool call does not park twice)."""
    run = await router.tasks.get_run(RunRef(scope.tenant_id, scope.worker_id, scope.run_id))
    manifest = await router.tasks.get_manifest(scope.tenant_id, scope.worker_id, run.task_id)
    session = None
    if run.thread_id is not None:
        session_id = session_id_for("thread", scope.worker_id, run.thread_id)
        session = await router.sessions.get(scope.tenant_id, session_id)
    resume: dict[str, Any] = {
        "run_id": run.run_id,
        "task_id": run.task_id,
        "thread_id": run.thread_id,
        "conversational": session is not None,  # the thread's history carries the request
        "text": manifest.text,
        "reason": request.reason,
        "instructions": request.resume_instructions,
        "skill_id": run.skill_id,
        "duty_id": run.provenance.duty_id,
        "goal_id": run.provenance.goal_id,
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
        source_id=f"waiting:{plan.plan_id}",
        thread_id=_str(r.get("thread_id")),
        conversational=bool(r.get("conversational")),
        skill_id=_str(r.get("skill_id")),
        duty_id=_str(r.get("duty_id")),
        goal_id=_str(r.get("goal_id")),
        idempotency_key=f"waiting:{plan.plan_id}:{plan.version}",
    )


async def supersede_parked(router: WorkerRouter, plan: WaitingPlan, by_run_id: str) -> None:
    """The parked run ends `superseded` by its continuation (already ended: left as it is)."""
    ref = RunRef(plan.tenant_id, plan.worker_id, str(plan.resume["run_id"]))
    with contextlib.suppress(TaskLifecycleError):
        await router.tasks.supersede(ref, by_run_id)


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
