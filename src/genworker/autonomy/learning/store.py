"""A worker's learning files under `runtime/learning/`:

- `policy.json`: the learned policy's versions and the freeze (changed under its lock);
- `feedback.jsonl`: every FeedbackEvent, once (an event heard twice, say by two processes, is kept once);
- `decisions.jsonl`: the decision log — gate decisions (the policy version that decided, what each
  version in shadow would have decided), feedback counted, and every policy step (shadow started,
  proposed, applied, rolled back, frozen, unfrozen).

JSON lines are appended with one write under an exclusive `flock` and split on "\\n" only. `prune`
rewrites a file in place under that same `flock` (so an append waits for it and lands after it, never
in a replaced file). Blocking: call from a thread (the gate's one append per decision is small and
never fsyncs).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from collections.abc import Callable
from datetime import UTC, datetime
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
        seen: set[str] = set()  # a rewrite cut short may leave a line twice
        events = []
        for row in _lines(path):
            if row.get("feedback_id") not in seen:
                seen.add(str(row.get("feedback_id")))
                events.append(FeedbackEvent.from_json(row, str(path)))
        return events

    def log(self, tenant_id: str, worker_id: str, entry: dict[str, Any]) -> None:
        path = self.folder(tenant_id, worker_id) / "decisions.jsonl"
        line = json.dumps({"schema_version": SCHEMA_VERSION, **entry}, ensure_ascii=False, default=str)
        self._sink(path).append_line(line + "\n")

    def decisions(self, tenant_id: str, worker_id: str, limit: int | None = None) -> list[dict[str, Any]]:
        """The decision log, newest first."""
        rows = _lines(self.folder(tenant_id, worker_id) / "decisions.jsonl")
        rows.reverse()
        return rows if limit is None else rows[:limit]

    def prune(
        self,
        tenant_id: str,
        worker_id: str,
        *,
        log_before: datetime,
        log_max: int,
        feedback_before: datetime,
        feedback_max: int,
    ) -> tuple[int, int]:
        """Drop decision log entries older than `log_before` or beyond the newest `log_max` (policy
        steps always stay: the history of the versions), and feedback older than `feedback_before` or
        beyond the newest `feedback_max`. (log entries dropped, feedback events dropped)."""
        folder = self.folder(tenant_id, worker_id)

        def log_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
            others = [r for r in rows if r.get("kind") != "policy" and _stamp(r, "at") >= log_before][-log_max:]
            kept = {id(r) for r in others}
            return [r for r in rows if r.get("kind") == "policy" or id(r) in kept]

        def feedback_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
            return [r for r in rows if _stamp(r, "created_at") >= feedback_before][-feedback_max:]

        dropped_log = _rewrite(folder / "decisions.jsonl", log_rows)
        with file_lock(folder / ".feedback.lock"):
            dropped_feedback = _rewrite(folder / "feedback.jsonl", feedback_rows)
        return dropped_log, dropped_feedback

    def _sink(self, path: Path) -> JsonlAuditSink:
        sink = self._sinks.get(path)
        if sink is None:
            sink = self._sinks.setdefault(path, JsonlAuditSink(path))
        return sink


def _stamp(row: dict[str, Any], key: str) -> datetime:
    try:
        return datetime.fromisoformat(str(row[key]))
    except (KeyError, ValueError):
        return datetime.min.replace(tzinfo=UTC)  # unreadable: the oldest there is


def _rewrite(path: Path, keep: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]) -> int:
    """Rewrite the JSON lines file `path` with the rows `keep` returns (in order), in place under the
    exclusive `flock` appenders take; lines that are not JSON go. The number of lines dropped."""
    try:
        fh = path.open("r+b")
    except FileNotFoundError:
        return 0
    with fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        lines = [line for line in fh.read().split(b"\n") if line.strip()]
        rows: list[dict[str, Any]] = []
        raw: dict[int, bytes] = {}
        for line in lines:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict):
                rows.append(row)
                raw[id(row)] = line
        kept = keep(rows)
        if len(kept) == len(lines):
            return 0
        fh.seek(0)
        fh.write(b"".join(raw[id(r)] + b"\n" for r in kept))
        fh.truncate()
        fh.flush()
        os.fsync(fh.fileno())
        return len(lines) - len(kept)


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
