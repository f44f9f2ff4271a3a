"""SuggestionAggregate: the only code that decides a suggestion and applies what approving means.

- ``skill``: writes ``skills/{skill_id}/SKILL.md`` (refused if that skill exists), valid for the
  skill loader — checked with the loader's own model before the file is created;
- ``rule``: a learned rule waits here as a *proposed* suggestion and has no effect; approving
  writes ``rules/learned/{rule_id}.md`` with ``status: active``;
- ``goal_completion``: completes the goal through the GoalAggregate;
- ``duty_drift``: recorded as acknowledged (a person reviews the duty; nothing is changed for them);
- ``duty``: writes ``duties/{duty_id}.md`` (refused if that file exists): a duty that keeps a
  completed goal's result (a goal with ``on_complete: create_duty``), manual and propose-only;
- any kind with an applier registered in ``appliers`` (``policy``: a learned policy version is
  applied, autonomy/learning).

Deciding holds the suggestion's lock, so two people approving at once apply it once; the second
gets SuggestionDecided. A failed apply leaves the suggestion pending with the error raised.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import ValidationError

from genworker.autonomy.goals import GoalAggregate
from genworker.autonomy.suggestions.store import Suggestion, SuggestionDecided, SuggestionStore
from genworker.fsutil import create_exclusive
from genworker.ids import safe_join, validate_id
from genworker.workspace.models import DutySpec, Rule
from genworker.workspace.models.skill import SKILL_NAME, SkillSpec

__all__ = ["SuggestionAggregate", "render_duty", "render_rule", "render_skill"]

log = logging.getLogger("genworker.suggestions")


def render_skill(skill_id: str, description: str, instructions: str, keywords: list[str] | None = None) -> str:
    """A SKILL.md the loader accepts (ValueError naming the field otherwise)."""
    if not SKILL_NAME.match(skill_id):
        raise ValueError(f"skill_id {skill_id!r} must be lowercase letters, digits and single hyphens")
    meta: dict[str, Any] = {"scope": "worker", "strategy": {"mode": "autonomous"}}
    if keywords:
        meta["keywords"] = [{"keyword": k, "weight": 1.0} for k in keywords]
    front: dict[str, Any] = {"name": skill_id, "description": description.strip()[:1024], "version": "1.0.0"}
    front["metadata"] = {"genworker": meta}
    try:
        SkillSpec.model_validate(front)
    except ValidationError as exc:
        raise ValueError(f"skills/{skill_id}/SKILL.md would be invalid: {exc}") from None
    body = f"# {skill_id}\n\n{instructions.strip()}\n"
    return "---\n" + yaml.safe_dump(front, sort_keys=False, allow_unicode=True) + "---\n" + body


def render_rule(rule_id: str, title: str, text: str, confidence: float, source: str) -> str:
    front = {"title": title, "status": "active", "confidence": confidence, "source": source}
    try:
        Rule.model_validate({"rule_id": rule_id, "kind": "learned", **front, "text": text})
    except ValidationError as exc:
        raise ValueError(f"rules/learned/{rule_id}.md would be invalid: {exc}") from None
    return "---\n" + yaml.safe_dump(front, sort_keys=False, allow_unicode=True) + "---\n" + text.strip() + "\n"


def render_duty(duty_id: str, title: str, action: str, goal_id: str) -> str:
    """A duty that keeps a completed goal's result: started by hand and proposing only, until a
    person gives it a schedule and a posture."""
    front = {
        "duty_id": duty_id,
        "title": title,
        "status": "active",
        "triggers": [{"id": "manual", "type": "manual"}],
        "posture": {"default": "propose"},
        "quality_criteria": [f"The result of goal {goal_id} still holds, or the report says what drifted"],
    }
    try:
        DutySpec.model_validate({**front, "action": action})
    except ValidationError as exc:
        raise ValueError(f"duties/{duty_id}.md would be invalid: {exc}") from None
    return "---\n" + yaml.safe_dump(front, sort_keys=False, allow_unicode=True) + "---\n" + action.strip() + "\n"


class SuggestionAggregate:
    def __init__(self, store: SuggestionStore, goals: GoalAggregate) -> None:
        self.store = store
        self.goals = goals
        self.appliers: dict[str, Callable[[Suggestion], str]] = {}  # kind -> what approving does

    @property
    def root(self) -> Path:
        return self.store.root

    def decide(
        self, tenant_id: str, worker_id: str, sid: str, decision: Literal["approve", "reject"], by: str
    ) -> Suggestion:
        if decision not in ("approve", "reject"):
            raise ValueError(f"decision must be 'approve' or 'reject', got {decision!r}")
        with self.store.lock(tenant_id, worker_id, sid):
            current = self.store.get(tenant_id, worker_id, sid)
            if current.status != "pending":
                raise SuggestionDecided(f"suggestion {sid!r} is already {current.status}")
            if decision == "reject":
                return self.store.save_decision(current, "rejected", by, None)
            result = self._apply(current)
            log.info("[Suggestions] %s/%s approved %s: %s", tenant_id, worker_id, sid, result)
            return self.store.save_decision(current, "approved", by, result)

    def _worker_dir(self, s: Suggestion) -> Path:
        return safe_join(self.root, "tenants", s.tenant_id, "workers", s.worker_id)

    def _apply(self, s: Suggestion) -> str:
        p = s.payload
        if s.kind in self.appliers:
            return self.appliers[s.kind](s)
        match s.kind:
            case "skill":
                skill_id = str(p["skill_id"])
                text = render_skill(
                    skill_id, str(p["description"]), str(p["instructions"]), list(p.get("keywords", []))
                )
                path = self._worker_dir(s) / "skills" / validate_id(skill_id, "skill id") / "SKILL.md"
                if not create_exclusive(path, text.encode("utf-8")):
                    raise ValueError(f"skill {skill_id!r} already exists at {path.relative_to(self.root)}")
                return path.relative_to(self.root).as_posix()
            case "rule":
                rule_id = validate_id(str(p["rule_id"]), "rule id")
                text = render_rule(
                    rule_id, s.title, str(p["text"]), float(p.get("confidence", 0.8)), f"suggestion:{s.suggestion_id}"
                )
                path = self._worker_dir(s) / "rules" / "learned" / f"{rule_id}.md"
                if not create_exclusive(path, text.encode("utf-8")):
                    raise ValueError(f"rule {rule_id!r} already exists at {path.relative_to(self.root)}")
                return path.relative_to(self.root).as_posix()
            case "goal_completion":
                change = self.goals.move_now(s.tenant_id, s.worker_id, str(p["goal_id"]), "complete")
                return f"goal {change.goal.goal_id} is {change.goal.status.value}"
            case "duty":
                duty_id = validate_id(str(p["duty_id"]), "duty id")
                text = render_duty(duty_id, str(p["title"]), str(p["action"]), str(p["goal_id"]))
                path = self._worker_dir(s) / "duties" / f"{duty_id}.md"
                if not create_exclusive(path, text.encode("utf-8")):
                    raise ValueError(f"duty {duty_id!r} already exists at {path.relative_to(self.root)}")
                return path.relative_to(self.root).as_posix()
            case "duty_drift":
                return f"acknowledged: review duty {p.get('duty_id')}"
            case _:
                raise ValueError(f"nothing applies a suggestion of kind {s.kind!r} on this runtime")
