"""ExperimentService: create an experiment, hold it for a person's review when a model wrote its
protocol, run its variants through the WorkerRouter, evaluate them with the one protocol, pick the
best successful one and write its candidate version; recover what a stopped process left.

Each variant is one run of source `experiment` (autonomous, bound to no duty: the governance stage
gives it the read-only `proposal_only` posture, so write and external tools are refused), not
conversational (no thread: its memory binding reads its own run partition, the worker's and the
tenant's, and its episode is sealed into `run:<its run>`), with its own run id and so its own scratch
folder. No variant can read another's memory or change the user's workspace."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
import weakref
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from genworker.experiments.candidate import candidate_text, target_file
from genworker.experiments.errors import ExperimentConflict, ExperimentNotFound, SpecError
from genworker.experiments.evaluation import RunFacts, best, evaluate
from genworker.experiments.models import Experiment, ExperimentSpec, Variant, VariantResult
from genworker.experiments.store import ExperimentStore
from genworker.supervision.errors import PolicyError
from genworker.supervision.service import run_record
from genworker.worker.confirmations.store import ConfirmationStore
from genworker.worker.router import WorkerRouter
from genworker.worker.routing import RouteDone, RouteError, RouteRequest, RunOverrides, run_to_end
from genworker.workspace.snapshot import Worker

__all__ = ["ExperimentService"]

log = logging.getLogger("genworker.experiments")


def _now() -> datetime:
    return datetime.now(UTC)


class ExperimentService:
    def __init__(
        self,
        router: WorkerRouter,
        confirmations: ConfirmationStore,
        *,
        owner: str | None = None,
        alive: Callable[[str], bool] = lambda _: False,
    ) -> None:
        self.router, self.confirmations, self.owner, self.alive = router, confirmations, owner, alive
        self.root = router.registry.root
        self.store = ExperimentStore(self.root)
        self._tasks: dict[tuple[str, str, str], asyncio.Task[None]] = {}
        self._locks: weakref.WeakValueDictionary[tuple[str, str, str], asyncio.Lock] = weakref.WeakValueDictionary()

    # -- asking -----------------------------------------------------------------------------

    async def create(
        self, tenant_id: str, worker_id: str, spec: ExperimentSpec, by: str, experiment_id: str | None = None
    ) -> Experiment:
        """Store the experiment and start it, or, when a model wrote its protocol and it is not a cheap
        template set to auto-accept, ask a person to review it first (a confirmation of kind review).
        SpecError for what the worker lacks; ExperimentConflict `exists` for a taken id."""
        worker = self._worker(tenant_id, worker_id)
        _check(worker, spec)
        now = _now()
        experiment = Experiment(
            experiment_id=experiment_id or f"exp_{uuid.uuid4().hex[:12]}", tenant_id=tenant_id, worker_id=worker_id,
            spec=spec, state="awaiting_review" if spec.needs_review else "running", created_at=now, created_by=by,
            updated_at=now, owner=None if spec.needs_review else self.owner,
            variants=[VariantResult(name=name) for name in spec.variants],
        )  # fmt: skip
        if not await asyncio.to_thread(self.store.create, experiment):
            raise ExperimentConflict("exists", f"experiment {experiment.experiment_id!r} exists")
        if spec.needs_review:
            return await self._ask_review(experiment)
        self._start(experiment)
        return experiment

    async def start(self, tenant_id: str, worker_id: str, experiment_id: str, by: str) -> Experiment:
        """Run an experiment its review let through: 409 `review_pending` while the person has not
        decided, `review_rejected` (and the experiment rejected) after a rejection."""
        key = (tenant_id, worker_id, experiment_id)
        async with self._lock(key):
            experiment = await self.get(tenant_id, worker_id, experiment_id)
            if experiment.state != "awaiting_review":
                raise ExperimentConflict("not_awaiting_review", f"experiment {experiment_id!r} is {experiment.state}")
            if experiment.review_confirmation_id is None:  # stored, then the confirmation was not: ask now
                asked = await self._ask_review(experiment)
                raise ExperimentConflict("review_pending", f"confirmation {asked.review_confirmation_id} now asks")
            confirmation = await asyncio.to_thread(
                self.confirmations.get, tenant_id, worker_id, experiment.review_confirmation_id
            )
            status = confirmation.status if confirmation is not None else "missing"
            if status == "pending":
                raise ExperimentConflict(
                    "review_pending",
                    f"a model wrote this protocol: confirmation {experiment.review_confirmation_id} waits for a person",
                )
            if status != "approved":
                await self._save(experiment, state="rejected", reason=f"its review was {status}")
                raise ExperimentConflict("review_rejected", f"the protocol's review was {status}: it will not run")
            started = await self._save(experiment, state="running", owner=self.owner, reason="")
        self._start(started)
        return started

    async def get(self, tenant_id: str, worker_id: str, experiment_id: str) -> Experiment:
        return await asyncio.to_thread(self.store.get, tenant_id, worker_id, experiment_id)

    async def list(self, tenant_id: str, worker_id: str) -> list[Experiment]:
        return await asyncio.to_thread(self.store.listed, tenant_id, worker_id)

    async def wait(self, tenant_id: str, worker_id: str, experiment_id: str, timeout_s: float) -> Experiment:
        """The experiment once this process has finished running it (or after `timeout_s`)."""
        task = self._tasks.get((tenant_id, worker_id, experiment_id))
        if task is not None:
            await asyncio.wait([task], timeout=timeout_s)
        return await self.get(tenant_id, worker_id, experiment_id)

    # -- lifecycle --------------------------------------------------------------------------

    async def recover(self) -> int:
        """At start: experiments left running by a process that is not alive (or by this one's
        predecessor) are interrupted, as their variants' runs were; returns how many."""

        def dead() -> list[Experiment]:  # blocking: the file leases are files
            left = self.store.all_running()
            return [e for e in left if not (e.owner and e.owner != self.owner and self.alive(e.owner))]

        stopped = await asyncio.to_thread(dead)
        for experiment in stopped:
            await self._save(experiment, state="interrupted", reason=f"its process ({experiment.owner}) stopped")
        return len(stopped)

    async def stop(self) -> None:
        """Cancel the experiments running here; each is stored as interrupted."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    # -- running ----------------------------------------------------------------------------

    def _start(self, experiment: Experiment) -> None:
        key = (experiment.tenant_id, experiment.worker_id, experiment.experiment_id)
        task = asyncio.create_task(self._run(experiment), name=f"experiment:{experiment.experiment_id}")
        self._tasks[key] = task
        task.add_done_callback(lambda _: self._tasks.pop(key, None))

    async def _run(self, experiment: Experiment) -> None:
        key = (experiment.tenant_id, experiment.worker_id, experiment.experiment_id)
        spec = experiment.spec
        gate = asyncio.Semaphore(spec.max_parallel)
        try:
            results = await asyncio.gather(*(self._variant(experiment, n, v, gate) for n, v in spec.variants.items()))
            winner = best(results)
            async with self._lock(key):
                current = await self.get(*key)
                if winner is None:
                    await self._save(current, variants=results, state="failed", reason="no variant succeeded")
                    return
                candidate = await self._candidate(current, winner.name, spec.variants[winner.name])
                await self._save(current, variants=results, state="succeeded", winner=winner.name, candidate=candidate)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._interrupted(key, "the runtime stopped while it ran"))
            raise
        except Exception as exc:
            log.exception("[Experiments] experiment %s failed", experiment.experiment_id)
            await self._interrupted(key, f"internal error: {type(exc).__name__}")

    async def _variant(
        self, experiment: Experiment, name: str, variant: Variant, gate: asyncio.Semaphore
    ) -> VariantResult:
        tools = tuple(variant.tools) if variant.tools is not None else None
        overrides = RunOverrides(variant.tier, variant.instructions, tools)
        req = RouteRequest(
            experiment.tenant_id, experiment.worker_id, experiment.spec.question, "experiment",
            f"experiment:{experiment.experiment_id}", conversational=False, skill_id=variant.skill,
            idempotency_key=f"experiment:{experiment.experiment_id}:{name}", overrides=overrides,
        )  # fmt: skip
        done: RouteDone | None = None
        error = "the run ended without a result"
        async with gate:
            try:
                done = await run_to_end(self.router.route_stream(req))
            except RouteError as exc:
                error = f"{exc.code}: {exc}"
        if done is None:
            facts = RunFacts("failed", "", 0, 0, 0.0, error=error)
            result = VariantResult(name=name, run_state="failed", error=error)
        else:
            facts = await self._facts(experiment, done)
            result = VariantResult(
                name=name, run_id=done.record.run_id, run_state=facts.state, output=facts.output,
                error=facts.error,
            )  # fmt: skip
        result = result.model_copy(update={"evaluation": evaluate(experiment.spec.protocol, facts)})
        await self._record_variant(experiment, result)
        return result

    async def _facts(self, experiment: Experiment, done: RouteDone) -> RunFacts:
        record = done.record
        try:
            supervision = await asyncio.to_thread(
                run_record, self.root, experiment.tenant_id, experiment.worker_id, record.run_id
            )
        except PolicyError:
            log.warning("[Experiments] run %s: its supervision record is unreadable", record.run_id)
            supervision = None
        decisions: list[dict[str, Any]] = (supervision or {}).get("decisions", [])
        error = record.error.message if record.error is not None else (done.result.error or None)
        return RunFacts(
            state=record.state.value,
            output=done.result.output,
            tool_calls=len(record.tool_calls),
            tokens=sum(u.prompt_tokens + u.completion_tokens for u in record.model_usage),
            run_ms=record.timings.run_ms or 0.0,
            error=error,
            decisions=tuple(decisions),
        )

    async def _record_variant(self, experiment: Experiment, result: VariantResult) -> None:
        key = (experiment.tenant_id, experiment.worker_id, experiment.experiment_id)
        async with self._lock(key):
            current = await self.get(*key)
            variants = [result if v.name == result.name else v for v in current.variants]
            await self._save(current, variants=variants)

    async def _candidate(self, experiment: Experiment, name: str, winner: Variant) -> dict[str, Any] | None:
        target = experiment.spec.target
        if target is None:
            return None
        production = target_file(self._worker(experiment.tenant_id, experiment.worker_id), target)
        text, base = await asyncio.to_thread(
            candidate_text, self.root, production, experiment.experiment_id, name, winner
        )
        path = await asyncio.to_thread(self.store.write_candidate, experiment, text)
        return {"target": target.model_dump(), "production": production, "path": path, "base_sha256": base}

    async def _ask_review(self, experiment: Experiment) -> Experiment:
        names = ", ".join(experiment.spec.variants)
        confirmation = await self.confirmations.request(
            tenant_id=experiment.tenant_id, worker_id=experiment.worker_id, run_id=experiment.experiment_id,
            task_id=experiment.experiment_id, thread_id=experiment.experiment_id,
            text=f"A model wrote the protocol of experiment {experiment.experiment_id} ({names}): review it before "
            f"it runs. Question: {experiment.spec.question[:300]}",
            skill_id=None, gate_ref=None, reasons=("experiment_protocol_review: a model wrote it",), kind="review",
            source_type="experiment", source_id=f"experiment:{experiment.experiment_id}",
        )  # fmt: skip
        return await self._save(experiment, review_confirmation_id=confirmation.confirmation_id)

    async def _interrupted(self, key: tuple[str, str, str], reason: str) -> None:
        async with self._lock(key):
            current = await self.get(*key)
            if current.state == "running":
                await self._save(current, state="interrupted", reason=reason)

    async def _save(self, experiment: Experiment, **changes: Any) -> Experiment:
        updated = experiment.model_copy(update={**changes, "updated_at": _now()})
        await asyncio.to_thread(self.store.save, updated)
        return updated

    def _lock(self, key: tuple[str, str, str]) -> asyncio.Lock:
        return self._locks.setdefault(key, asyncio.Lock())

    def _worker(self, tenant_id: str, worker_id: str) -> Worker:
        worker = self.router.registry.worker(tenant_id, worker_id)
        if worker is None:
            raise ExperimentNotFound(f"{worker_id} (no such worker)")
        return worker


def _check(worker: Worker, spec: ExperimentSpec) -> None:
    """What the spec names must exist on the worker (SpecError `field: problem`)."""
    for name, variant in spec.variants.items():
        if variant.skill is not None and variant.skill not in worker.skills:
            raise SpecError(f"variants.{name}.skill: worker {worker.worker_id!r} has no skill {variant.skill!r}")
    if spec.target is not None:
        target_file(worker, spec.target)
