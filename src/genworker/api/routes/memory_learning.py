"""Learning through evaluation over HTTP (docs/learning-evaluation.md): memory candidates filed from a
worker's runs, their promotion one level up (run -> duty -> worker -> tenant) through the evaluation
gate, the promoted facts with their validity in time, and the rollback of a promotion. Tenant-scoped.

Unknown worker, run, candidate, fact or experiment: 404. A promotion or rollback the rules refuse: 409
with the rule as the error code (evaluation_required, evaluation_failed, supervisor_objected,
not_next_level, already_known, candidate_rejected, promoted_further, not_active).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from pydantic import Field

from genworker.api.auth import loaded_worker, require_principal
from genworker.api.bodies import RequestBody
from genworker.api.deps import get_runtime
from genworker.api.errors import ApiError, error_responses
from genworker.api.params import ID_MAX_LENGTH, ID_SCHEMA_PATTERN, WorkerId, id_path
from genworker.api.runs import router_of
from genworker.auth import Principal
from genworker.experiments.errors import ExperimentFileError, ExperimentNotFound
from genworker.experiments.models import Experiment
from genworker.experiments.store import ExperimentStore
from genworker.memory.candidates import Candidate, CandidateStore
from genworker.memory.episodes import worker_memory_dir
from genworker.memory.errors import MemoryPolicyError
from genworker.memory.models import Provenance
from genworker.memory.promotion import (
    Evaluation,
    PromotionNotFound,
    PromotionRefused,
    Promotions,
    SupervisorVerdict,
    propose_from_run,
)
from genworker.runtime.composition import Runtime
from genworker.supervision.errors import PolicyError
from genworker.supervision.service import run_record
from genworker.worker.lifecycle import RunNotFound
from genworker.worker.task import GoalStatus, RunRecord, RunRef, RunState

__all__ = ["router"]

router = APIRouter(prefix="/api/v1/workers/{worker_id}", tags=["memory"], responses=error_responses(404, 503))

Auth = Annotated[Principal, Depends(require_principal)]
RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
CandidateId = Annotated[str, id_path("memory candidate id")]
FactId = Annotated[str, id_path("promoted fact id")]
_ID = r"[A-Za-z0-9](?:\.?[A-Za-z0-9_-])*\.?"
ScopeFilter = Annotated[
    str | None, Query(pattern=f"^(duty|worker|tenant):{_ID}$", max_length=140, description="e.g. duty:billing")
]


def _id_field(description: str) -> Any:
    return Field(min_length=1, max_length=ID_MAX_LENGTH, pattern=ID_SCHEMA_PATTERN, description=description)


class CandidateBody(RequestBody):
    run_id: str = _id_field("the completed run the candidate comes from (its provenance)")
    text: str = Field(min_length=1, max_length=4000, pattern=r"\S", description="what was learned")
    key: str = Field(min_length=1, max_length=200, pattern=r"\S", description="what it is about (conflicts by key)")
    kind: Literal["fact", "rule", "preference", "summary"] = "fact"


class ReplayEvaluation(RequestBody):
    kind: Literal["replay"]
    run_id: str = _id_field("a later run of this worker that replayed the task with the candidate")


class ExperimentEvaluation(RequestBody):
    kind: Literal["experiment"]
    experiment_id: str = _id_field("an experiment of this worker (docs/experiments.md)")


class PromoteBody(RequestBody):
    to: Literal["duty", "worker", "tenant"] = Field(description="the next level: one above where it is now")
    evaluation: Annotated[ReplayEvaluation | ExperimentEvaluation, Field(discriminator="kind")] | None = None


@dataclass(frozen=True, slots=True)
class _Worker:
    root: Path
    tenant_id: str
    worker_id: str


def _worker(principal: Principal, runtime: Runtime, worker_id: str) -> _Worker:
    tenant_id, name = loaded_worker(principal, runtime, worker_id).key
    return _Worker(runtime.registry.root, tenant_id, name)


async def _run(runtime: Runtime, w: _Worker, run_id: str) -> RunRecord:
    try:
        return await router_of(runtime).tasks.get_run(RunRef(w.tenant_id, w.worker_id, run_id))
    except (RunNotFound, ValueError):
        raise ApiError(404, "run_not_found", f"no run {run_id!r} for worker {w.worker_id!r}") from None


async def _blocking(call: Any) -> Any:
    """A file operation in a thread, its refusals as API errors."""
    try:
        return await asyncio.to_thread(call)
    except PromotionNotFound as exc:
        raise ApiError(404, "not_found", str(exc)) from None
    except PromotionRefused as exc:
        raise ApiError(409, exc.code, str(exc)) from None


@router.post(
    "/memory/candidates",
    status_code=201,
    summary="File what a completed run learned as a memory candidate (its run partition)",
    responses=error_responses(400, 409),
)
async def file_candidate(worker_id: WorkerId, body: CandidateBody, principal: Auth, runtime: RuntimeDep) -> Any:
    w = _worker(principal, runtime, worker_id)
    run = await _run(runtime, w, body.run_id)
    if run.state is not RunState.COMPLETED:
        raise ApiError(
            409, "run_not_completed", f"run {run.run_id!r} is {run.state.value}: only a completed run teaches"
        )
    provenance = Provenance(
        run_id=run.run_id, task_id=run.task_id, goal_id=run.provenance.goal_id, duty_id=run.provenance.duty_id,
        thread_id=run.thread_id, channel=run.provenance.source_type,
    )  # fmt: skip
    try:
        made = await _blocking(
            partial(propose_from_run, w.root, w.tenant_id, w.worker_id, body.text, body.key, body.kind, provenance)
        )
    except MemoryPolicyError as exc:
        raise ApiError(400, "refused_as_memory", str(exc)) from None
    return {"candidate": made.model_dump(mode="json"), "level": "run"}


@router.get("/memory/candidates", summary="The worker's memory candidates, each with its level and the next one")
async def candidates(worker_id: WorkerId, principal: Auth, runtime: RuntimeDep) -> Any:
    w = _worker(principal, runtime, worker_id)

    def read() -> list[dict[str, Any]]:
        promotions = Promotions(w.root)
        facts = [f for f in promotions.facts(w.tenant_id, w.worker_id) if f.status != "rolled_back"]
        out = []
        for c in CandidateStore(worker_memory_dir(w.root, w.tenant_id, w.worker_id)).all():
            held = [f.level for f in facts if f.provenance.candidate_id == c.candidate_id]
            level = max(held, key=("run", "duty", "worker", "tenant").index, default="run")
            out.append({**c.model_dump(mode="json"), "level": level, "next": promotions.next_level(c, facts)})
        return out

    return {"candidates": await asyncio.to_thread(read)}


@router.post(
    "/memory/candidates/{candidate_id}/promote",
    summary="Promote a candidate one level up, through the evaluation gate, with its provenance",
    responses=error_responses(409, 500),
)
async def promote(
    worker_id: WorkerId, candidate_id: CandidateId, body: PromoteBody, principal: Auth, runtime: RuntimeDep
) -> Any:
    w = _worker(principal, runtime, worker_id)
    store = CandidateStore(worker_memory_dir(w.root, w.tenant_id, w.worker_id))
    try:
        candidate = await asyncio.to_thread(store.get, candidate_id)
    except LookupError as exc:
        raise ApiError(404, "candidate_not_found", str(exc)) from None
    evaluation = await _evaluation(runtime, w, body, candidate)
    supervisor = await _supervisor(w, candidate.provenance.run_id)
    by = f"key:{principal.key_id}"
    fact = await _blocking(
        partial(Promotions(w.root).promote, w.tenant_id, w.worker_id, candidate_id, body.to, evaluation, supervisor, by)
    )
    return {"fact": fact.model_dump(mode="json")}


@router.get("/memory/facts", summary="Promoted facts with their validity in time (superseded, rolled back included)")
async def facts(
    worker_id: WorkerId,
    principal: Auth,
    runtime: RuntimeDep,
    scope: ScopeFilter = None,
    key: Annotated[str | None, Query(max_length=200)] = None,
    status: Annotated[Literal["active", "superseded", "rolled_back"] | None, Query()] = None,
) -> Any:
    w = _worker(principal, runtime, worker_id)
    found = await asyncio.to_thread(Promotions(w.root).facts, w.tenant_id, w.worker_id)
    wanted = [
        f
        for f in found
        if (scope is None or f.scope == scope) and (key is None or f.key == key) and (status in (None, f.status))
    ]
    return {"facts": [f.model_dump(mode="json") for f in sorted(wanted, key=lambda f: f.valid_from)]}


@router.post(
    "/memory/facts/{fact_id}/rollback",
    summary="Roll a promotion back: its fact ends, what it superseded is valid again",
    responses=error_responses(409),
)
async def rollback(worker_id: WorkerId, fact_id: FactId, principal: Auth, runtime: RuntimeDep) -> Any:
    w = _worker(principal, runtime, worker_id)
    by = f"key:{principal.key_id}"
    fact = await _blocking(partial(Promotions(w.root).rollback, w.tenant_id, w.worker_id, fact_id, by))
    return {"fact": fact.model_dump(mode="json")}


async def _evaluation(runtime: Runtime, w: _Worker, body: PromoteBody, candidate: Candidate) -> Evaluation | None:
    """The gate's evaluation, read from the worker's own records (a client's word is not a verdict). It
    must be of this candidate: a replay is a run queued after the candidate was filed (not its own run),
    an experiment one created after it whose winning variant's instructions carry its text."""
    match body.evaluation:
        case None:
            return None
        case ReplayEvaluation(run_id=run_id):
            run = await _run(runtime, w, run_id)
            if run_id == candidate.provenance.run_id or run.timings.queued_at < candidate.created_at:
                detail = "a replay is a run queued after the candidate was filed, not its own run or an earlier one"
                return Evaluation(kind="replay", ref=run_id, passed=False, detail=detail)
            passed = run.state is RunState.COMPLETED and run.goal_status is not GoalStatus.NOT_MET
            detail = f"the replay run is {run.state.value}, goal {run.goal_status.value}"
            return Evaluation(kind="replay", ref=run_id, passed=passed, detail=detail)
        case ExperimentEvaluation(experiment_id=experiment_id):
            experiment = await asyncio.to_thread(_experiment, w, experiment_id)
            detail = f"the experiment is {experiment.state}" + (
                f", winner {experiment.winner}" if experiment.winner else ""
            )
            tried = _words(experiment.spec.variants[experiment.winner].instructions) if experiment.winner else ""
            if _words(candidate.text) not in tried or experiment.created_at < candidate.created_at:
                detail += "; no winning variant created after the candidate carries its text in its instructions"
                return Evaluation(kind="experiment", ref=experiment_id, passed=False, detail=detail)
            passed = experiment.state == "succeeded"
            return Evaluation(kind="experiment", ref=experiment_id, passed=passed, detail=detail)


def _words(text: str) -> str:
    return " ".join(text.casefold().split())


def _experiment(w: _Worker, experiment_id: str) -> Experiment:
    """An experiment of the worker, from its store (docs/experiments.md)."""
    try:
        experiment = ExperimentStore(w.root).get(w.tenant_id, w.worker_id, experiment_id)
    except ExperimentNotFound as exc:
        raise ApiError(404, "experiment_not_found", str(exc)) from None
    except (OSError, ExperimentFileError) as exc:
        raise ApiError(500, "experiment_unreadable", str(exc)) from None
    return experiment


async def _supervisor(w: _Worker, run_id: str | None) -> SupervisorVerdict:
    if run_id is None:
        return SupervisorVerdict()
    try:
        record = await asyncio.to_thread(run_record, w.root, w.tenant_id, w.worker_id, run_id)
    except (PolicyError, ValueError) as exc:
        raise ApiError(500, "supervision_unreadable", str(exc)) from None
    if record is None:
        return SupervisorVerdict()
    return SupervisorVerdict(
        state=str(record.get("state")),
        decisions=len(record.get("decisions") or ()),
        policies=tuple(record.get("policies") or ()),
    )
