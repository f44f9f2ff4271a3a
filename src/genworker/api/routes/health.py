"""Liveness (/health) and readiness of the default chat path (/readiness)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from genworker.api.deps import get_runtime
from genworker.runtime.composition import Runtime

router = APIRouter()


@router.get("/health")
async def health(runtime: Annotated[Runtime, Depends(get_runtime)]) -> dict[str, Any]:
    status, reasons = runtime.health()
    return {"status": status, "reasons": [r.as_dict() for r in reasons]}


@router.get(
    "/readiness",
    responses={503: {"description": "not ready: `reasons` say why (the same body as 200)"}},
)
async def readiness(runtime: Annotated[Runtime, Depends(get_runtime)]) -> JSONResponse:
    blocking, warnings = runtime.readiness()
    body = {
        "status": "not_ready" if blocking else "ready",
        "reasons": [r.as_dict() for r in blocking],
        "warnings": [r.as_dict() for r in warnings],
    }
    return JSONResponse(body, status_code=503 if blocking else 200)
