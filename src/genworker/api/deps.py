"""Request dependencies shared by the routes: the runtime and each of its services, typed.

The app factory (`api/app.py`) declares everything it keeps on `app.state` and sets it once the
runtime has started; nothing else writes there. A service the runtime does not run answers its
503 here, in one place, not in each route.
"""

from __future__ import annotations

import hmac
from ipaddress import ip_address
from typing import Annotated

from fastapi import Depends, HTTPException, Request

from genworker.api.errors import ApiError
from genworker.api.ratelimit import Limiter
from genworker.auth import ApiKeyStore
from genworker.autonomy.briefs import BriefService
from genworker.autonomy.duties import DutyScheduler
from genworker.autonomy.duties.outcomes import DutyOutcomes
from genworker.autonomy.goals import GoalAggregate
from genworker.autonomy.heartbeat import HeartbeatService
from genworker.autonomy.inbox import InboxAggregate, InboxStore
from genworker.autonomy.suggestions import FeedbackStore, SuggestionAggregate
from genworker.autonomy.waiting import WaitingService
from genworker.channels.ingest import Channels
from genworker.channels.outbound import ChannelDelivery
from genworker.delivery.outbox import Outbox
from genworker.runtime.composition import Runtime

__all__ = [
    "RuntimeDep",
    "api_keys_of",
    "briefs_of",
    "channels_of",
    "delivery_of",
    "duties_of",
    "duty_outcomes_of",
    "feedback_of",
    "get_runtime",
    "goals_of",
    "heartbeat_of",
    "inbox_aggregate_of",
    "inbox_of",
    "outbox_of",
    "require_admin",
    "runtime_of",
    "service_limiters_of",
    "suggestions_of",
    "waiting_of",
]


def runtime_of(request: Request) -> Runtime:
    runtime: Runtime | None = request.app.state.runtime
    if runtime is None:
        raise HTTPException(503, "runtime is starting")
    return runtime


def api_keys_of(request: Request) -> ApiKeyStore:
    """The tenants' API keys over the runtime's workspace."""
    store: ApiKeyStore | None = request.app.state.api_keys
    if store is None:
        raise HTTPException(503, "runtime is starting")
    return store


def service_limiters_of(request: Request) -> tuple[Limiter, Limiter]:
    """The anonymous service route's limits: per client and worker, per worker."""
    limiters: tuple[Limiter, Limiter] | None = request.app.state.service_limiters
    if limiters is None:
        raise HTTPException(503, "runtime is starting")
    return limiters


# The dependencies are `async def`: FastAPI runs a plain `def` dependency in its thread pool, one
# thread hand-off and back per request for a lookup on `app.state`.


async def get_runtime(request: Request) -> Runtime:
    return runtime_of(request)


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


def inbox_of(runtime: Runtime) -> InboxStore:
    if runtime.inbox is None:
        raise ApiError(503, "inbox_unavailable", "the inbox is not configured on this runtime")
    return runtime.inbox


def inbox_aggregate_of(runtime: Runtime) -> InboxAggregate:
    if runtime.inbox_aggregate is None:
        raise ApiError(503, "inbox_unavailable", "the inbox is not configured on this runtime")
    return runtime.inbox_aggregate


def heartbeat_of(runtime: Runtime) -> HeartbeatService:
    if runtime.heartbeat is None:
        raise ApiError(503, "heartbeat_unavailable", "the heartbeat is not configured on this runtime")
    return runtime.heartbeat


def briefs_of(runtime: Runtime) -> BriefService:
    if runtime.briefs is None:
        raise ApiError(503, "briefs_unavailable", "briefs are not configured on this runtime")
    return runtime.briefs


def goals_of(runtime: Runtime) -> GoalAggregate:
    if runtime.goals is None:
        raise ApiError(503, "goals_unavailable", "goals are not configured on this runtime")
    return runtime.goals


def suggestions_of(runtime: Runtime) -> SuggestionAggregate:
    if runtime.suggestions is None:
        raise ApiError(503, "suggestions_unavailable", "suggestions are not configured on this runtime")
    return runtime.suggestions


def feedback_of(runtime: Runtime) -> FeedbackStore:
    if runtime.feedback is None:
        raise ApiError(503, "feedback_unavailable", "feedback is not configured on this runtime")
    return runtime.feedback


def duties_of(runtime: Runtime) -> DutyScheduler:
    if runtime.duties is None:
        raise ApiError(503, "duties_unavailable", "the duty scheduler is not configured on this runtime")
    return runtime.duties


def duty_outcomes_of(runtime: Runtime) -> DutyOutcomes:
    if runtime.duty_outcomes is None:
        raise ApiError(503, "duties_unavailable", "duty delivery is not configured on this runtime")
    return runtime.duty_outcomes


def waiting_of(runtime: Runtime) -> WaitingService:
    if runtime.waiting is None:
        raise ApiError(503, "waiting_unavailable", "WAITING plans are not configured on this runtime")
    return runtime.waiting


def outbox_of(runtime: Runtime) -> Outbox:
    if runtime.outbox is None:
        raise ApiError(503, "outbox_unavailable", "the outbox is not running on this server")
    return runtime.outbox


def channels_of(runtime: Runtime) -> Channels:
    if runtime.channels is None:
        raise ApiError(503, "channels_unavailable", "channel ingress is not running on this server")
    return runtime.channels


def delivery_of(runtime: Runtime) -> ChannelDelivery:
    if runtime.channel_replier is None:
        raise ApiError(503, "unavailable", "channel delivery is not running")
    return runtime.channel_replier


async def require_admin(request: Request) -> None:
    """Operator endpoints: `Authorization: Bearer $GENWORKER_ADMIN_TOKEN`, or loopback when
    no admin token is configured."""
    runtime = runtime_of(request)
    token = runtime.settings.admin_token
    if token:
        given = request.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            raise HTTPException(401, "Authorization header must be 'Bearer <GENWORKER_ADMIN_TOKEN>'")
        return
    host = request.client.host if request.client else ""
    try:
        loopback = ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise HTTPException(403, "operator endpoint: set GENWORKER_ADMIN_TOKEN to call it from another host")
