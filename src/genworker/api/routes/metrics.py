"""`GET /metrics`: the Prometheus text exposition of the runtime's metrics.

Access (settings, docs/observability.md):
  GENWORKER_METRICS=off          the route answers 404
  GENWORKER_METRICS_TOKEN=...    scrapers must send `Authorization: Bearer <token>`; otherwise 401
  neither                        open, like /health: the page holds counts only, no tenant or
                                 worker ids, no message text
"""

from __future__ import annotations

import hmac
import logging
from collections import Counter
from typing import Annotated

from fastapi import APIRouter, Depends, Header
from fastapi.responses import Response

from genworker.api.deps import get_runtime
from genworker.api.errors import ApiError, error_responses
from genworker.observability.metrics import (
    COMPONENT_STATUS,
    CONTENT_TYPE,
    INBOX_ITEMS,
    READY,
    WORKERS,
    GaugeSample,
    render,
)
from genworker.observability.status import ComponentStatus
from genworker.runtime.composition import Runtime

__all__ = ["router"]

log = logging.getLogger("genworker.observability")

router = APIRouter(tags=["observability"])

RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
_OFF = {"0", "false", "no", "off"}


def _check_access(runtime: Runtime, authorization: str | None) -> None:
    settings = runtime.settings
    if (settings.get("GENWORKER_METRICS") or "on").strip().lower() in _OFF:
        raise ApiError(404, "not_found", "metrics are disabled (GENWORKER_METRICS=off)")
    token = settings.get("GENWORKER_METRICS_TOKEN")
    if token is None:
        return
    scheme, _, sent = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(sent.strip().encode(), token.encode()):
        message = "metrics need 'Authorization: Bearer <GENWORKER_METRICS_TOKEN>'"
        raise ApiError(401, "unauthorized", message, {"WWW-Authenticate": "Bearer"})


async def _inbox_backlog(runtime: Runtime) -> list[GaugeSample]:
    inbox = runtime.services.inbox
    totals: Counter[str] = Counter()
    try:
        for state in runtime.registry.tenants():
            for worker_id in state.workers:
                for inbox_state, count in (await inbox.counts(state.tenant_id, worker_id)).items():
                    totals[inbox_state.value] += count
    except Exception as exc:  # e.g. Redis unreachable: the rest of the page still answers
        log.warning("[Metrics] inbox backlog unavailable: %s", exc)
        return []
    help_text = "Inbox items in each state, summed over every worker."
    return [(INBOX_ITEMS, help_text, (("state", s),), float(n)) for s, n in sorted(totals.items())]


def _workers_loaded(runtime: Runtime) -> list[GaugeSample]:
    described = runtime.registry.describe()["tenants"]
    counts: Counter[str] = Counter()
    for tenant in described.values():
        for worker in tenant.get("workers", {}).values():
            counts[worker["status"]] += 1
    help_text = "Workers by load status (loaded, failed)."
    return [(WORKERS, help_text, (("status", s),), float(counts[s])) for s in ("loaded", "failed")]


def _runtime_status(runtime: Runtime) -> list[GaugeSample]:
    help_text = "1 for each component's current status (workspace, llm, redis, channels, sandbox, ...), else 0."
    samples: list[GaugeSample] = [
        (COMPONENT_STATUS, help_text, (("component", name), ("status", s.value)), float(c.status is s))
        for name, c in sorted(runtime.components.items())
        for s in ComponentStatus
    ]
    blocking, _ = runtime.readiness()
    samples.append((READY, "1 when the default chat path is ready (as /readiness).", (), float(not blocking)))
    return samples


@router.get(
    "/metrics",
    summary="Prometheus metrics (text exposition)",
    response_class=Response,
    responses={
        200: {"content": {CONTENT_TYPE: {"schema": {"type": "string"}}}},
        **error_responses(401, 404),  # a GENWORKER_METRICS_TOKEN not sent; GENWORKER_METRICS=off
    },
)
async def metrics(runtime: RuntimeDep, authorization: Annotated[str | None, Header()] = None) -> Response:
    _check_access(runtime, authorization)
    extra = [*await _inbox_backlog(runtime), *_workers_loaded(runtime), *_runtime_status(runtime)]
    return Response(render(extra), media_type=CONTENT_TYPE)
