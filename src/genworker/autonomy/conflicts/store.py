"""Conflict cases and plan records on disk.

Cases belong to the tenant (two workers of one tenant can conflict):
`tenants/{t}/runtime/conflicts/cases/{conflict_id}.json`. Plans belong to their worker:
`tenants/{t}/workers/{w}/runtime/conflicts/plans/{plan_id}.json`. Changes go through `update_*`,
which reads, changes and writes a file under its lock, so two processes sharing the workspace
decide a case once. Blocking: call from a thread.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from genworker.autonomy.conflicts.errors import ConflictFileError, ConflictNotFound
from genworker.autonomy.conflicts.models import (
    CaseStatus,
    ConflictCase,
    PlanRecord,
    case_from_json,
    plan_from_json,
)
from genworker.fsutil import create_exclusive, striped_lock, write_atomic
from genworker.ids import safe_join, validate_id

__all__ = ["ConflictStore", "new_conflict_id"]

log = logging.getLogger("genworker.conflicts")


def new_conflict_id() -> str:
    """Sortable by creation (nanoseconds first), unique across hosts (random tail)."""
    return f"cc_{time.time_ns():x}_{secrets.token_hex(4)}"


def _encode(data: dict[str, Any]) -> bytes:
    return json.dumps(data, ensure_ascii=False, indent=2).encode("utf-8")


class ConflictStore:
    def __init__(self, workspace_root: Path) -> None:
        self.root = workspace_root

    # -- cases ---------------------------------------------------------------------------------

    def _cases(self, tenant_id: str) -> Path:
        return safe_join(self.root, "tenants", tenant_id) / "runtime" / "conflicts" / "cases"

    def _case_path(self, tenant_id: str, conflict_id: str) -> Path:
        return self._cases(tenant_id) / f"{validate_id(conflict_id, 'conflict id')}.json"

    def add_case(self, case: ConflictCase) -> ConflictCase:
        if not create_exclusive(self._case_path(case.tenant_id, case.conflict_id), _encode(case.as_json())):
            raise ValueError(f"conflict {case.conflict_id} exists")
        for plan_id in {case.plan_a_id, case.plan_b_id}:  # so a plan's cases are found without a scan
            path = self._index(case.tenant_id, plan_id)
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a", encoding="utf-8") as fh:
                fh.write(case.conflict_id + "\n")
        return case

    def _index(self, tenant_id: str, plan_id: str) -> Path:
        name = hashlib.sha256(plan_id.encode("utf-8")).hexdigest()[:32]
        return safe_join(self.root, "tenants", tenant_id) / "runtime" / "conflicts" / "by_plan" / name

    def case(self, tenant_id: str, conflict_id: str) -> ConflictCase:
        path = self._case_path(tenant_id, conflict_id)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConflictNotFound(f"no conflict {conflict_id!r} for tenant {tenant_id}") from None
        except ValueError as exc:
            raise ConflictFileError(f"{path.relative_to(self.root)}: {exc}") from None
        return case_from_json(data, path.relative_to(self.root).as_posix())

    def update_case(
        self, tenant_id: str, conflict_id: str, change: Callable[[ConflictCase], ConflictCase]
    ) -> ConflictCase:
        """`change` raises to leave the case as it was (e.g. ConflictNotOpen)."""
        with striped_lock(self._cases(tenant_id), conflict_id):
            changed = change(self.case(tenant_id, conflict_id))
            write_atomic(self._case_path(tenant_id, conflict_id), _encode(changed.as_json()))
            return changed

    def cases(
        self,
        tenant_id: str,
        *,
        status: CaseStatus | None = None,
        worker_id: str | None = None,
        plan_id: str | None = None,
        limit: int = 200,
    ) -> list[ConflictCase]:
        """Newest first; a worker's are those either of whose plans is that worker's."""
        found: list[ConflictCase] = []
        for conflict_id in self._ids(tenant_id, plan_id):
            try:
                case = self.case(tenant_id, conflict_id)
            except (ConflictNotFound, ConflictFileError) as exc:
                log.warning("[Conflicts] skipped %s: %s", conflict_id, exc)
                continue
            if status is not None and case.status != status:
                continue
            if worker_id is not None and worker_id not in (case.worker_a_id, case.worker_b_id):
                continue
            if plan_id is not None and not case.involves(plan_id):
                continue
            found.append(case)
            if len(found) >= limit:
                break
        return found

    def _ids(self, tenant_id: str, plan_id: str | None) -> list[str]:
        """Case ids, newest first: a plan's from its index, else every case of the tenant."""
        if plan_id is not None:
            try:
                text = self._index(tenant_id, plan_id).read_text(encoding="utf-8")
            except FileNotFoundError:
                return []
            return sorted({i for i in text.split("\n") if i}, reverse=True)
        folder = self._cases(tenant_id)
        return [p.stem for p in sorted(folder.glob("cc_*.json"), reverse=True)] if folder.is_dir() else []

    # -- plans ---------------------------------------------------------------------------------

    def _plans(self, tenant_id: str, worker_id: str) -> Path:
        return safe_join(self.root, "tenants", tenant_id, "workers", worker_id) / "runtime" / "conflicts" / "plans"

    def _plan_path(self, tenant_id: str, worker_id: str, plan_id: str) -> Path:
        return self._plans(tenant_id, worker_id) / f"{validate_id(plan_id, 'plan id')}.json"

    def plan(self, tenant_id: str, worker_id: str, plan_id: str) -> PlanRecord | None:
        path = self._plan_path(tenant_id, worker_id, plan_id)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except ValueError as exc:
            raise ConflictFileError(f"{path.relative_to(self.root)}: {exc}") from None
        return plan_from_json(data, path.relative_to(self.root).as_posix())

    def update_plan(
        self,
        tenant_id: str,
        worker_id: str,
        plan_id: str,
        change: Callable[[PlanRecord | None], PlanRecord],
    ) -> PlanRecord:
        """`change` gets the plan as stored (None: new) and returns it as it is to be stored (the same
        object: nothing is written)."""
        with striped_lock(self._plans(tenant_id, worker_id), plan_id):
            current = self.plan(tenant_id, worker_id, plan_id)
            changed = change(current)
            if changed is not current:
                write_atomic(self._plan_path(tenant_id, worker_id, plan_id), _encode(changed.as_json()))
            return changed

    def plans(self, tenant_id: str, worker_id: str, limit: int = 200) -> list[PlanRecord]:
        """Newest first."""
        folder = self._plans(tenant_id, worker_id)
        found: list[PlanRecord] = []
        for path in folder.glob("*.json") if folder.is_dir() else []:
            try:
                plan = self.plan(tenant_id, worker_id, path.stem)
            except ConflictFileError as exc:
                log.warning("[Conflicts] skipped %s: %s", path, exc)
                continue
            if plan is not None:
                found.append(plan)
        found.sort(key=lambda p: p.created_at, reverse=True)
        return found[:limit]
