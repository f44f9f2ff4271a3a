"""A worker's metrics, read by its condition triggers: report one, list the reported ones.

Built-in `inbox.*` metrics are read live from the inbox and cannot be reported.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field

from genworker.api.auth import loaded_worker, require_principal
from genworker.api.deps import get_runtime
from genworker.api.errors import ApiError
from genworker.auth import Principal
from genworker.autonomy.duties import MetricError, WorkerMetrics
from genworker.runtime.composition import Runtime

__all__ = ["router"]

router = APIRouter(prefix="/api/v1/workers/{worker_id}/metrics", tags=["duties"])

Auth = Annotated[Principal, Depends(require_principal)]
RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


class MetricBody(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"value": 12}, {"value": True}]})
    value: bool | float = Field(description="a finite number, or true/false")


def _metrics(runtime: Runtime) -> WorkerMetrics:
    if not isinstance(runtime.metrics, WorkerMetrics):
        raise ApiError(503, "metrics_unavailable", "this runtime reads condition metrics from another source")
    return runtime.metrics


@router.put("/{name}", summary="Report a metric's current value (condition triggers compare it with their rule)")
async def report_metric(
    worker_id: str, name: str, body: MetricBody, principal: Auth, runtime: RuntimeDep
) -> dict[str, Any]:
    worker = loaded_worker(principal, runtime, worker_id)
    try:
        entry = await _metrics(runtime).report(worker.tenant_id, worker.worker_id, name, body.value)
    except MetricError as exc:
        raise ApiError(422, "invalid_metric", str(exc)) from None
    return {"name": name, **entry}


@router.get("", summary="The worker's reported metrics and the built-in inbox counts")
async def list_metrics(worker_id: str, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
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
