"""A worker's metrics, read by its condition triggers: report one, list the reported ones.

Built-in `inbox.*` metrics are read live from the inbox and cannot be reported.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends
from pydantic import ConfigDict, Field

from genworker.api.auth import loaded_worker, require_principal
from genworker.api.bodies import RequestBody
from genworker.api.deps import get_runtime
from genworker.api.errors import ApiError, error_responses
from genworker.api.params import MetricName, WorkerId
from genworker.auth import Principal
from genworker.autonomy.duties import MetricError, WorkerMetrics
from genworker.autonomy.duties.worker_metrics import BUILTIN_PREFIX
from genworker.runtime.composition import Runtime

__all__ = ["router"]

router = APIRouter(prefix="/api/v1/workers/{worker_id}/metrics", tags=["duties"], responses=error_responses(404, 503))

Auth = Annotated[Principal, Depends(require_principal)]
RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


class MetricBody(RequestBody):
    model_config = ConfigDict(json_schema_extra={"examples": [{"value": 12}, {"value": True}]})
    value: bool | float = Field(description="a finite number, or true/false")


def _metrics(runtime: Runtime) -> WorkerMetrics:
    return runtime.services.metrics


@router.put(
    "/{name}",
    summary="Report a metric's current value (condition triggers compare it with their rule)",
    responses=error_responses(409),
)
async def report_metric(
    worker_id: WorkerId, name: MetricName, body: MetricBody, principal: Auth, runtime: RuntimeDep
) -> dict[str, Any]:
    worker = loaded_worker(principal, runtime, worker_id)
    if name.startswith(BUILTIN_PREFIX):  # a resource that exists and is read-only: not a malformed request
        raise ApiError(
            409, "metric_builtin", f"metric {name!r} is built in (read from the inbox) and cannot be reported"
        )
    try:
        entry = await _metrics(runtime).report(worker.tenant_id, worker.worker_id, name, body.value)
    except MetricError as exc:
        raise ApiError(422, "invalid_metric", str(exc)) from None
    return {"name": name, **entry}


@router.get("", summary="The worker's reported metrics and the built-in inbox counts")
async def list_metrics(worker_id: WorkerId, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    worker = loaded_worker(principal, runtime, worker_id)
    metrics = _metrics(runtime)
    try:
        reported = await metrics.values(worker.tenant_id, worker.worker_id)
    except MetricError as exc:
        raise ApiError(500, "metrics_unreadable", str(exc)) from None
    builtin = {
        f"inbox.{state}": await metrics.read(worker.tenant_id, worker.worker_id, f"inbox.{state}")
        for state in ("pending", "processing", "failed", "dead", "consumed")
    }
    return {"reported": reported, "builtin": builtin}
