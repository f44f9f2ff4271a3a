"""The duty scheduler's files under ``tenants/{t}/workers/{w}/runtime/``:

- ``duty_state/{duty_id}.json``: per trigger, the last slot handled, a condition's last truth and the
  fires whose SLA retries are still owed (`retries`: what a restart resumes);
- ``duty_executions/{duty_id}.jsonl``: one record per fire, pruned by the duty's execution_log_retention.

Each file is changed under an flock and replaced atomically. Blocking: call from a worker thread.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from genworker.autonomy.duties.errors import DutyStateError
from genworker.fsutil import file_lock, write_atomic
from genworker.ids import safe_join, validate_id

__all__ = ["SCHEMA_VERSION", "DutyState", "DutyStore", "ExecutionRecord", "PendingRetry", "TriggerState"]

SCHEMA_VERSION: Final = 1


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PendingRetry(_Doc):
    """A fire whose contract allows SLA retries, until it no longer needs one (keyed by its first key).

    `attempt` 0 is the first fire, n the n-th retry (key `{key}:retry-{n}`). Without `due_at` that
    attempt has been fired and its outcome is not known yet; with it, the attempt is due then."""

    attempt: int = Field(ge=0)
    due_at: datetime | None = None
    scheduled_for: datetime
    trigger_type: Literal["schedule", "event", "condition"]
    evidence: dict[str, Any] = Field(default_factory=dict)  # the fire's evidence for the Policy Gate

    def fire_key(self, key: str) -> str:
        return key if self.attempt == 0 else f"{key}:retry-{self.attempt}"


class TriggerState(_Doc):
    last_slot: datetime | None = None  # every slot up to here has been handled (fired or skipped)
    condition_true: bool = False
    pending_fire: datetime | None = None  # a condition's transition recorded and not yet fired
    retries: dict[str, PendingRetry] = Field(default_factory=dict)  # by the fire's first key


class DutyState(_Doc):
    schema_version: int = SCHEMA_VERSION
    triggers: dict[str, TriggerState] = Field(default_factory=dict)


class ExecutionRecord(_Doc):
    schema_version: int = SCHEMA_VERSION
    duty_id: str
    trigger_id: str
    trigger_type: Literal["schedule", "event", "condition", "manual"]
    scheduled_for: datetime
    key: str | None
    run_id: str
    state: str
    fired_at: datetime


class DutyStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    def _file(self, tenant_id: str, worker_id: str, folder: str, name: str) -> Path:
        worker = safe_join(
            self.root, "tenants", validate_id(tenant_id, "tenant id"), "workers", validate_id(worker_id, "worker id")
        )
        return worker / "runtime" / folder / name

    def state_path(self, tenant_id: str, worker_id: str, duty_id: str) -> Path:
        return self._file(tenant_id, worker_id, "duty_state", f"{validate_id(duty_id, 'duty id')}.json")

    def log_path(self, tenant_id: str, worker_id: str, duty_id: str) -> Path:
        return self._file(tenant_id, worker_id, "duty_executions", f"{validate_id(duty_id, 'duty id')}.jsonl")

    # -- trigger state -----------------------------------------------------------

    def read_state(self, tenant_id: str, worker_id: str, duty_id: str) -> DutyState:
        path = self.state_path(tenant_id, worker_id, duty_id)
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return DutyState()
        except (OSError, ValueError) as exc:
            raise DutyStateError(path, f"unreadable: {exc}") from None
        version = raw.get("schema_version") if isinstance(raw, dict) else None
        if version != SCHEMA_VERSION:
            raise DutyStateError(path, f"schema_version {version!r} is not supported (expected {SCHEMA_VERSION})")
        try:
            return DutyState.model_validate(raw)
        except ValidationError as exc:
            raise DutyStateError(path, str(exc)) from None

    def _update(
        self, tenant_id: str, worker_id: str, duty_id: str, trigger_id: str, change: Callable[[TriggerState], bool]
    ) -> TriggerState:
        """Apply `change` to the trigger's state under the lock; `change` returns True when it changed it."""
        path = self.state_path(tenant_id, worker_id, duty_id)
        with file_lock(path.with_name(f".{path.name}.lock")):
            state = self.read_state(tenant_id, worker_id, duty_id)
            trigger = state.triggers.setdefault(trigger_id, TriggerState())
            before = trigger.model_copy(deep=True)
            if change(trigger):
                write_atomic(path, state.model_dump_json(indent=2).encode("utf-8"))
            return before

    def arm(self, tenant_id: str, worker_id: str, duty_id: str, trigger_id: str, now: datetime) -> datetime:
        """The trigger's last handled slot; a trigger seen for the first time starts at `now` (no back-fill)."""

        def start(trigger: TriggerState) -> bool:
            if trigger.last_slot is not None:
                return False
            trigger.last_slot = now
            return True

        before = self._update(tenant_id, worker_id, duty_id, trigger_id, start)
        return before.last_slot or now

    def advance(self, tenant_id: str, worker_id: str, duty_id: str, trigger_id: str, slot: datetime) -> None:
        """Every slot up to `slot` is handled (never moves backwards)."""

        def move(trigger: TriggerState) -> bool:
            if trigger.last_slot is not None and trigger.last_slot >= slot:
                return False
            trigger.last_slot = slot
            return True

        self._update(tenant_id, worker_id, duty_id, trigger_id, move)

    def transition(
        self, tenant_id: str, worker_id: str, duty_id: str, trigger_id: str, is_true: bool, now: datetime
    ) -> datetime | None:
        """Record the condition's truth. The move from false to true records a pending fire at `now`;
        the pending fire is returned (to every caller, also after a crash) until `settle` clears it."""

        pending: list[datetime | None] = []

        def record(trigger: TriggerState) -> bool:
            changed = trigger.condition_true != is_true
            if changed and is_true and trigger.pending_fire is None:
                trigger.pending_fire = now
            trigger.condition_true = is_true
            pending.append(trigger.pending_fire)
            return changed

        self._update(tenant_id, worker_id, duty_id, trigger_id, record)
        return pending[0]

    def settle(self, tenant_id: str, worker_id: str, duty_id: str, trigger_id: str, fired: datetime) -> None:
        """The pending fire `fired` has run (its idempotency key holds the run)."""

        def clear(trigger: TriggerState) -> bool:
            if trigger.pending_fire != fired:
                return False
            trigger.pending_fire = None
            return True

        self._update(tenant_id, worker_id, duty_id, trigger_id, clear)

    # -- SLA retries ---------------------------------------------------------------

    def watch_retries(
        self, tenant_id: str, worker_id: str, duty_id: str, trigger_id: str, key: str, first: PendingRetry
    ) -> bool:
        """The fire under `key` may need retries: recorded as `first` unless already known (False)."""

        def add(trigger: TriggerState) -> bool:
            if key in trigger.retries:
                return False
            trigger.retries[key] = first
            return True

        return key not in self._update(tenant_id, worker_id, duty_id, trigger_id, add).retries

    def owe_retry(
        self, tenant_id: str, worker_id: str, duty_id: str, trigger_id: str, key: str, retry: PendingRetry
    ) -> None:
        """The fire under `key` owes `retry` (a later attempt never goes back to an earlier one)."""

        def put(trigger: TriggerState) -> bool:
            known = trigger.retries.get(key)
            if known is not None and (known.attempt, known.due_at is not None) >= (retry.attempt, True):
                return False
            trigger.retries[key] = retry
            return True

        self._update(tenant_id, worker_id, duty_id, trigger_id, put)

    def retries_done(self, tenant_id: str, worker_id: str, duty_id: str, trigger_id: str, key: str) -> None:
        """The fire under `key` needs no (further) retry."""
        self._update(tenant_id, worker_id, duty_id, trigger_id, lambda t: t.retries.pop(key, None) is not None)

    # -- execution records -------------------------------------------------------

    def executions(self, tenant_id: str, worker_id: str, duty_id: str) -> list[ExecutionRecord]:
        path = self.log_path(tenant_id, worker_id, duty_id)
        try:
            lines = path.read_text(encoding="utf-8").split("\n")  # not splitlines(): U+2028 may be in a text
        except FileNotFoundError:
            return []
        records = []
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = ExecutionRecord.model_validate_json(line)
            except ValidationError as exc:
                raise DutyStateError(path, f"line {number}: {exc}") from None
            if record.schema_version != SCHEMA_VERSION:
                raise DutyStateError(path, f"line {number}: schema_version {record.schema_version} is not supported")
            records.append(record)
        return records

    def append(self, tenant_id: str, worker_id: str, record: ExecutionRecord, retention: timedelta) -> None:
        """Add `record` and drop records fired before `record.fired_at - retention`."""
        path = self.log_path(tenant_id, worker_id, record.duty_id)
        with file_lock(path.with_name(f".{path.name}.lock")):
            cutoff = record.fired_at - retention
            kept = [r for r in self.executions(tenant_id, worker_id, record.duty_id) if r.fired_at >= cutoff]
            kept.append(record)
            write_atomic(path, "".join(r.model_dump_json() + "\n" for r in kept).encode("utf-8"))
