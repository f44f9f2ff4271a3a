"""Escalations a duty run owes, on disk until they are carried out, so a restart makes what a
stopped process still owed:

    tenants/{t}/workers/{w}/runtime/duty_escalations/{run_id}.json              its outcome's (schema_version 1)
    tenants/{t}/workers/{w}/runtime/duty_escalations/{run_id}--sla_{kind}.json  an SLA breach's

The outcome's plan is written while the run is `evaluating`, before it is recorded, and names the
state it is to be recorded in (`expect`): a run recorded otherwise (interrupted by the stop) owes
none of it. An SLA breach's plan is written before its escalations are made and owes them whatever
the run's state. Files are replaced atomically; blocking: call from a worker thread.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from genworker.fsutil import write_atomic
from genworker.ids import safe_join, validate_id
from genworker.worker.task import RunRef
from genworker.workspace.models.duty_terms import EscalationRule

__all__ = ["SCHEMA_VERSION", "DueEscalation", "EscalationPlan", "EscalationPlans"]

SCHEMA_VERSION: Final = 1
_FOLDER: Final = "duty_escalations"


@dataclass(frozen=True, slots=True)
class DueEscalation:
    """One escalation a run owes: its rule (and the rule's place), why, and the facts."""

    rule: EscalationRule
    index: int
    reason: str
    detail: str

    def as_json(self) -> dict[str, Any]:
        rule = {"condition": self.rule.condition, "target": self.rule.target, "kind": self.rule.kind}
        return {"rule": rule, "index": self.index, "reason": self.reason, "detail": self.detail}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DueEscalation:
        rule = data["rule"]
        return cls(EscalationRule(rule["condition"], rule["target"], rule["kind"]), int(data["index"]),
                   str(data["reason"]), str(data["detail"]))  # fmt: skip


@dataclass(frozen=True, slots=True)
class EscalationPlan:
    ref: RunRef
    duty_id: str
    title: str  # the duty's, for the message (the duty may have changed or gone by a restart)
    due: tuple[DueEscalation, ...]
    expect: str | None  # the run state the plan holds for; None: any (an SLA breach)
    created_at: datetime
    path: Path | None = None


class EscalationPlans:
    def __init__(self, workspace_root: Path) -> None:
        self.root = workspace_root

    def path(self, ref: RunRef, batch: str = "") -> Path:
        worker = safe_join(self.root, "tenants", validate_id(ref.tenant_id, "tenant id"), "workers",
                           validate_id(ref.worker_id, "worker id"))  # fmt: skip
        name = validate_id(ref.run_id, "run id") + (f"--{validate_id(batch, 'batch')}" if batch else "")
        return worker / "runtime" / _FOLDER / f"{name}.json"

    def save(self, plan: EscalationPlan, batch: str = "") -> Path:
        document = {
            "schema_version": SCHEMA_VERSION,
            "tenant_id": plan.ref.tenant_id,
            "worker_id": plan.ref.worker_id,
            "run_id": plan.ref.run_id,
            "duty_id": plan.duty_id,
            "title": plan.title,
            "expect": plan.expect,
            "created_at": plan.created_at.isoformat(),
            "due": [d.as_json() for d in plan.due],
        }
        path = self.path(plan.ref, batch)
        write_atomic(path, json.dumps(document, ensure_ascii=False, indent=2).encode("utf-8"))
        return path

    def remove(self, path: Path) -> None:
        path.unlink(missing_ok=True)

    def all(self) -> list[Path]:
        return sorted(self.root.glob(f"tenants/*/workers/*/runtime/{_FOLDER}/*.json"))

    def read(self, path: Path) -> EscalationPlan:
        """The plan in `path`; ValueError naming the file and what is wrong with it."""
        try:
            document = json.loads(path.read_bytes())
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path}: unreadable: {exc}") from None
        version = document.get("schema_version") if isinstance(document, Mapping) else None
        if version != SCHEMA_VERSION:
            raise ValueError(f"{path}: schema_version {version!r} is unknown; this build reads {SCHEMA_VERSION}")
        try:
            ref = RunRef(document["tenant_id"], document["worker_id"], document["run_id"])
            due: Sequence[Mapping[str, Any]] = document["due"]
            return EscalationPlan(ref, str(document["duty_id"]), str(document["title"]),
                                  tuple(DueEscalation.from_json(d) for d in due), document.get("expect"),
                                  datetime.fromisoformat(document["created_at"]), path)  # fmt: skip
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: {type(exc).__name__}: {exc}") from None
