"""Runs and their deliverables (confirmations live in routes/confirmations.py)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from pydantic import Field, TypeAdapter

from genworker.api.auth import loaded_worker, require_principal
from genworker.api.bodies import RequestBody
from genworker.api.deps import get_runtime
from genworker.api.errors import ApiError, error_responses
from genworker.api.params import RunId, WorkerId
from genworker.api.routes.chat import run_summary
from genworker.api.runs import router_of
from genworker.auth import Principal
from genworker.runtime.composition import Runtime
from genworker.worker.lifecycle import RunNotFound, TaskLifecycleError
from genworker.worker.task import GoalVerdict, RunRecord, RunRef, RunState

router = APIRouter(prefix="/api/v1/workers/{worker_id}", tags=["runs"], responses=error_responses(404, 503))
_RUN: TypeAdapter[RunRecord] = TypeAdapter(RunRecord)
_VERDICT: TypeAdapter[GoalVerdict] = TypeAdapter(GoalVerdict)

Auth = Annotated[Principal, Depends(require_principal)]
RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


def _worker(principal: Principal, runtime: Runtime, worker_id: str) -> tuple[str, str]:
    return loaded_worker(principal, runtime, worker_id).key


@router.get("/runs", summary="A worker's runs, newest first")
async def list_runs(
    worker_id: WorkerId, principal: Auth, runtime: RuntimeDep, limit: Annotated[int, Query(ge=1, le=500)] = 50
) -> dict[str, Any]:
    tenant_id, worker = _worker(principal, runtime, worker_id)
    runs = await router_of(runtime).tasks.list_runs(tenant_id, worker, limit=limit)
    return {"worker_id": worker, "runs": [run_summary(r) for r in runs]}


@router.get("/runs/{run_id}", summary="One run: state, provenance, tool calls, model usage, deliverables")
async def get_run(worker_id: WorkerId, run_id: RunId, principal: Auth, runtime: RuntimeDep) -> Any:
    tenant_id, worker = _worker(principal, runtime, worker_id)
    try:
        run = await router_of(runtime).tasks.get_run(RunRef(tenant_id, worker, run_id))
    except (RunNotFound, ValueError):
        raise ApiError(404, "run_not_found", f"no run {run_id!r} for worker {worker_id!r}") from None
    except TaskLifecycleError as exc:
        raise ApiError(500, "run_unreadable", str(exc)) from None
    return _RUN.dump_python(run, mode="json")


class GoalEvaluationBody(RequestBody):
    again: bool = Field(False, description="judge a run that has a verdict again (its goal task never advances twice)")


@router.post(
    "/runs/{run_id}/goal-evaluation",
    summary="Judge a completed run against its goal task and move the goal on a met verdict (docs/goals.md)",
    responses=error_responses(409),
)
async def evaluate_goal(
    worker_id: WorkerId,
    run_id: RunId,
    principal: Auth,
    runtime: RuntimeDep,
    body: GoalEvaluationBody | None = None,
) -> dict[str, Any]:
    tenant_id, worker = _worker(principal, runtime, worker_id)
    projector = runtime.services.lifecycle.projector
    if projector is None or projector.evaluator is None:
        raise ApiError(503, "goal_evaluation_off", "goal evaluation is off on this runtime (GENWORKER_GOAL_EVALUATION)")
    ref = RunRef(tenant_id, worker, run_id)
    try:
        run = await router_of(runtime).tasks.get_run(ref)
    except (RunNotFound, ValueError):
        raise ApiError(404, "run_not_found", f"no run {run_id!r} for worker {worker_id!r}") from None
    except TaskLifecycleError as exc:
        raise ApiError(500, "run_unreadable", str(exc)) from None
    if run.state is not RunState.COMPLETED:
        raise ApiError(409, "run_not_completed", f"run {run_id!r} is {run.state}: only a completed run is judged")
    done = await projector.evaluate(ref, again=(body or GoalEvaluationBody()).again)
    verdict = done.run.goal_verdict
    return {
        "run_id": run_id,
        "goal_status": str(done.run.goal_status),
        "judged": done.judged,
        "goal_verdict": None if verdict is None else _VERDICT.dump_python(verdict, mode="json"),
        "changes": [{"goal_id": c.goal.goal_id, "file": c.rel, "changed": c.changed} for c in done.changes],
    }
