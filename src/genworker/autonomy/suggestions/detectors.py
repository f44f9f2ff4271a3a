"""Detectors that turn what a worker did into pending suggestions (each suggestion once, by fingerprint).

- repeated task: the same request (case, digits and spacing ignored) completed at least
  `repeat_threshold` times without a duty or skill behind it → suggest a skill for it;
- goal completion: an active goal whose tasks are all done → suggest completing the goal;
- goal follow-up: a completed goal with `on_complete: create_duty` → suggest a duty that keeps its
  result (upstream drafts one with a model; this is a template a person adjusts);
- duty drift: a duty whose last `drift_window` runs failed at least half the time → suggest a review;
- rule → skill crystallisation: an active learned rule with confidence ≥ `crystallize_confidence`
  → suggest a skill that carries it (the rule itself stays as it is).
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter, defaultdict
from dataclasses import dataclass

from genworker.autonomy.goals import GoalAggregate
from genworker.autonomy.suggestions.store import Suggestion, SuggestionStore
from genworker.worker.lifecycle import TaskLifecycle, TaskLifecycleError
from genworker.worker.task import RunRecord, RunState
from genworker.workspace.models import GoalStatus
from genworker.workspace.snapshot import Worker

__all__ = ["DetectorSettings", "SuggestionDetectors", "normalize_request", "skill_id_for"]

_BAD_STATES = frozenset({RunState.FAILED, RunState.INTERRUPTED, RunState.BUDGET_EXCEEDED})


@dataclass(frozen=True, slots=True)
class DetectorSettings:
    repeat_threshold: int = 3
    drift_window: int = 6
    drift_min_runs: int = 3
    crystallize_confidence: float = 0.8
    runs_scanned: int = 200


def normalize_request(text: str) -> str:
    return " ".join(re.sub(r"\d+", "#", text.casefold()).split())


def skill_id_for(text: str) -> str:
    words = re.findall(r"[a-z0-9]+", text.casefold())[:6]
    return "-".join(words)[:60].strip("-") or "learned-skill"


class SuggestionDetectors:
    def __init__(
        self,
        store: SuggestionStore,
        tasks: TaskLifecycle,
        goals: GoalAggregate,
        settings: DetectorSettings | None = None,
    ) -> None:
        self.store = store
        self.tasks = tasks
        self.goals = goals
        self.settings = settings or DetectorSettings()

    async def run(self, worker: Worker) -> list[Suggestion]:
        """Every detector over `worker`; the suggestions that are new."""
        runs = await self.tasks.list_runs(worker.tenant_id, worker.worker_id, limit=self.settings.runs_scanned)
        requests = await self._requests(worker, runs)
        return await asyncio.to_thread(self._detect, worker, runs, requests)

    async def _requests(self, worker: Worker, runs: list[RunRecord]) -> list[str]:
        """The request texts of completed runs not started by a duty or the heartbeat (the text lives
        in the task manifest; a pruned or unreadable one is no evidence)."""
        texts = []
        for run in runs:
            p = run.provenance
            if run.state is not RunState.COMPLETED or p.duty_id or p.source_type == "heartbeat":
                continue
            try:
                manifest = await self.tasks.get_manifest(worker.tenant_id, worker.worker_id, run.task_id)
            except (TaskLifecycleError, ValueError, OSError):
                continue
            texts.append(manifest.text)
        return texts

    def _detect(self, worker: Worker, runs: list[RunRecord], requests: list[str]) -> list[Suggestion]:
        found = [
            *self._repeated(worker, requests, len(runs)),
            *self._goal_completion(worker),
            *self._goal_follow_up(worker),
            *self._duty_drift(worker, runs),
            *self._crystallize(worker),
        ]
        return [s for s in found if s is not None]

    def _repeated(self, worker: Worker, requests: list[str], scanned: int) -> list[Suggestion | None]:
        texts: dict[str, str] = {}
        counts: Counter[str] = Counter()
        for text in requests:
            key = normalize_request(text)
            if key:
                texts.setdefault(key, text)
                counts[key] += 1
        out: list[Suggestion | None] = []
        for key, count in counts.items():
            if count < self.settings.repeat_threshold:
                continue
            text = texts[key]
            skill_id = skill_id_for(text)
            if skill_id in worker.skills:
                continue
            out.append(
                self.store.create(
                    worker.tenant_id,
                    worker.worker_id,
                    "skill",
                    f"Make a skill for a repeated request: {text[:80]}",
                    f"Asked {count} times in the last {scanned} runs without a skill or duty behind it.",
                    f"repeated:{key}",
                    "repeated_task",
                    {
                        "skill_id": skill_id,
                        "description": f"Handle the recurring request: {text[:200]}",
                        "instructions": f"This request recurs. Handle it the same way each time:\n\n> {text}",
                        "keywords": sorted(set(re.findall(r"[a-z]{4,}", key)))[:5],
                        "count": count,
                    },
                )
            )
        return out

    def _goal_completion(self, worker: Worker) -> list[Suggestion | None]:
        out: list[Suggestion | None] = []
        for goal in self.goals.goals(worker.tenant_id, worker.worker_id):
            tasks = [t for t in goal.tasks() if t.status != "cancelled"]
            if goal.status != GoalStatus.ACTIVE or not tasks or any(t.status != "done" for t in tasks):
                continue
            out.append(
                self.store.create(
                    worker.tenant_id,
                    worker.worker_id,
                    "goal_completion",
                    f"Mark goal {goal.goal_id!r} completed",
                    f"All {len(tasks)} tasks of {goal.title!r} are done.",
                    f"goal:{goal.goal_id}",
                    "goal_completion",
                    {"goal_id": goal.goal_id},
                )
            )
        return out

    def _goal_follow_up(self, worker: Worker) -> list[Suggestion | None]:
        out: list[Suggestion | None] = []
        for goal in self.goals.goals(worker.tenant_id, worker.worker_id):
            if goal.status != GoalStatus.COMPLETED or goal.on_complete != "create_duty":
                continue
            duty_id = f"keep-{goal.goal_id}"[:128]
            if duty_id in worker.duties:
                continue
            action = (
                f"Goal {goal.goal_id!r} ({goal.title}) is completed. Check that its result still holds"
                + (f" (milestones: {', '.join(m.title or m.id for m in goal.milestones)})" if goal.milestones else "")
                + ", and report anything that drifted with what to do about it."
            )
            out.append(
                self.store.create(
                    worker.tenant_id,
                    worker.worker_id,
                    "duty",
                    f"Create a duty that keeps the result of goal {goal.goal_id!r}",
                    f"The goal asks for one when it completes (on_complete: create_duty): duties/{duty_id}.md.",
                    f"goal_follow_up:{goal.goal_id}",
                    "goal_on_complete",
                    {"duty_id": duty_id, "goal_id": goal.goal_id, "title": f"Keep: {goal.title}", "action": action},
                )
            )
        return out

    def _duty_drift(self, worker: Worker, runs: list[RunRecord]) -> list[Suggestion | None]:
        by_duty: dict[str, list[RunRecord]] = defaultdict(list)
        for run in runs:  # newest first
            if run.provenance.duty_id and run.terminal:
                by_duty[run.provenance.duty_id].append(run)
        out: list[Suggestion | None] = []
        for duty_id, duty_runs in by_duty.items():
            window = duty_runs[: self.settings.drift_window]
            failed = [r for r in window if r.state in _BAD_STATES]
            if len(window) < self.settings.drift_min_runs or len(failed) * 2 < len(window):
                continue
            errors = sorted({r.error.code for r in failed if r.error is not None})
            out.append(
                self.store.create(
                    worker.tenant_id,
                    worker.worker_id,
                    "duty_drift",
                    f"Review duty {duty_id!r}: {len(failed)} of its last {len(window)} runs failed",
                    f"Errors: {', '.join(errors) or 'none recorded'}; last failed run {failed[0].run_id}.",
                    f"drift:{duty_id}:{failed[0].run_id}",
                    "duty_drift",
                    {"duty_id": duty_id, "failed": len(failed), "window": len(window), "errors": errors},
                )
            )
        return out

    def _crystallize(self, worker: Worker) -> list[Suggestion | None]:
        out: list[Suggestion | None] = []
        for rule in worker.rules:
            if rule.kind != "learned" or rule.status != "active":
                continue
            if rule.confidence < self.settings.crystallize_confidence or not rule.text.strip():
                continue
            skill_id = skill_id_for(f"rule {rule.rule_id}")
            if skill_id in worker.skills:
                continue
            out.append(
                self.store.create(
                    worker.tenant_id,
                    worker.worker_id,
                    "skill",
                    f"Crystallise learned rule {rule.rule_id!r} into a skill",
                    f"The rule has confidence {rule.confidence:.2f}; a skill makes it explicit and matchable.",
                    f"crystallize:{rule.rule_id}",
                    "rule_crystallizer",
                    {
                        "skill_id": skill_id,
                        "description": rule.title or f"Apply the learned rule {rule.rule_id}",
                        "instructions": rule.text,
                        "rule_id": rule.rule_id,
                    },
                )
            )
        return out
