"""The confirmation files of each worker: created, read, decided once, reminded under a lock."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from genworker.fsutil import striped_lock, write_atomic
from genworker.ids import safe_join, validate_id
from genworker.worker.confirmations.models import (
    _FIELDS,
    _READABLE,
    SCHEMA_VERSION,
    Confirmation,
    ConfirmationDecided,
    ConfirmationError,
    ConfirmationNotFound,
    ConfirmationNotifier,
    Status,
)
from genworker.worker.governance import Approval

__all__ = ["ConfirmationStore"]

log = logging.getLogger("genworker.confirmations")


def _utc_now() -> datetime:
    return datetime.now(UTC)


class ConfirmationStore:
    """Files under `tenants/{t}/workers/{w}/runtime/confirmations/`; also the governance ApprovalStore."""

    def __init__(
        self,
        workspace_root: Path,
        *,
        notifier: ConfirmationNotifier | None = None,
        clock: Callable[[], datetime] = _utc_now,
    ) -> None:
        self.root = workspace_root
        self.notifier = notifier  # set by the composition root once the inbox exists
        self.clock = clock
        self._lock = threading.Lock()

    def _folder(self, tenant_id: str, worker_id: str) -> Path:
        return safe_join(self.root, "tenants", tenant_id, "workers", worker_id) / "runtime" / "confirmations"

    def _path(self, tenant_id: str, worker_id: str, confirmation_id: str) -> Path:
        return self._folder(tenant_id, worker_id) / f"{validate_id(confirmation_id, 'confirmation id')}.json"

    def create(self, **values: object) -> Confirmation:
        confirmation = Confirmation(
            confirmation_id=f"cf_{uuid.uuid4().hex[:16]}",
            created_at=self.clock().isoformat(),
            **values,  # type: ignore[arg-type]
        )
        self._write(confirmation)
        return confirmation

    async def request(self, **values: object) -> Confirmation:
        """Create a confirmation and announce it (inbox item, event); the announcement is best effort:
        the stored confirmation is the truth and the reminder scan keeps asking."""
        confirmation = await asyncio.to_thread(lambda: self.create(**values))
        await self._notify("requested", confirmation)
        return confirmation

    def get(self, tenant_id: str, worker_id: str, confirmation_id: str) -> Confirmation | None:
        path = self._path(tenant_id, worker_id, confirmation_id)
        if not path.is_file():
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("schema_version") not in _READABLE:
            raise ConfirmationError(f"{path}: unsupported schema_version {data.get('schema_version')!r}")
        unknown = sorted(data.keys() - _FIELDS)
        if unknown:
            raise ConfirmationError(f"{path}: unknown fields {unknown}")
        data["reasons"] = tuple(data.get("reasons", ()))
        data["preferred_skill_ids"] = tuple(data.get("preferred_skill_ids", ()))
        data["schema_version"] = SCHEMA_VERSION  # an older file has every new field at its default
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
        """Record the decision once: ConfirmationNotFound (a LookupError) for an unknown id,
        ConfirmationDecided (a ValueError) when it was already decided — by anyone, in any process."""
        with self._locked(tenant_id, worker_id, confirmation_id):
            current = self.get(tenant_id, worker_id, confirmation_id)
            if current is None:
                raise ConfirmationNotFound(f"no confirmation {confirmation_id!r} for {tenant_id}/{worker_id}")
            if current.status != "pending":
                raise ConfirmationDecided(f"confirmation {confirmation_id!r} is already {current.status}")
            decided = replace(current, status=status, decided_at=self.clock().isoformat(), decided_by=by)
            self._write(decided)
            return decided

    async def decide_async(
        self, tenant_id: str, worker_id: str, confirmation_id: str, status: Status, by: str
    ) -> Confirmation:
        decided = await asyncio.to_thread(self.decide, tenant_id, worker_id, confirmation_id, status, by)
        await self._notify("decided", decided)
        return decided

    def record_reminder(
        self,
        confirmation: Confirmation,
        *,
        escalate: bool,
        still_due: Callable[[Confirmation], bool] = lambda c: True,
        at: datetime | None = None,
    ) -> Confirmation | None:
        """Count one reminder (and the escalation); None when it was decided meanwhile, or when
        `still_due` says another scan (another runtime) already reminded it."""
        with self._locked(confirmation.tenant_id, confirmation.worker_id, confirmation.confirmation_id):
            current = self.get(confirmation.tenant_id, confirmation.worker_id, confirmation.confirmation_id)
            if current is None or current.status != "pending" or not still_due(current):
                return None
            now = (at or self.clock()).isoformat()
            updated = replace(
                current,
                reminders=current.reminders + 1,
                last_reminded_at=now,
                escalated_at=now if escalate and current.escalated_at is None else current.escalated_at,
            )
            self._write(updated)
            return updated

    def get_approval(self, tenant_id: str, worker_id: str, ref: str) -> Approval | None:
        try:
            found = self.get(tenant_id, worker_id, ref)
        except (ConfirmationError, ValueError):
            return None
        if found is None:
            return None
        return Approval(ref, tenant_id, worker_id, found.status, policy_ref=found.gate_ref, decided_by=found.decided_by)

    async def _notify(self, what: Literal["requested", "decided"], confirmation: Confirmation) -> None:
        if self.notifier is None:
            return
        try:
            if what == "requested":
                await self.notifier.requested(confirmation)
            else:
                await self.notifier.decided(confirmation)
        except Exception:  # the confirmation is stored; reminders still find it
            log.exception("[Confirmations] %s notice for %s failed", what, confirmation.confirmation_id)

    def _locked(self, tenant_id: str, worker_id: str, confirmation_id: str) -> Any:
        folder = self._folder(tenant_id, worker_id)
        return striped_lock(folder, validate_id(confirmation_id, "confirmation id"))

    def _write(self, confirmation: Confirmation) -> None:
        path = self._path(confirmation.tenant_id, confirmation.worker_id, confirmation.confirmation_id)
        with self._lock:
            write_atomic(path, json.dumps(asdict(confirmation), ensure_ascii=False, indent=2).encode("utf-8"))
