"""A person's decision on a confirmation, acted on: the waiting run is cancelled, superseded by a run
that carries the approval, or continued (a plan's or graph's state)."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

from genworker.worker.confirmations.models import Confirmation, Status
from genworker.worker.governance.evidence import evidence_from

if TYPE_CHECKING:  # the router imports the store
    from genworker.worker.router import RouteRequest, WorkerRouter
    from genworker.worker.task import RunRecord

__all__ = ["Resolution", "RunApproved", "cancel_waiting_run", "resolve"]

log = logging.getLogger("genworker.confirmations")


async def cancel_waiting_run(router: WorkerRouter, confirmation: Confirmation) -> None:
    """`CloseRun` for the runtime: cancel the run the closed confirmation kept waiting."""
    from genworker.worker.lifecycle import TaskLifecycleError
    from genworker.worker.task import RunRef

    ref = RunRef(confirmation.tenant_id, confirmation.worker_id, confirmation.run_id)
    try:
        await router.tasks.cancel(ref, f"confirmation {confirmation.confirmation_id} closed after the timeout")
    except TaskLifecycleError as exc:
        log.warning("[Confirmations] run %s not cancelled: %s", confirmation.run_id, exc)


@dataclass(frozen=True, slots=True)
class Resolution:
    confirmation: Confirmation
    run: RunRecord | None = None  # the run the approval started
    output: str = ""


RunApproved = Callable[["RouteRequest"], Awaitable[tuple["RunRecord | None", str]]]
"""Runs the approved request to its end: (its run record, its output)."""


async def resolve(
    router: WorkerRouter,
    tenant_id: str,
    worker_id: str,
    confirmation_id: str,
    decision: Literal["approve", "reject"],
    by: str,
    *,
    run: RunApproved | None = None,
) -> Resolution:
    """Decide a confirmation and act on it: a rejection cancels the waiting run; an approval
    supersedes it and routes the task again with `approval_ref`, which the governance stage
    accepts for this gate only, so the new run does not wait again.

    Approving a tool confirmation first runs exactly the approved call (its id in
    `approved_call_ids`, under the waiting run's id and posture), then routes the task again with
    that call's result, so the continuation does not need to ask for it again. When the waiting run
    was a plan or a graph, the new run continues its state (`Continuation`); a graph interrupt is
    continued on rejection too, with the answer `{"approved": false, "by": ...}`."""
    from genworker.worker.lifecycle import TaskLifecycleError
    from genworker.worker.router import RouteRequest
    from genworker.worker.task import RunRef

    if decision not in ("approve", "reject"):
        raise ValueError(f"decision must be 'approve' or 'reject', got {decision!r}")
    status: Status = "approved" if decision == "approve" else "rejected"
    decided = await router.confirmations.decide_async(tenant_id, worker_id, confirmation_id, status, by)
    if decided.kind == "review":
        return Resolution(decided)
    if decided.continuation and (status == "approved" or decided.kind == "interrupt"):
        return await _continue_engine(router, decided, by, run)
    text: str = decided.text
    resume: tuple[dict[str, Any], ...] = ()
    if status == "approved" and decided.kind == "tool":
        call_id, result = await _run_approved_call(router, decided)
        if decided.checkpoint:  # continue the loop where it stopped: nothing before the call runs again
            resume = (*decided.checkpoint, {"role": "tool", "tool_call_id": call_id, "content": result})
        else:  # a workflow's interrupt: the task runs again with the call's result
            text = f"{decided.text}\n\n{_approved_call_text(decided, result)}"
    elif status == "approved" and decided.kind == "pause":  # a supervisor's pause: the loop goes on from there
        resume = tuple(decided.checkpoint)
    waiting = RunRef(tenant_id, worker_id, decided.run_id)
    try:
        if status == "rejected":
            await router.tasks.cancel(waiting, f"rejected by {by}")
        else:
            await router.tasks.supersede(waiting, f"approval {confirmation_id}")
    except TaskLifecycleError as exc:  # e.g. interrupted by a restart: the decision still stands
        log.warning("[Confirmations] run %s not closed after %s: %s", decided.run_id, status, exc)
    if status == "rejected":
        return Resolution(decided)
    req = RouteRequest(
        tenant_id,
        worker_id,
        text,
        decided.source_type,  # type: ignore[arg-type]  # stored from a SourceType
        decided.source_id,
        decided.thread_id or None,
        conversational=False,
        skill_id=decided.skill_id,
        duty_id=decided.duty_id,
        trigger_id=decided.trigger_id,
        goal_id=decided.goal_id,
        preferred_skill_ids=decided.preferred_skill_ids,
        approval_ref=confirmation_id if decided.kind == "gate" else decided.approval_ref,
        evidence=evidence_from(decided.evidence or {}, f"confirmation {confirmation_id} evidence"),
        resume=resume,
    )
    record, output = await (run or partial(_run_to_end, router))(req)
    return Resolution(decided, record, output)


async def _continue_engine(router: WorkerRouter, decided: Confirmation, by: str, run: RunApproved | None) -> Resolution:
    """The decision on a waiting plan or graph: a new run continues its state with the approved call's
    result, or with the interrupt's answer."""
    from genworker.engine.base import Continuation
    from genworker.worker.lifecycle import TaskLifecycleError
    from genworker.worker.router import RouteRequest
    from genworker.worker.task import RunRef

    approved: dict[str, str] = {}
    answer: dict[str, Any] | None = None
    if decided.kind == "interrupt":
        answer = {"approved": decided.status == "approved", "by": by}
    else:
        call_id, result = await _run_approved_call(router, decided)
        approved[call_id] = result
    waiting = RunRef(decided.tenant_id, decided.worker_id, decided.run_id)
    try:
        await router.tasks.supersede(waiting, f"{decided.status} {decided.confirmation_id}")
    except TaskLifecycleError as exc:
        log.warning("[Confirmations] run %s not closed after %s: %s", decided.run_id, decided.status, exc)
    source = decided.continuation or {}
    req = RouteRequest(
        decided.tenant_id,
        decided.worker_id,
        decided.text,
        decided.source_type,  # type: ignore[arg-type]  # stored from a SourceType
        decided.source_id,
        decided.thread_id or None,
        conversational=False,
        skill_id=decided.skill_id,
        duty_id=decided.duty_id,
        trigger_id=decided.trigger_id,
        goal_id=decided.goal_id,
        approval_ref=decided.approval_ref,
        evidence=evidence_from(decided.evidence or {}, f"confirmation {decided.confirmation_id} evidence"),
        continuation=Continuation(str(source.get("run_id") or decided.run_id), approved, answer),
    )
    record, output = await (run or partial(_run_to_end, router))(req)
    return Resolution(decided, record, output)


async def _run_approved_call(router: WorkerRouter, confirmation: Confirmation) -> tuple[str, str]:
    """Run the one approved tool call: its id and what it returned, as text."""
    from genworker.tools.base import ToolCall
    from genworker.tools.outcomes import outcome_text

    spec = confirmation.tool_call or {}
    call = ToolCall(str(spec.get("id")), str(spec.get("name")), dict(spec.get("arguments") or {}))
    worker = router.resolve(confirmation.tenant_id, confirmation.worker_id)
    state = router.registry.tenant(confirmation.tenant_id)
    assert state is not None
    scope = router.tools.scope(
        state.tenant,
        worker,
        confirmation.run_id,
        posture=confirmation.posture,  # type: ignore[arg-type]  # stored from a Posture
        approved_call_ids=frozenset({call.id}),
    )
    outcome = await router.tools.pipeline_for(worker).execute(scope, call, "system")
    return call.id, outcome_text(outcome)


def _approved_call_text(confirmation: Confirmation, result: str) -> str:
    spec = confirmation.tool_call or {}
    arguments = json.dumps(spec.get("arguments") or {}, ensure_ascii=False, default=str)
    return f"[approved tool call {spec.get('name')}({arguments}) was run by the runtime; result]\n{result}"


async def _run_to_end(router: WorkerRouter, req: RouteRequest) -> tuple[RunRecord | None, str]:
    from genworker.worker.routing import run_to_end

    done = await run_to_end(router.route_stream(req))
    return (done.record, done.result.output) if done is not None else (None, "")
