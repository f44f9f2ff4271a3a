"""An IM message whose run was cut short by a restart: run it again, or tell the person and a human.

The webhook was answered 200 before the run, so the platform will not send the message again:
after a restart the journal replays it, and the router finds the run its idempotency key made.
`after_restart` decides from that run's record:

- interrupted before any tool ran (`runtime_restarted`, no tool call recorded): nothing it did
  needs keeping from repeating, so the key is freed and the message runs again under the same
  key — one answer in the end;
- interrupted after a tool ran, or with a side effect whose outcome is unknown (the step journal
  saw it start, never finish): it is not repeated. The person gets `NOTICE_TEXT` once, and the
  message is listed for a human (`AttentionStore`, the dashboard's channels block) until dismissed;
- still running under another process's live lease: wait, and look again later (that process's
  lease expiring marks the run interrupted);
- anything else (it ended, or it is parked for an approval or an event): nothing more to say here.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from genworker.channels.base import ChannelMessage
from genworker.fsutil import write_atomic
from genworker.ids import safe_join, validate_id
from genworker.worker.task import RunRecord, RunState

__all__ = [
    "NOTICE_TEXT",
    "AttentionItem",
    "AttentionStore",
    "Notify",
    "RunAgain",
    "Settled",
    "Wait",
    "after_restart",
]

NOTICE_TEXT = (
    "Sorry, I was interrupted while working on this, and I cannot tell whether all of it was done. "
    "Someone will check and get back to you."
)
SCHEMA_VERSION = 1
_RAN = frozenset({"completed", "failed", "cancelled", "outcome_unknown"})


@dataclass(frozen=True, slots=True)
class RunAgain:
    run: RunRecord


@dataclass(frozen=True, slots=True)
class Notify:
    run: RunRecord
    reason: str


@dataclass(frozen=True, slots=True)
class Wait:
    run: RunRecord


@dataclass(frozen=True, slots=True)
class Settled:
    run: RunRecord


Decision = RunAgain | Notify | Wait | Settled


def after_restart(run: RunRecord) -> Decision:
    """What to do about a message whose idempotency key already made `run`."""
    if run.state is RunState.INTERRUPTED:
        ran = [call for call in run.tool_calls if call.outcome in _RAN]
        code = run.error.code if run.error is not None else ""
        if code == "runtime_restarted" and not ran:
            return RunAgain(run)
        unknown = [c for c in ran if c.outcome == "outcome_unknown"]
        if unknown:
            names = ", ".join(f"{c.name} ({c.call_id})" for c in unknown)
            return Notify(run, f"interrupted; the outcome of {names} is unknown")
        names = ", ".join(dict.fromkeys(c.name for c in ran)) or "?"
        return Notify(run, f"interrupted after tools ran ({names}); not repeated")
    if run.state in (RunState.RUNNING, RunState.EVALUATING):
        return Wait(run)
    return Settled(run)


@dataclass(frozen=True, slots=True)
class AttentionItem:
    """A message a person was told about with `NOTICE_TEXT`: a human should check the run."""

    id: str
    adapter_id: str
    platform: str
    event_id: str
    chat_id: str
    sender_id: str
    text: str
    run_id: str
    reason: str
    created_at: str
    schema_version: int = SCHEMA_VERSION

    @classmethod
    def of(cls, message: ChannelMessage, run_id: str, reason: str) -> AttentionItem:
        basis = f"{message.adapter_id}\x1f{message.event_id}"
        return cls(
            id="att-" + hashlib.sha256(basis.encode("utf-8")).hexdigest()[:24],
            adapter_id=message.adapter_id,
            platform=message.platform,
            event_id=message.event_id,
            chat_id=message.chat_id,
            sender_id=message.sender_id,
            text=message.text[:500],
            run_id=run_id,
            reason=reason,
            created_at=datetime.now(UTC).isoformat(),
        )

    def describe(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "schema_version"}


class AttentionStore:
    """`tenants/{t}/workers/{w}/runtime/channels/attention/{id}.json`, one per message, until
    dismissed. Blocking: call from a thread."""

    def __init__(self, workspace_root: Path) -> None:
        self.root = workspace_root

    def folder(self, tenant_id: str, worker_id: str) -> Path:
        return safe_join(self.root, "tenants", tenant_id, "workers", worker_id) / "runtime" / "channels" / "attention"

    def add(self, tenant_id: str, worker_id: str, item: AttentionItem) -> None:
        path = self.folder(tenant_id, worker_id) / f"{item.id}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(asdict(item), ensure_ascii=False).encode("utf-8"))

    def list(self, tenant_id: str, worker_id: str) -> list[AttentionItem]:
        items = []
        for path in sorted(self.folder(tenant_id, worker_id).glob("att-*.json")):
            try:
                data = json.loads(path.read_bytes())
                if data.get("schema_version") != SCHEMA_VERSION:
                    continue
                items.append(AttentionItem(**data))
            except (OSError, ValueError, TypeError):
                continue
        return sorted(items, key=lambda i: i.created_at)

    def dismiss(self, tenant_id: str, worker_id: str, item_id: str) -> bool:
        path = self.folder(tenant_id, worker_id) / f"{validate_id(item_id, 'attention id')}.json"
        if not path.is_file():
            return False
        path.unlink(missing_ok=True)
        return True
