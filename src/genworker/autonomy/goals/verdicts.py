"""The last goal verdict per goal (``runtime/goals/verdicts.json``, schema_version 1), for the dashboard.

The run record holds every verdict; this file keeps only the newest per goal so the goal block
need not read runs. A verdict replaces the kept one only when it is not older.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pydantic import TypeAdapter

from genworker.autonomy.goals.errors import GoalError
from genworker.fsutil import file_lock, write_atomic
from genworker.ids import safe_join
from genworker.worker.task import GoalVerdict

__all__ = ["LastVerdict", "VerdictLog"]

log = logging.getLogger("genworker.goals")

SCHEMA_VERSION: Final = 1
_VERDICT: TypeAdapter[GoalVerdict] = TypeAdapter(GoalVerdict)


@dataclass(frozen=True, slots=True)
class LastVerdict:
    run_id: str
    verdict: GoalVerdict
    moved: tuple[str, ...] = ()  # what the verdict changed in the goal file, e.g. "task api: done"

    def as_dict(self) -> dict[str, Any]:
        v = self.verdict
        return {
            "run_id": self.run_id,
            "goal_status": v.status.value,
            "task_id": v.task_id,
            "reasons": list(v.reasons),
            "evidence": list(v.evidence),
            "evaluated_at": v.evaluated_at.isoformat(),
            "moved": list(self.moved),
        }


class VerdictLog:
    def __init__(self, workspace_root: Path) -> None:
        self.root = workspace_root

    def _path(self, tenant_id: str, worker_id: str) -> Path:
        worker = safe_join(self.root, "tenants", tenant_id, "workers", worker_id)
        return worker / "runtime" / "goals" / "verdicts.json"

    def _read(self, path: Path) -> dict[str, Any]:
        if not path.is_file():
            return {}
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
            version = data.get("schema_version") if isinstance(data, dict) else None
            raise GoalError(f"{path}: unsupported schema_version {version!r} (this runtime reads {SCHEMA_VERSION})")
        goals = data.get("goals")
        return dict(goals) if isinstance(goals, dict) else {}

    def last(self, tenant_id: str, worker_id: str) -> dict[str, LastVerdict]:
        """The newest verdict per goal id (blocking); an unreadable entry is skipped."""
        found: dict[str, LastVerdict] = {}
        for goal_id, entry in self._read(self._path(tenant_id, worker_id)).items():
            try:
                verdict = _VERDICT.validate_python(entry["verdict"])
                found[goal_id] = LastVerdict(str(entry["run_id"]), verdict, tuple(entry.get("moved", ())))
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("[Goals] last verdict of %s/%s/%s unreadable: %s", tenant_id, worker_id, goal_id, exc)
        return found

    def keep(self, tenant_id: str, worker_id: str, last: LastVerdict) -> None:
        """Remember `last` as its goal's newest verdict (blocking, under the file's lock)."""
        path = self._path(tenant_id, worker_id)
        with file_lock(path.with_suffix(".lock")):
            goals = self._read(path)
            current = goals.get(last.verdict.goal_id)
            if isinstance(current, dict):
                try:
                    if _VERDICT.validate_python(current["verdict"]).evaluated_at > last.verdict.evaluated_at:
                        return
                except (KeyError, TypeError, ValueError):
                    pass  # an unreadable entry is replaced
            goals[last.verdict.goal_id] = {
                "run_id": last.run_id,
                "verdict": _VERDICT.dump_python(last.verdict, mode="json"),
                "moved": list(last.moved),
            }
            body = {"schema_version": SCHEMA_VERSION, "goals": goals}
            write_atomic(path, json.dumps(body, indent=1, ensure_ascii=False).encode("utf-8"))
