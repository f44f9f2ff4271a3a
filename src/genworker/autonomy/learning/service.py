"""LearningService: learning from feedback as a runtime runs it.

- feedback comes from people's decisions: a gated task's confirmation approved or rejected (API, IM
  or dashboard: the `task.confirmation_decided` event), an action undone in its undo window
  (`undo.undone`: the auto action rejected), and `POST .../feedback-events` (any type, about a run);
  each is tied to its decision through the run's policy snapshot (actions, gate result);
- the governance stage decides under the learned policy (`LearnedGateOverlay`) and logs each
  autonomous decision;
- a version whose shadow period is over is proposed as a suggestion (`kind: policy`); approving it
  applies it; `rollback` undoes the newest applied version in one command;
- metrics: gate_pass_rate, rollback_rate, action_success_rate over a window.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from genworker.autonomy.learning.briefs import LearnedBriefOverlay
from genworker.autonomy.learning.gate import LearnedGateOverlay
from genworker.autonomy.learning.learner import Learner, new_feedback_id
from genworker.autonomy.learning.models import FeedbackEvent, FeedbackSource, FeedbackType, PolicyVersion
from genworker.autonomy.learning.store import LearningStore
from genworker.autonomy.suggestions import Suggestion, SuggestionAggregate, SuggestionNotFound
from genworker.bus import Event, EventBus, Subscription
from genworker.worker.confirmations.models import CONFIRMATION_DECIDED
from genworker.worker.governance.errors import SnapshotError
from genworker.worker.governance.policy_gate import DEFAULT_POLICY, resolve_policy
from genworker.worker.governance.snapshots import PolicyInputs, SnapshotStore
from genworker.worker.lifecycle import TaskLifecycle, TaskLifecycleError
from genworker.worker.task import RunRef, RunState
from genworker.workspace.models.steward import LearningConfig
from genworker.workspace.registry import WorkspaceRegistry

__all__ = ["LearningService", "build_learning"]

log = logging.getLogger("genworker.learning")

RunsHere = Callable[[str, str], bool]  # (tenant, worker): does this process run the worker's autonomy?
UNDO_UNDONE = "undo.undone"
_IRREVERSIBLE_REASONS = frozenset({"irreversible_needs_confirmation", "always_confirm"})
_RAN = ("auto", "brief")


class SuggestedVersions:
    """Proposals as suggestions of kind `policy`: approving one applies its version."""

    def __init__(self, suggestions: SuggestionAggregate) -> None:
        self.suggestions = suggestions

    def propose(self, tenant_id: str, worker_id: str, version: PolicyVersion, detail: str) -> str | None:
        created = self.suggestions.store.create(
            tenant_id, worker_id, "policy", f"Apply learned policy v{version.version}: {version.describe()}",
            detail, f"policy:v{version.version}:{version.created_at.isoformat()}", "learning",
            {"version": version.version, "changes": version.describe()},
        )  # fmt: skip
        return created.suggestion_id if created is not None else None

    def status(self, tenant_id: str, worker_id: str, suggestion_id: str) -> str | None:
        try:
            return self.suggestions.store.get(tenant_id, worker_id, suggestion_id).status
        except (SuggestionNotFound, ValueError, OSError):
            return None


def build_learning(
    root: Path,
    registry: WorkspaceRegistry,
    tasks: TaskLifecycle,
    suggestions: SuggestionAggregate,
    bus: EventBus,
    runs_here: RunsHere,
) -> LearningService:
    """The learner over the workers' files, attached to the governance stage and the suggestions."""

    def config_of(tenant_id: str) -> LearningConfig:
        state = registry.tenant(tenant_id)
        return state.tenant.learning if state is not None else LearningConfig()

    def protected(tenant_id: str, worker_id: str, action: str) -> bool:
        state, worker = registry.tenant(tenant_id), registry.worker(tenant_id, worker_id)
        if state is None or worker is None:
            return True
        policy = resolve_policy(state.tenant.policy, worker.persona.policy)
        return action in policy.irreversible_actions or action in policy.always_require_confirmation

    def budget_of(tenant_id: str, worker_id: str) -> int:
        state, worker = registry.tenant(tenant_id), registry.worker(tenant_id, worker_id)
        if state is None or worker is None:
            return DEFAULT_POLICY.interruption_budget_per_day
        return resolve_policy(state.tenant.policy, worker.persona.policy).interruption_budget_per_day

    learner = Learner(
        LearningStore(root), config_of, protected, proposals=SuggestedVersions(suggestions), budget_of=budget_of
    )
    service = LearningService(learner, tasks, SnapshotStore(root), bus, runs_here)
    suggestions.appliers["policy"] = service.apply_suggestion
    return service


