"""A worker's outbox over HTTP: the proactive messages it still owes people, and a person's re-send.

    GET  /api/v1/workers/{w}/outbox                       undelivered entries (sending, retrying,
                                                          given_up, outcome_unknown), oldest first
    POST /api/v1/workers/{w}/outbox/{entry_id}/resend     send a given_up / outcome_unknown entry again now

Tenant-scoped like every worker route: the tenant is the key's, never the body's, and a worker the key
may not use is 404. A re-send is claimed under the worker's outbox lock, so of two calls at once, in this
process or another on the same workspace, one sends and the other is a 409 naming the state it found.
It is recorded on the entry (`resent_by`: the key) and announced (`outbox.sending`, then the attempt's
own event). docs/delivery.md "The outbox".
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query

from genworker.api.auth import loaded_worker, require_principal
from genworker.api.deps import get_runtime
from genworker.api.errors import ApiError, error_responses
from genworker.api.params import WorkerId, id_path
from genworker.auth import Principal
from genworker.delivery.outbox import UNDELIVERED, OutboxEntry, OutboxError, OutboxNotFound
from genworker.runtime.composition import Runtime

__all__ = ["UndeliveredState", "router"]

router = APIRouter(prefix="/api/v1/workers/{worker_id}/outbox", tags=["outbox"], responses=error_responses(404, 503))

Auth = Annotated[Principal, Depends(require_principal)]
RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
EntryId = Annotated[str, id_path("outbox entry id")]
UndeliveredState = Literal["sending", "retrying", "given_up", "outcome_unknown"]  # outbox.UNDELIVERED


@router.get("", summary="Messages the worker still owes people: being sent, re-sent, given up, or of unknown outcome")
async def list_undelivered(
    worker_id: WorkerId,
    principal: Auth,
    runtime: RuntimeDep,
    state: Annotated[UndeliveredState | None, Query(description="only entries in this state")] = None,
) -> dict[str, Any]:
    """`counts` are of every undelivered entry; `entries` only those in `state` when it is given."""
    tenant_id, worker = loaded_worker(principal, runtime, worker_id).key
    found = await runtime.services.outbox.undelivered(tenant_id, worker)
    counts = Counter(e.state for e in found)
    return {
        "worker_id": worker,
        "counts": {s: counts.get(s, 0) for s in sorted(UNDELIVERED)},
        "entries": [e.describe() for e in found if state is None or e.state == state],
    }


@router.post(
    "/{entry_id}/resend",
    summary="Send a given-up (or outcome-unknown) message again now; answers once the attempt settles",
    responses=error_responses(409),
)
async def resend(worker_id: WorkerId, entry_id: EntryId, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    """404 for an id the worker has no entry under; 409 for an entry that is not given_up or
    outcome_unknown (sent, still being re-sent by the outbox, or claimed by another re-send)."""
    tenant_id, worker = loaded_worker(principal, runtime, worker_id).key
    outbox = runtime.services.outbox
    # in the runtime's background: a client that goes away does not leave the claimed entry half sent
    by = f"key:{principal.key_id}"
    task: asyncio.Task[Any] = asyncio.create_task(outbox.resend(tenant_id, worker, entry_id, by=by))
    runtime.background.add(task)
    task.add_done_callback(_settled(runtime))
    try:
        entry: OutboxEntry = await asyncio.shield(task)
    except OutboxNotFound:
        raise ApiError(404, "outbox_entry_not_found", f"worker {worker!r} has no outbox entry {entry_id!r}") from None
    except OutboxError as exc:
        raise ApiError(500, "outbox_entry_unreadable", str(exc)) from None
    except ValueError as exc:  # its state
        raise ApiError(409, "not_resendable", str(exc)) from None
    return {"entry": entry.describe(), "delivered": entry.state == "sent"}


def _settled(runtime: Runtime) -> Callable[[asyncio.Task[Any]], None]:
    def done(task: asyncio.Task[Any]) -> None:
        runtime.background.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: the caller, if still there, was told

    return done
