"""A worker's learning files under `runtime/learning/`:

- `policy.json`: the learned policy's versions and the freeze (changed under its lock);
- `feedback.jsonl`: every FeedbackEvent, once (an event heard twice, say by two processes, is kept once);
- `decisions.jsonl`: the decision log — gate decisions (the policy version that decided, what each
  version in shadow would have decided), feedback counted, and every policy step (shadow started,
  proposed, applied, rolled back, frozen, unfrozen).

JSON lines are appended with one write under an exclusive `flock` and split on "\\n" only. Blocking:
call from a thread (the gate's one append per decision is small and never fsyncs).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from genworker.autonomy.learning.models import SCHEMA_VERSION, FeedbackEvent, LearningFileError, LearningState
from genworker.fsutil import file_lock, write_atomic
from genworker.ids import safe_join
from genworker.tools.audit import JsonlAuditSink

__all__ = ["LearningStore"]

log = logging.getLogger("genworker.learning")


class LearningStore:
    def __init__(self, workspace_root: Path) -> None:
        self.root = workspace_root
        self._cache: dict[Path, tuple[int, int, LearningState]] = {}
        self._sinks: dict[Path, JsonlAuditSink] = {}

    def folder(self, tenant_id: str, worker_id: str) -> Path:
        return safe_join(self.root, "tenants", tenant_id, "workers", worker_id) / "runtime" / "learning"

    # -- the learned policy --------------------------------------------------------------------

    def state(self, tenant_id: str, worker_id: str) -> LearningState:
        path = self.folder(tenant_id, worker_id) / "policy.json"
        try:
            stat = path.stat()
        except FileNotFoundError:
            return LearningState()
        cached = self._cache.get(path)
        if cached is not None and cached[:2] == (stat.st_mtime_ns, stat.st_size):
            return cached[2]
        try:
            state = LearningState.from_json(
                json.loads(path.read_text(encoding="utf-8")), str(path.relative_to(self.root))
            )
        except ValueError as exc:
            raise LearningFileError(f"{path.relative_to(self.root)}: {exc}") from None
        self._cache[path] = (stat.st_mtime_ns, stat.st_size, state)
        return state

    def update(self, tenant_id: str, worker_id: str, change: Callable[[LearningState], LearningState]) -> LearningState:
        """`change` gets the state as stored and returns it as it is to be stored (the same object:
        nothing is written)."""
        folder = self.folder(tenant_id, worker_id)
        with file_lock(folder / ".policy.lock"):
            self._cache.pop(folder / "policy.json", None)
            current = self.state(tenant_id, worker_id)
            changed = change(current)
            if changed is not current:
                data = json.dumps(changed.as_json(), ensure_ascii=False, indent=2).encode("utf-8")
                write_atomic(folder / "policy.json", data)
            return changed

    # -- feedback and the decision log ---------------------------------------------------------

    def add_feedback(self, event: FeedbackEvent) -> bool:
        """False when an event with this id is already recorded."""
        folder = self.folder(event.tenant_id, event.worker_id)
        with file_lock(folder / ".feedback.lock"):
            needle = json.dumps({"feedback_id": event.feedback_id})[1:-1]
            path = folder / "feedback.jsonl"
            if path.is_file() and needle in path.read_text(encoding="utf-8"):
                return False
            self._sink(path).append_line(json.dumps(event.as_json(), ensure_ascii=False) + "\n")
        return True

    def feedback(self, tenant_id: str, worker_id: str) -> list[FeedbackEvent]:
        """Oldest first."""
        path = self.folder(tenant_id, worker_id) / "feedback.jsonl"
        return [FeedbackEvent.from_json(row, str(path)) for row in _lines(path)]

    def log(self, tenant_id: str, worker_id: str, entry: dict[str, Any]) -> None:
        path = self.folder(tenant_id, worker_id) / "decisions.jsonl"
        line = json.dumps({"schema_version": SCHEMA_VERSION, **entry}, ensure_ascii=False, default=str)
        self._sink(path).append_line(line + "\n")

    def decisions(self, tenant_id: str, worker_id: str, limit: int | None = None) -> list[dict[str, Any]]:
        """The decision log, newest first."""
        rows = _lines(self.folder(tenant_id, worker_id) / "decisions.jsonl")
        rows.reverse()
        return rows if limit is None else rows[:limit]

    def _sink(self, path: Path) -> JsonlAuditSink:
        sink = self._sinks.get(path)
        if sink is None:
            sink = self._sinks.setdefault(path, JsonlAuditSink(path))
        return sink


def _lines(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    rows = []
    for line in text.split("\n"):  # not splitlines(): U+2028 may be in a note
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except ValueError:
            log.warning("[Learning] skipped a line of %s that is not JSON", path)
    return rows
