"""A worker's experiments over HTTP (docs/experiments.md): create one (it runs at once, or waits for
a person's review when a model wrote its protocol), start one its review let through, list them, read
one with its variants' evaluations, winner and candidate. Tenant from the key: another tenant's
worker is a 404."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, Query
from pydantic import Field

from genworker.api.auth import loaded_worker, require_principal
from genworker.api.deps import get_runtime
from genworker.api.errors import ApiError, error_responses
from genworker.api.params import WorkerId, id_path
from genworker.auth import Principal
from genworker.experiments import (
    Experiment,
    ExperimentConflict,
    ExperimentFileError,
    ExperimentNotFound,
    ExperimentService,
    ExperimentSpec,
    SpecError,
)
from genworker.experiments.models import Id
from genworker.runtime.composition import Runtime

__all__ = ["router"]

router = APIRouter(prefix="/api/v1/workers/{worker_id}/experiments", tags=["experiments"])

Auth = Annotated[Principal, Depends(require_principal)]
RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
ExperimentId = Annotated[str, id_path("experiment id")]
Wait = Annotated[bool, Query(description="answer once the experiment has ended (at most 300 s)")]
T = TypeVar("T")
WAIT_S = 300.0


class ExperimentBody(ExperimentSpec):
    """The experiment to run; `experiment_id` names it (default: a new `exp_…` id), so a supervisor
    policy can be attached to it (`kind: experiment`) before it starts."""

    experiment_id: Id | None = Field(default=None)


def _scope(principal: Principal, runtime: Runtime, worker_id: str) -> tuple[str, str, ExperimentService]:
    tenant_id, name = loaded_worker(principal, runtime, worker_id).key
    return tenant_id, name, runtime.services.experiments


async def _call(action: Callable[[], Awaitable[T]]) -> T:
    try:
        return await action()
    except SpecError as exc:  # the schema allows any id: an unknown skill or target is a 404, not a 400
        raise ApiError(404, "unknown_reference", str(exc)) from None
    except ExperimentNotFound as exc:
        raise ApiError(404, "experiment_not_found", str(exc)) from None
    except ExperimentConflict as exc:
        raise ApiError(409, exc.code, str(exc)) from None
    except ExperimentFileError as exc:
        raise ApiError(409, "experiment_unreadable", str(exc)) from None


def _view(experiment: Experiment) -> dict[str, Any]:
    return {"experiment": experiment.model_dump(mode="json")}


@router.post(
    "",
    status_code=201,
    summary="Create an experiment: its variants run isolated and read-only, the best successful one wins",
    responses=error_responses(404, 409),
)
async def create_experiment(
    worker_id: WorkerId, body: ExperimentBody, principal: Auth, runtime: RuntimeDep, wait: Wait = False
) -> dict[str, Any]:
    tenant_id, name, service = _scope(principal, runtime, worker_id)
    spec = ExperimentSpec.model_validate(body.model_dump(exclude={"experiment_id"}), strict=False)
    by = f"key:{principal.key_id}"
    return await _then_wait(service, wait, lambda: service.create(tenant_id, name, spec, by, body.experiment_id))


@router.post(
    "/{experiment_id}/start",
    summary="Run an experiment whose protocol a person has reviewed (its confirmation approved)",
    responses=error_responses(404, 409),
)
async def start_experiment(
    worker_id: WorkerId, experiment_id: ExperimentId, principal: Auth, runtime: RuntimeDep, wait: Wait = False
) -> dict[str, Any]:
    tenant_id, name, service = _scope(principal, runtime, worker_id)
    by = f"key:{principal.key_id}"
    return await _then_wait(service, wait, lambda: service.start(tenant_id, name, experiment_id, by))


async def _then_wait(
    service: ExperimentService, wait: bool, action: Callable[[], Awaitable[Experiment]]
) -> dict[str, Any]:
    """`action`'s experiment, or with `wait` the same once it has ended (at most WAIT_S)."""

    async def act() -> Experiment:
        e = await action()
        return await service.wait(e.tenant_id, e.worker_id, e.experiment_id, WAIT_S) if wait else e

    return _view(await _call(act))


@router.get("", summary="The worker's experiments, newest first", responses=error_responses(404))
async def list_experiments(worker_id: WorkerId, principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    tenant_id, name, service = _scope(principal, runtime, worker_id)
    found = await service.list(tenant_id, name)
    return {
        "experiments": [
            {
                "experiment_id": e.experiment_id, "state": e.state, "question": e.spec.question[:200],
                "variants": list(e.spec.variants), "winner": e.winner, "created_at": e.created_at.isoformat(),
            }
            for e in found
        ]
    }  # fmt: skip


@router.get(
    "/{experiment_id}",
    summary="One experiment: its variants' runs and evaluations, the winner and its candidate",
    responses=error_responses(404, 409),
)
async def get_experiment(
    worker_id: WorkerId, experiment_id: ExperimentId, principal: Auth, runtime: RuntimeDep
) -> dict[str, Any]:
    tenant_id, name, service = _scope(principal, runtime, worker_id)
    return _view(await _call(lambda: service.get(tenant_id, name, experiment_id)))