class LearningService:
    def __init__(
        self,
        learner: Learner,
        tasks: TaskLifecycle,
        snapshots: SnapshotStore,
        bus: EventBus | None = None,
        runs_here: RunsHere | None = None,
    ) -> None:
        self.learner = learner
        self.tasks = tasks
        self.snapshots = snapshots
        self.bus = bus
        self.runs_here = runs_here
        self.overlay = LearnedGateOverlay(learner, runs_here)
        self.briefs = LearnedBriefOverlay(learner, self.features_of_run)
        self._subscriptions: list[Subscription] = []

    @property
    def store(self) -> LearningStore:
        return self.learner.store

    async def start(self) -> None:
        if self.bus is not None and not self._subscriptions:
            self._subscriptions = [
                self.bus.subscribe(CONFIRMATION_DECIDED, self._confirmation_decided),
                self.bus.subscribe(UNDO_UNDONE, self._undone),
            ]

    async def stop(self) -> None:
        for subscription in self._subscriptions:
            subscription.unsubscribe()
        self._subscriptions = []

    # -- feedback ------------------------------------------------------------------------------

    async def feedback_on_run(
        self, tenant_id: str, worker_id: str, run_id: str, feedback_type: FeedbackType, by: str, **extra: Any
    ) -> tuple[FeedbackEvent, list[PolicyVersion]]:
        """A person's feedback on the decision that started `run_id`. LookupError: no such run, or one
        without a recorded decision."""
        run = await self.tasks.get_run(RunRef(tenant_id, worker_id, run_id))
        ref = run.provenance.policy_snapshot_ref
        if ref is None:
            raise LookupError(f"run {run_id} has no recorded decision")
        return await self.feedback_on_decision(tenant_id, worker_id, ref, feedback_type, by, plan_id=run_id, **extra)

    async def feedback_on_decision(
        self,
        tenant_id: str,
        worker_id: str,
        decision_id: str,
        feedback_type: FeedbackType,
        by: str,
        *,
        plan_id: str | None = None,
        source: FeedbackSource = "api",
        note: str | None = None,
        old_value: str | None = None,
        new_value: str | None = None,
        feedback_id: str | None = None,
    ) -> tuple[FeedbackEvent, list[PolicyVersion]]:
        """A person's feedback on a decision (its policy snapshot, as the decision log names it): what
        it was about comes from the snapshot (actions, gate result). LookupError: no such decision."""
        try:
            snapshot = await asyncio.to_thread(self.snapshots.load_policy, tenant_id, worker_id, decision_id)
        except SnapshotError as exc:
            raise LookupError(f"decision {decision_id} cannot be read: {exc}") from None
        decision, inputs = snapshot.decision, snapshot.inputs
        codes = {r.code for r in decision.gate_reasons}
        event = FeedbackEvent(
            feedback_id=feedback_id or new_feedback_id(),
            tenant_id=tenant_id,
            worker_id=worker_id,
            feedback_type=feedback_type,
            created_at=self.learner.clock(),
            actions=inputs.requested_actions or (f"{inputs.source_type}_task",),
            gate_result=decision.gate_result,
            decision_id=decision_id,
            plan_id=plan_id,
            old_value=old_value,
            new_value=new_value,
            note=note,
            by=by,
            source=source,
            irreversible=decision.reversibility == "irreversible" or bool(codes & _IRREVERSIBLE_REASONS),
            features=features_of(inputs),
        )
        created = await asyncio.to_thread(self.learner.record, event)
        return event, created

    async def features_of_run(self, tenant_id: str, worker_id: str, run_id: str) -> dict[str, str] | None:
        """The similarity features of the decision that started `run_id` (None: no such run, or none
        recorded)."""
        try:
            run = await self.tasks.get_run(RunRef(tenant_id, worker_id, run_id))
            ref = run.provenance.policy_snapshot_ref
            if ref is None:
                return None
            snapshot = await asyncio.to_thread(self.snapshots.load_policy, tenant_id, worker_id, ref)
        except (LookupError, TaskLifecycleError, SnapshotError, ValueError):
            return None
        return features_of(snapshot.inputs)

    async def _confirmation_decided(self, event: Event) -> None:
        """A gated task's confirmation decided by a person: approve or reject of its decision."""
        status, run_id = event.payload.get("status"), str(event.payload.get("run_id") or "")
        t, w = event.tenant_id, event.worker_id
        if status not in ("approved", "rejected") or not t or not w or not run_id or not self._here(t, w):
            return
        decided_by = str(event.payload.get("decided_by") or "")
        if decided_by.startswith("policy:"):  # closed by a timeout, not a person
            return
        cid = str(event.payload.get("confirmation_id"))
        kind: FeedbackType = "approve" if status == "approved" else "reject"
        await self._quietly(t, w, run_id, kind, decided_by, "confirmation", f"fb_{cid}")

    async def _undone(self, event: Event) -> None:
        """An action held in its undo window and undone: the auto action was rejected."""
        t, w, run_id = event.tenant_id, event.worker_id, str(event.payload.get("run_id") or "")
        if not t or not w or not run_id or not self._here(t, w):
            return
        by = str(event.payload.get("decided_by") or "")
        await self._quietly(t, w, run_id, "reject", by, "undo", f"fb_{event.payload.get('undo_id')}")

    async def _quietly(
        self, t: str, w: str, run_id: str, kind: FeedbackType, by: str, source: FeedbackSource, fid: str
    ) -> None:
        try:
            await self.feedback_on_run(t, w, run_id, kind, by, source=source, feedback_id=fid)
        except (LookupError, TaskLifecycleError, ValueError) as exc:
            log.info("[Learning] %s/%s: feedback on run %s not learned from: %s", t, w, run_id, exc)

    def _here(self, tenant_id: str, worker_id: str) -> bool:
        return self.runs_here is None or self.runs_here(tenant_id, worker_id)

    # -- a person's commands -------------------------------------------------------------------

    def apply_suggestion(self, suggestion: Suggestion) -> str:
        """The suggestions' applier for `kind: policy` (approving it applies its version)."""
        number = int(suggestion.payload["version"])
        version = self.learner.apply(
            suggestion.tenant_id, suggestion.worker_id, number, f"suggestion:{suggestion.suggestion_id}"
        )
        return f"policy version {version.version} applied: {version.describe()}"

    async def rollback(self, tenant_id: str, worker_id: str, by: str, version: int | None = None) -> PolicyVersion:
        return await asyncio.to_thread(self.learner.rollback, tenant_id, worker_id, by, version)

    async def apply(self, tenant_id: str, worker_id: str, version: int, by: str) -> PolicyVersion:
        return await asyncio.to_thread(self.learner.apply, tenant_id, worker_id, version, by)

    async def unfreeze(self, tenant_id: str, worker_id: str, by: str) -> None:
        await asyncio.to_thread(self.learner.unfreeze, tenant_id, worker_id, by)

    # -- what a person reads -------------------------------------------------------------------

    async def overview(self, tenant_id: str, worker_id: str, window_days: int = 30) -> dict[str, Any]:
        await asyncio.to_thread(self.learner.tick, tenant_id, worker_id)
        state = await asyncio.to_thread(self.store.state, tenant_id, worker_id)
        cfg = self.learner.config_of(tenant_id)
        return {
            "enabled": cfg.enabled,
            "mode": cfg.mode,
            "policy_version": state.live_version,
            "frozen": {"at": state.frozen.at.isoformat(), "reason": state.frozen.reason} if state.frozen else None,
            "rules": state.rules(),
            "versions": state.as_json()["versions"],
            "metrics": await self.metrics(tenant_id, worker_id, window_days),
        }

    async def metrics(self, tenant_id: str, worker_id: str, window_days: int = 30) -> list[dict[str, Any]]:
        """Steward's MetricSnapshots over the last `window_days`: gate_pass_rate (auto or brief among
        gate decisions), rollback_rate (of those that ran, the share a person rejected or undid
        afterwards), action_success_rate (of their runs that ended, the share completed)."""
        now = self.learner.clock()
        since = now - timedelta(days=window_days)
        entries = await asyncio.to_thread(self.store.decisions, tenant_id, worker_id)
        gates = [e for e in entries if e.get("kind") == "gate" and _at(e) >= since]
        counts = Counter(str(e.get("gate_result")) for e in gates)
        ran = counts["auto"] + counts["brief"]
        feedback = await asyncio.to_thread(self.store.feedback, tenant_id, worker_id)
        undone = {
            e.decision_id or e.feedback_id
            for e in feedback
            if e.feedback_type == "reject" and e.gate_result in _RAN and e.created_at >= since
        }
        ran_refs = {str(e.get("decision_id")) for e in gates if e.get("gate_result") in _RAN}
        ended = await self._ended_runs(tenant_id, worker_id, since, ran_refs)
        values = {
            "gate_pass_rate": _ratio(ran, len(gates)),
            "rollback_rate": _ratio(len(undone), ran),
            "action_success_rate": _ratio(sum(ended), len(ended)),
            **{f"gate_result_{k}": _ratio(counts[k], len(gates)) for k in ("auto", "brief", "confirm", "blocked")},
        }
        labels = {"tenant_id": tenant_id, "worker_id": worker_id}
        return [
            {"metric_name": name, "value": value, "window": f"{window_days}d", "captured_at": now.isoformat(),
             "metric_labels": labels}
            for name, value in values.items()
        ]  # fmt: skip

    async def _ended_runs(self, tenant_id: str, worker_id: str, since: datetime, refs: set[str]) -> list[bool]:
        """For each run of an auto/brief decision that ended in the window: did it complete?"""
        ended = []
        try:
            runs = await self.tasks.list_runs(tenant_id, worker_id, limit=200)
        except (TaskLifecycleError, OSError):
            return []
        for run in runs:
            finished = run.timings.finished_at
            if not run.terminal or finished is None or finished < since:
                continue
            if run.provenance.policy_snapshot_ref in refs and run.state != RunState.SUPERSEDED:
                ended.append(run.state == RunState.COMPLETED)
        return ended


def features_of(inputs: PolicyInputs) -> dict[str, str]:
    """What makes a decision's items alike (Steward's similarity features), from its policy inputs:
    where it came from, what it wanted to do, what it was about (the duty or goal), and who asked (their
    trust level)."""
    about = f"duty:{inputs.duty_id}" if inputs.duty_id else f"goal:{inputs.goal_id}" if inputs.goal_id else "-"
    return {
        "source": f"sensor:{inputs.sensor_id}" if inputs.sensor_id else inputs.source_type,
        "intent": ",".join(inputs.requested_actions) or f"{inputs.source_type}_task",
        "entity_type": about,
        "counterpart_role": f"trust:{inputs.trust_level}",
    }


def _at(entry: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(str(entry["at"]))


def _ratio(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None
