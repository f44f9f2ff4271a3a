"""Operator view of the runtime: profile, components, backends, worker load errors."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends

from genworker.api.deps import get_runtime, require_admin
from genworker.api.errors import error_responses
from genworker.runtime.composition import Runtime

router = APIRouter(prefix="/api/v1/debug", dependencies=[Depends(require_admin)], responses=error_responses(401, 403))


@router.get("/runtime")
async def runtime_status(runtime: Annotated[Runtime, Depends(get_runtime)]) -> dict[str, Any]:
    return runtime.debug()
