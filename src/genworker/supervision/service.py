"""Supervision: which policies watch a run (attached to its conversation, its duty, its experiment, or
all), the watcher for it, its record kept with the run (`runtime/supervision/<run_id>.json` in the
worker folder) and `request_review` turned into a confirmation."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

from genworker.fsutil import write_atomic
from genworker.ids import safe_join, validate_id
from genworker.llm.client import LLMClient
from genworker.supervision.decisions import Decision, SupervisorState, advance
from genworker.supervision.errors import PolicyError
from genworker.supervision.policy import SupervisorPolicy, load_policies
from genworker.supervision.watch import RECORD_VERSION, RunWatcher
from genworker.worker.confirmations.store import ConfirmationStore
from genworker.worker.routing import RouteAccepted, RouteRequest

__all__ = ["Supervision", "attached", "record_path", "resolve_record", "run_record"]

log = logging.getLogger("genworker.supervision")


def attached(policy: SupervisorPolicy, req: RouteRequest, thread_id: str) -> bool:
    a = policy.attach
    source = req.source_id or ""
    experiment = source.removeprefix("experiment:") if source.startswith("experiment:") else None
    return (
        a.all
        or thread_id in a.conversations
        or (req.duty_id is not None and req.duty_id in a.duties)
        or (experiment is not None and experiment in a.experiments)
    )


class Supervision:
    def __init__(self, root: Path, llm: LLMClient, confirmations: ConfirmationStore) -> None:
        self.root, self.llm, self.confirmations = root, llm, confirmations

    def worker_dir(self, tenant_id: str, worker_id: str) -> Path:
        return safe_join(self.root, "tenants", tenant_id, "workers", worker_id)

    async def watch(self, req: RouteRequest, ids: RouteAccepted) -> RunWatcher | None:
        """The watcher of run `ids.run_id`, or None when no policy is attached to it. A broken policy
        file is logged (file: field) and left out, the others still apply; the API's list shows it."""
        folder = self.worker_dir(req.tenant_id, req.worker_id)
        policies = await asyncio.to_thread(load_policies, folder, lambda exc: log.error("[Supervisor] %s", exc))
        chosen = [p for p in policies if attached(p, req, ids.thread_id)]
        if not chosen:
            return None

        async def request_review(decision: Decision) -> str:
            confirmation = await self.confirmations.request(
                tenant_id=req.tenant_id, worker_id=req.worker_id, run_id=ids.run_id, task_id=ids.task_id,
                thread_id=ids.thread_id, text=f"Supervisor {decision.policy!r} asks you to look at run {ids.run_id}: "
                f"{decision.reason} (about {', '.join(decision.cites)})", skill_id=req.skill_id, gate_ref=None,
                reasons=(f"{decision.check}: {decision.reason}",), kind="review",
            )  # fmt: skip
            return confirmation.confirmation_id

        async def store(record: dict[str, Any]) -> None:
            path = record_path(self.root, req.tenant_id, req.worker_id, ids.run_id)
            await asyncio.to_thread(_write, path, {**record, "thread_id": ids.thread_id})

        return RunWatcher(ids.run_id, req.text, chosen, self.llm, request_review, store)


def record_path(root: Path, tenant_id: str, worker_id: str, run_id: str) -> Path:
    folder = safe_join(root, "tenants", tenant_id, "workers", worker_id) / "runtime" / "supervision"
    return folder / f"{validate_id(run_id, 'run id')}.json"


def run_record(root: Path, tenant_id: str, worker_id: str, run_id: str) -> dict[str, Any] | None:
    """The supervision record kept with a run, or None; blocking. PolicyError on an unknown version."""
    path = record_path(root, tenant_id, worker_id, run_id)
    if not path.is_file():
        return None
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    if data.get("schema_version") != RECORD_VERSION:
        raise PolicyError(f"{path}: schema_version: {data.get('schema_version')!r} is not supported")
    return data


def resolve_record(root: Path, tenant_id: str, worker_id: str, run_id: str, by: str) -> dict[str, Any] | None:
    """A person has looked: the run's supervisor state becomes resolved (the run's own is untouched);
    None without a record. Blocking."""
    record = run_record(root, tenant_id, worker_id, run_id)
    if record is None:
        return None
    record["state"] = advance(SupervisorState(record["state"]), "resolve").value
    record["resolved_by"] = by
    _write(record_path(root, tenant_id, worker_id, run_id), record)
    return record


def _write(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(record, ensure_ascii=False, indent=1, default=str).encode())
