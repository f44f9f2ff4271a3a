"""Briefs on disk, under the worker's runtime folder:

    runtime/briefs/pending/{item_id}.json     items waiting for the next brief (one file each)
    runtime/briefs/sent/{brief_id}.json       generated briefs
    runtime/briefs/budget/{YYYY-MM-DD}.json   the day's interruption count
    runtime/briefs/.lock                      flock: budget updates and brief generation

Items are created exclusively (a retried add with the same id is a no-op), so adding never
waits for a brief being generated; generation removes exactly the items it included.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

from genworker.autonomy.briefs.models import Brief, BriefItem, BriefNotFound, BudgetDay, load_model
from genworker.fsutil import create_exclusive, file_lock, write_atomic
from genworker.ids import safe_join, validate_id

__all__ = ["FileBriefStore"]


def _bytes(model: BaseModel) -> bytes:
    return json.dumps(model.model_dump(mode="json"), indent=2, ensure_ascii=False).encode("utf-8")


class FileBriefStore:
    def __init__(self, workspace_root: Path) -> None:
        self._root = workspace_root

    def folder(self, tenant_id: str, worker_id: str) -> Path:
        return safe_join(self._root, "tenants", tenant_id, "workers", worker_id) / "runtime" / "briefs"

    def add_item(self, tenant_id: str, worker_id: str, item: BriefItem) -> bool:
        path = self.folder(tenant_id, worker_id) / "pending" / f"{validate_id(item.item_id, 'brief item id')}.json"
        return create_exclusive(path, _bytes(item))

    def pending(self, tenant_id: str, worker_id: str) -> list[BriefItem]:
        return [item for _, item in self._pending(tenant_id, worker_id)]

    def _pending(self, tenant_id: str, worker_id: str) -> list[tuple[Path, BriefItem]]:
        folder = self.folder(tenant_id, worker_id) / "pending"
        if not folder.is_dir():
            return []
        found = [(p, load_model(BriefItem, p.read_bytes(), p.as_posix())) for p in folder.glob("*.json")]
        return sorted(found, key=lambda pair: (pair[1].created_at, pair[1].item_id))

    def generate(self, tenant_id: str, worker_id: str, build: Callable[[list[BriefItem]], Brief]) -> Brief:
        """Build a brief from the pending items, store it, then drop the items it holds."""
        folder = self.folder(tenant_id, worker_id)
        with file_lock(folder / ".lock"):
            taken = self._pending(tenant_id, worker_id)
            brief = build([item for _, item in taken])
            self.save(brief)
            for path, _ in taken:
                path.unlink(missing_ok=True)
        return brief

    def save(self, brief: Brief) -> None:
        path = (
            self.folder(brief.tenant_id, brief.worker_id) / "sent" / f"{validate_id(brief.brief_id, 'brief id')}.json"
        )
        write_atomic(path, _bytes(brief), mode=0o644)

    def get(self, tenant_id: str, worker_id: str, brief_id: str) -> Brief:
        path = self.folder(tenant_id, worker_id) / "sent" / f"{validate_id(brief_id, 'brief id')}.json"
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise BriefNotFound(path.name, f"no brief {brief_id!r} for worker {tenant_id}/{worker_id}") from None
        return load_model(Brief, data, path.as_posix())

    def list(self, tenant_id: str, worker_id: str, limit: int = 20) -> list[Brief]:
        folder = self.folder(tenant_id, worker_id) / "sent"
        names = sorted((p.name for p in folder.glob("*.json")), reverse=True)[:limit] if folder.is_dir() else []
        return [load_model(Brief, (folder / n).read_bytes(), (folder / n).as_posix()) for n in names]

    # -- the interruption budget ---------------------------------------------------------------

    def budget(self, tenant_id: str, worker_id: str, day: str) -> BudgetDay:
        path = self._budget_path(tenant_id, worker_id, day)
        try:
            return load_model(BudgetDay, path.read_bytes(), path.as_posix())
        except FileNotFoundError:
            return BudgetDay(day=day)

    def take_interruption(
        self, tenant_id: str, worker_id: str, day: str, limit: int, item_id: str, *, force: bool = False
    ) -> tuple[bool, int]:
        """Count one interruption if the day has room (or `force`, for P0); (taken, used after)."""
        folder = self.folder(tenant_id, worker_id)
        with file_lock(folder / ".lock"):
            current = self.budget(tenant_id, worker_id, day)
            if item_id in current.interruptions:
                return True, current.used  # a retry of the same interruption
            if current.used >= limit and not force:
                return False, current.used
            updated = BudgetDay(day=day, used=current.used + 1, interruptions=(*current.interruptions, item_id))
            write_atomic(self._budget_path(tenant_id, worker_id, day), _bytes(updated), mode=0o644)
            return True, updated.used

    def _budget_path(self, tenant_id: str, worker_id: str, day: str) -> Path:
        return self.folder(tenant_id, worker_id) / "budget" / f"{validate_id(day, 'day')}.json"
