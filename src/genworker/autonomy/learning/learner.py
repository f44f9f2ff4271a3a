"""Learner: feedback in, versioned policy changes out — first in shadow, applied only by a person,
rolled back in one command (Steward's feedback loop, `learning:` of TENANT.json).

Adaptations (each a new version in `shadow`, never active at once):

- an action that ran without asking (gate `auto` or `brief`) and was rejected `reject_auto_threshold`
  times becomes `confirm`;
- an action that asked (gate `confirm`) and was approved `promote_confirm_to_auto_threshold` times
  (and at least `min_samples_for_adaptation`) may become `auto` — never an irreversible action or one
  that always needs a confirmation (`never_override_irreversible_rules`);
- the priority of items alike and the interruption budget (preferences.py).

Only feedback since the action's last policy change, and younger than `decay_half_life_days`, counts.
After `safe_apply_after_shadow_days` a shadow version is proposed as a suggestion, with what it would
have changed; approving it applies it. A spike of negative feedback (`negative_spike_count` within
`negative_spike_window_hours`) freezes learning: nothing is learned, proposed or applied until a
person unfreezes it; rolling back stays possible. Every step is in the decision log.

Blocking (files): call from a thread.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, Protocol

from genworker.autonomy.learning.models import (
    NEGATIVE,
    FeedbackEvent,
    Freeze,
    LearningState,
    PolicyChange,
    PolicyVersion,
)
from genworker.autonomy.learning.preferences import budget_change, counted_since, priority_changes
from genworker.autonomy.learning.store import LearningStore
from genworker.workspace.models.steward import LearningConfig

__all__ = ["Learner", "LearningRefused", "Proposals", "new_feedback_id"]

log = logging.getLogger("genworker.learning")


class LearningRefused(ValueError):
    """The step does not apply now (frozen, still in shadow, nothing to roll back ...); says why."""


class PolicyVersionNotFound(LearningRefused):
    """The command names a policy version the worker does not have."""


class Proposals(Protocol):
    """Where a version is proposed to a person (the suggestions)."""

    def propose(self, tenant_id: str, worker_id: str, version: PolicyVersion, detail: str) -> str | None: ...

    def status(self, tenant_id: str, worker_id: str, suggestion_id: str) -> str | None: ...


_LIVE = {"gate": "gate_result", "priority": "priority", "interruption": "result"}  # the live decision's field


def new_feedback_id() -> str:
    return f"fb_{uuid.uuid4().hex[:16]}"


def _utc_now() -> datetime:
    return datetime.now(UTC)


class Learner:
    def __init__(
        self,
        store: LearningStore,
        config_of: Callable[[str], LearningConfig],
        protected: Callable[[str, str, str], bool],
        *,
        proposals: Proposals | None = None,
        budget_of: Callable[[str, str], int] | None = None,
        clock: Callable[[], datetime] = _utc_now,
    ) -> None:
        self.store = store
        self.config_of = config_of
        self.protected = protected  # (tenant, worker, action) -> irreversible or always-confirm by policy
        self.proposals = proposals
        self.budget_of = budget_of  # (tenant, worker) -> the policy's interruption budget; None: not tuned
        self.clock = clock
        self._pruned: dict[tuple[str, str], datetime] = {}  # when this process last pruned a worker's files

    # -- feedback ------------------------------------------------------------------------------

    def record(self, event: FeedbackEvent) -> list[PolicyVersion]:
        """Keep `event` (once) and learn from it; the versions it started in shadow."""
        if not self.store.add_feedback(event):
            return []
        t, w = event.tenant_id, event.worker_id
        self.log(t, w, "feedback", feedback_id=event.feedback_id, feedback_type=event.feedback_type,
                 actions=list(event.actions), gate_result=event.gate_result, plan_id=event.plan_id,
                 decision_id=event.decision_id, source=event.source, by=event.by)  # fmt: skip
        created = self.adapt(t, w)
        self.tick(t, w)
        return created

    def adapt(self, tenant_id: str, worker_id: str) -> list[PolicyVersion]:
        cfg = self.config_of(tenant_id)
        if not cfg.enabled:
            return []
        now = self.clock()
        events = self.store.feedback(tenant_id, worker_id)
        created: list[PolicyVersion] = []
        frozen: list[Freeze] = []

        def learn(state: LearningState) -> LearningState:
            if state.frozen is not None:
                return state
            spike = self._spike(cfg, state, events, now)
            if spike is not None:
                frozen.append(spike)
                return replace(state, frozen=spike)
            for action in sorted({a for e in events for a in e.actions}):
                version = self._adaptation(cfg, state, events, action, now, tenant_id, worker_id)
                if version is not None:
                    created.append(version)
                    state = state.with_version(version)
            proposed = priority_changes(cfg, state, events, now)
            if self.budget_of is not None:
                budget_of = self.budget_of
                tuned = budget_change(cfg, state, events, now, lambda: budget_of(tenant_id, worker_id))
                proposed += [tuned] if tuned is not None else []
            for change, evidence in proposed:
                version = _new_version(cfg, state, change, evidence, now)
                created.append(version)
                state = state.with_version(version)
            return state

        self.store.update(tenant_id, worker_id, learn)
        for spike in frozen:
            self.log(tenant_id, worker_id, "policy", step="frozen", detail=spike.reason)
        for version in created:
            self.log(tenant_id, worker_id, "policy", step="shadow_started", version=version.version,
                     changes=version.describe(), shadow_until=version.shadow_until.isoformat(),
                     detail=version.changes[0].reason)  # fmt: skip
        return created

    def _spike(
        self, cfg: LearningConfig, state: LearningState, events: list[FeedbackEvent], now: datetime
    ) -> Freeze | None:
        loop = cfg.feedback_loop
        if not loop.freeze_on_negative_feedback_spike:
            return None
        since = now - timedelta(hours=loop.negative_spike_window_hours)
        if state.unfrozen_at is not None:
            since = max(since, state.unfrozen_at)
        negative = [e for e in events if e.feedback_type in NEGATIVE and e.created_at > since]
        if len(negative) < loop.negative_spike_count:
            return None
        hours = loop.negative_spike_window_hours
        why = (
            f"{len(negative)} negative feedback events within {hours:g} h (spike threshold {loop.negative_spike_count})"
        )
        return Freeze(now, why)

    def _adaptation(
        self,
        cfg: LearningConfig,
        state: LearningState,
        events: list[FeedbackEvent],
        action: str,
        now: datetime,
        tenant_id: str,
        worker_id: str,
    ) -> PolicyVersion | None:
        if any(v.touches(action) for v in state.shadows):
            return None  # one change at a time per action
        since = counted_since(cfg, state, action, "gate", now)
        counted = [e for e in events if action in e.actions and e.created_at > since]
        loop, current = cfg.feedback_loop, state.rules().get(action)
        rejected = [e for e in counted if e.feedback_type == "reject" and e.gate_result in ("auto", "brief")]
        approved = [e for e in counted if e.feedback_type == "approve" and e.gate_result == "confirm"]
        change: PolicyChange | None = None
        evidence: list[FeedbackEvent] = []
        if loop.reject_auto_to_confirm and len(rejected) >= loop.reject_auto_threshold and current != "confirm":
            change = PolicyChange(action, "confirm", f"rejected {len(rejected)} times after it ran without asking")
            evidence = rejected
        elif len(approved) >= max(loop.promote_confirm_to_auto_threshold, cfg.min_samples_for_adaptation):
            if current == "auto":
                return None
            if self.protected(tenant_id, worker_id, action) or any(e.irreversible for e in approved):
                return None  # never_override_irreversible_rules: it always asks
            change = PolicyChange(action, "auto", f"approved {len(approved)} times when it asked")
            evidence = approved
        if change is None:
            return None
        return _new_version(cfg, state, change, evidence, now)

    # -- the shadow period ends: proposed to a person ------------------------------------------

    def tick(self, tenant_id: str, worker_id: str) -> None:
        """Propose the shadow versions whose shadow period is over; discard those whose proposal a
        person rejected. Prunes the worker's log and feedback once a day."""
        self.prune(tenant_id, worker_id)
        state = self.store.state(tenant_id, worker_id)
        if not state.shadows or self.proposals is None:
            return
        now = self.clock()
        for version in state.shadows:
            if version.suggestion_id is not None:
                if self.proposals.status(tenant_id, worker_id, version.suggestion_id) == "rejected":
                    self._end(tenant_id, worker_id, version.version, "discarded", "the proposal was rejected")
                continue
            if version.shadow_until > now or state.frozen is not None:
                continue
            detail = self.shadow_summary(tenant_id, worker_id, version)
            sid = self.proposals.propose(tenant_id, worker_id, version, detail)
            proposed = replace(version, suggestion_id=sid)
            self.store.update(tenant_id, worker_id, partial(_with, proposed))
            self.log(tenant_id, worker_id, "policy", step="proposed", version=version.version,
                     changes=version.describe(), suggestion_id=sid, detail=detail)  # fmt: skip

    def shadow_summary(self, tenant_id: str, worker_id: str, version: PolicyVersion) -> str:
        seen = differ = 0
        for entry in self.store.decisions(tenant_id, worker_id):
            live = _LIVE.get(str(entry.get("kind")), "")
            for shadow in entry.get("shadow", ()) if live else ():
                if shadow.get("version") == version.version:
                    seen += 1
                    differ += shadow.get("would_have") != entry.get(live)
        days = (version.shadow_until - version.created_at).total_seconds() / 86400
        return f"in shadow {days:g} days: {differ} of {seen} decisions would have been different ({version.describe()})"

    def prune(self, tenant_id: str, worker_id: str, *, force: bool = False) -> tuple[int, int] | None:
        """At most once a day per worker (unless `force`): drop decision log entries and feedback past
        `learning.retention`, never younger than what learning reads (`decay_half_life_days`, the
        shadow period, the spike window); policy steps and policy.json stay. What was dropped, or None
        when it was not time."""
        now, key = self.clock(), (tenant_id, worker_id)
        last = self._pruned.get(key)
        if not force and last is not None and now - last < timedelta(days=1):
            return None
        self._pruned[key] = now
        cfg = self.config_of(tenant_id)
        keep, read = cfg.retention, max(cfg.decay_half_life_days, cfg.safe_apply_after_shadow_days)
        spike = cfg.feedback_loop.negative_spike_window_hours / 24
        dropped = self.store.prune(
            tenant_id, worker_id,
            log_before=now - timedelta(days=max(keep.decision_log_days, read)), log_max=keep.decision_log_max_entries,
            feedback_before=now - timedelta(days=max(keep.feedback_days, read, spike)),
            feedback_max=keep.feedback_max_events,
        )  # fmt: skip
        if any(dropped):
            self.log(tenant_id, worker_id, "retention", log_entries=dropped[0], feedback_events=dropped[1])
        return dropped

    # -- a person's commands -------------------------------------------------------------------

    def apply(self, tenant_id: str, worker_id: str, number: int, by: str) -> PolicyVersion:
        now = self.clock()
        applied: list[PolicyVersion] = []

        def activate(state: LearningState) -> LearningState:
            version = state.version(number)
            if version is None:
                raise PolicyVersionNotFound(f"there is no policy version {number}")
            if state.frozen is not None:
                raise LearningRefused(f"learning is frozen ({state.frozen.reason}); unfreeze it first")
            if version.status != "shadow":
                raise LearningRefused(f"policy version {number} is {version.status}, not in shadow")
            if now < version.shadow_until:
                raise LearningRefused(f"policy version {number} is in shadow until {version.shadow_until.isoformat()}")
            applied.append(replace(version, status="active", applied_at=now, applied_by=by))
            return state.with_version(applied[0])

        self.store.update(tenant_id, worker_id, activate)
        self.log(tenant_id, worker_id, "policy", step="applied", version=number, changes=applied[0].describe(), by=by)
        return applied[0]

    def rollback(self, tenant_id: str, worker_id: str, by: str, number: int | None = None) -> PolicyVersion:
        """The newest active version (or `number`) rolled back: the policy decides as before it."""
        state = self.store.state(tenant_id, worker_id)
        active = [v for v in state.active if number is None or v.version == number]
        if not active:
            raise LearningRefused(
                "no applied policy version to roll back"
                if number is None
                else f"policy version {number} is not applied"
            )
        return self._end(tenant_id, worker_id, active[-1].version, "rolled_back", f"rolled back by {by}", by=by)

    def unfreeze(self, tenant_id: str, worker_id: str, by: str) -> None:
        now = self.clock()

        def thaw(state: LearningState) -> LearningState:
            if state.frozen is None:
                raise LearningRefused("learning is not frozen")
            return replace(state, frozen=None, unfrozen_at=now)

        self.store.update(tenant_id, worker_id, thaw)
        self.log(tenant_id, worker_id, "policy", step="unfrozen", by=by)

    def _end(
        self, tenant_id: str, worker_id: str, number: int, status: Any, detail: str, by: str = "system"
    ) -> PolicyVersion:
        now = self.clock()
        ended: list[PolicyVersion] = []

        def end(state: LearningState) -> LearningState:
            version = state.version(number)
            assert version is not None
            ended.append(replace(version, status=status, ended_at=now, ended_by=by))
            return state.with_version(ended[0])

        self.store.update(tenant_id, worker_id, end)
        self.log(
            tenant_id,
            worker_id,
            "policy",
            step=status,
            version=number,
            changes=ended[0].describe(),
            detail=detail,
            by=by,
        )
        return ended[0]

    def log(self, tenant_id: str, worker_id: str, kind: str, **fields: Any) -> None:
        entry = {"kind": kind, "at": self.clock().isoformat(), **fields}
        self.store.log(tenant_id, worker_id, entry)
        if kind == "policy":
            log.info("[Learning] %s/%s %s", tenant_id, worker_id, entry)


def _new_version(
    cfg: LearningConfig, state: LearningState, change: PolicyChange, evidence: list[FeedbackEvent], now: datetime
) -> PolicyVersion:
    """The next version, in shadow for `safe_apply_after_shadow_days`."""
    number = max((v.version for v in state.versions), default=0) + 1
    shadow_until = now + timedelta(days=cfg.safe_apply_after_shadow_days)
    return PolicyVersion(number, (change,), "shadow", now, shadow_until, tuple(e.feedback_id for e in evidence))


def _with(version: PolicyVersion, state: LearningState) -> LearningState:
    return state.with_version(version)
