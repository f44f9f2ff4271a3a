"""Confirmations: gated tasks waiting for a person. Stored per worker, listed, approved or rejected.

An approved confirmation is the `approval_ref` a new run carries; the governance stage only
accepts it for the same gated policy (`gate_ref`), so one approval cannot unlock other work.
"""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from genworker.fsutil import write_atomic
from genworker.ids import safe_join, validate_id
from genworker.worker.governance import Approval

__all__ = ["Confirmation", "ConfirmationError", "ConfirmationStore"]

SCHEMA_VERSION = 1
Status = Literal["pending", "approved", "rejected"]


class ConfirmationError(LookupError):
    """Unknown confirmation, or one already decided."""


@dataclass(frozen=True, slots=True)
class Confirmation:
    confirmation_id: str
    tenant_id: str
    worker_id: str
    run_id: str
    task_id: str
    thread_id: str
    text: str
    skill_id: str | None
    gate_ref: str | None
    reasons: tuple[str, ...]
    created_at: str
    status: Status = "pending"
    decided_at: str | None = None
    decided_by: str | None = None
    schema_version: int = SCHEMA_VERSION


class ConfirmationStore:
    """Files under `tenants/{t}/workers/{w}/runtime/confirmations/`; also the governance ApprovalStore."""

    def __init__(self, workspace_root: Path) -> None:
        self.root = workspace_root
        self._lock = threading.Lock()

    def _folder(self, tenant_id: str, worker_id: str) -> Path:
        return safe_join(self.root, "tenants", tenant_id, "workers", worker_id) / "runtime" / "confirmations"

    def _path(self, tenant_id: str, worker_id: str, confirmation_id: str) -> Path:
        return self._folder(tenant_id, worker_id) / f"{validate_id(confirmation_id, 'confirmation id')}.json"

    def create(self, **fields: object) -> Confirmation:
        confirmation = Confirmation(
            confirmation_id=f"cf_{uuid.uuid4().hex[:16]}",
            created_at=datetime.now(UTC).isoformat(),
            **fields,  # type: ignore[arg-type]
        )
        self._write(confirmation)
        return confirmation

    def get(self, tenant_id: str, worker_id: str, confirmation_id: str) -> Confirmation | None:
        path = self._path(tenant_id, worker_id, confirmation_id)
        if not path.is_file():
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("schema_version") != SCHEMA_VERSION:
            raise ConfirmationError(f"{path}: unsupported schema_version {data.get('schema_version')!r}")
        data["reasons"] = tuple(data.get("reasons", ()))
        return Confirmation(**data)

    def list(self, tenant_id: str, worker_id: str, status: Status | None = None) -> list[Confirmation]:
        folder = self._folder(tenant_id, worker_id)
        found = (
            [self.get(tenant_id, worker_id, p.stem) for p in sorted(folder.glob("cf_*.json"))]
            if folder.is_dir()
            else []
        )
        items = [c for c in found if c is not None and (status is None or c.status == status)]
        return sorted(items, key=lambda c: c.created_at, reverse=True)

    def decide(self, tenant_id: str, worker_id: str, confirmation_id: str, status: Status, by: str) -> Confirmation:
        with self._lock:
            current = self.get(tenant_id, worker_id, confirmation_id)
            if current is None:
                raise ConfirmationError(f"no confirmation {confirmation_id!r} for {tenant_id}/{worker_id}")
            if current.status != "pending":
                raise ConfirmationError(f"confirmation {confirmation_id!r} is already {current.status}")
            decided = replace(current, status=status, decided_at=datetime.now(UTC).isoformat(), decided_by=by)
            self._write(decided)
            return decided

    def get_approval(self, tenant_id: str, worker_id: str, ref: str) -> Approval | None:
        try:
            found = self.get(tenant_id, worker_id, ref)
        except (ConfirmationError, ValueError):
            return None
        if found is None:
            return None
        return Approval(ref, tenant_id, worker_id, found.status, policy_ref=found.gate_ref, decided_by=found.decided_by)

    def _write(self, confirmation: Confirmation) -> None:
        path = self._path(confirmation.tenant_id, confirmation.worker_id, confirmation.confirmation_id)
        write_atomic(path, json.dumps(asdict(confirmation), ensure_ascii=False, indent=2).encode("utf-8"))
