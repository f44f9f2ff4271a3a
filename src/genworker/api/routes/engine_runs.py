"""Continuing an interrupted planning or LangGraph run (docs/engines.md): a new run picks up its plan's
finished nodes or its graph's last checkpoint."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends

from genworker.api.auth import loaded_worker, require_principal
from genworker.api.deps import get_runtime
from genworker.api.errors import ApiError, error_responses
from genworker.api.params import RunId, WorkerId
from genworker.api.routes.chat import run_summary
from genworker.api.runs import router_of, start_run
from genworker.auth import Principal
from genworker.runtime.composition import Runtime
from genworker.worker.engine_runs import NotContinuable, continuation_request
from genworker.worker.lifecycle import RunNotFound, TaskLifecycleError
from genworker.worker.router import run_to_end
from genworker.worker.task import RunRef

router = APIRouter(prefix="/api/v1/workers/{worker_id}", tags=["runs"], responses=error_responses(404, 503))

Auth = Annotated[Principal, Depends(require_principal)]
RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


@router.post(
    "/runs/{run_id}/continue",
    summary="Continue an interrupted plan or graph: finished nodes and checkpoints are kept",
    responses=error_responses(409),
)
async def continue_run(worker_id: WorkerId, run_id: RunId, principal: Auth, runtime: RuntimeDep) -> Any:
    tenant_id, worker = loaded_worker(principal, runtime, worker_id).key
    try:
        req = await continuation_request(router_of(runtime).tasks, RunRef(tenant_id, worker, run_id))
    except (RunNotFound, ValueError) as exc:
        if isinstance(exc, NotContinuable):
            raise ApiError(409, "not_continuable", str(exc)) from None
        raise ApiError(404, "run_not_found", f"no run {run_id!r} for worker {worker_id!r}") from None
    except TaskLifecycleError as exc:
        raise ApiError(500, "run_unreadable", str(exc)) from None
    handle = await start_run(runtime, req)  # in the background: a client that goes away does not stop it
    done = await run_to_end(handle.events())
    if done is None:
        raise ApiError(500, "internal_error", "the continuation ended without a result")
    return {"continued": run_id, "run": run_summary(done.record), "output": done.result.output}
