"""Suggestions: one per fingerprint, decided once; approving writes what the loader reads
(skills/{id}/SKILL.md, rules/learned/{id}.md) and a proposed rule has no effect before that."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from genworker.autonomy.goals import GoalAggregate
from genworker.autonomy.suggestions import (
    FeedbackStore,
    SuggestionAggregate,
    SuggestionDecided,
    SuggestionNotFound,
    SuggestionStore,
    render_skill,
)
from genworker.workspace.registry import WorkspaceRegistry
from genworker.workspace.snapshot import Worker

GOAL = (
    "---\ngoal_id: tidy\ntitle: Tidy up\nmilestones:\n  - id: m\n    title: M\n    tasks:\n"
    "      - {id: t, title: T, status: done}\n---\nKeep it tidy.\n"
)


@pytest.fixture
def root(small_workspace: Callable[..., Path]) -> Path:
    return small_workspace({"acme": ["alice"]}, {"tenants/acme/workers/alice/goals/tidy.md": GOAL})


def aggregate(root: Path) -> SuggestionAggregate:
    return SuggestionAggregate(SuggestionStore(root), GoalAggregate(root))


def loaded(root: Path) -> Worker:
    registry = WorkspaceRegistry(root)
    registry.load_all()
    worker = registry.worker("acme", "alice")
    assert worker is not None, registry.issues()
    return worker


def test_the_same_fingerprint_is_suggested_once(root: Path) -> None:
    store = SuggestionStore(root)
    first = store.create("acme", "alice", "duty_drift", "Review", "d", "drift:x", "duty_drift", {"duty_id": "x"})
    again = store.create("acme", "alice", "duty_drift", "Review", "d", "drift:x", "duty_drift", {"duty_id": "x"})
    assert first is not None and again is None
    assert [s.suggestion_id for s in store.list("acme", "alice")] == [first.suggestion_id]


def test_approving_a_skill_suggestion_writes_a_skill_the_loader_accepts(root: Path) -> None:
    agg = aggregate(root)
    payload = {
        "skill_id": "weekly-summary",
        "description": "Write the weekly summary",
        "instructions": "Summarise the week in five bullets.",
        "keywords": ["weekly", "summary"],
    }
    s = agg.store.create(
        "acme", "alice", "skill", "Make a skill", "seen 3 times", "repeated:x", "repeated_task", payload
    )
    assert s is not None
    decided = agg.decide("acme", "alice", s.suggestion_id, "approve", "dana")
    assert (
        decided.status == "approved" and decided.result == "tenants/acme/workers/alice/skills/weekly-summary/SKILL.md"
    )
    skill = loaded(root).skills["weekly-summary"]
    assert skill.spec.description == "Write the weekly summary"
    assert [k.keyword for k in skill.spec.settings.keywords] == ["weekly", "summary"]
    with pytest.raises(SuggestionDecided, match="already approved"):
        agg.decide("acme", "alice", s.suggestion_id, "reject", "dana")


def test_a_skill_that_exists_is_not_overwritten_and_the_suggestion_stays_pending(root: Path) -> None:
    agg = aggregate(root)
    skill = root / "tenants/acme/workers/alice/skills/mine/SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text(render_skill("mine", "Mine", "Do it my way."), encoding="utf-8")
    payload = {"skill_id": "mine", "description": "Theirs", "instructions": "Other way."}
    s = agg.store.create("acme", "alice", "skill", "Make a skill", "", "crystallize:r", "rule_crystallizer", payload)
    assert s is not None
    with pytest.raises(ValueError, match="already exists"):
        agg.decide("acme", "alice", s.suggestion_id, "approve", "dana")
    assert agg.store.get("acme", "alice", s.suggestion_id).status == "pending"
    assert "my way" in skill.read_text(encoding="utf-8")


def test_a_learned_rule_takes_effect_only_when_approved(root: Path) -> None:
    agg = aggregate(root)
    payload = {"rule_id": "cite-sources", "text": "Always cite the source of a number.", "confidence": 0.9}
    s = agg.store.create(
        "acme", "alice", "rule", "Cite sources", "learned from feedback", "rule:cite", "feedback", payload
    )
    assert s is not None
    assert [r.rule_id for r in loaded(root).rules] == []  # proposed: nothing the worker applies
    agg.decide("acme", "alice", s.suggestion_id, "approve", "dana")
    (rule,) = loaded(root).rules
    assert (rule.rule_id, rule.kind, rule.status, rule.text) == (
        "cite-sources",
        "learned",
        "active",
        "Always cite the source of a number.",
    )


def test_a_rejected_rule_never_takes_effect(root: Path) -> None:
    agg = aggregate(root)
    payload = {"rule_id": "guess", "text": "Guess when unsure."}
    s = agg.store.create("acme", "alice", "rule", "Guess", "", "rule:guess", "feedback", payload)
    assert s is not None
    assert agg.decide("acme", "alice", s.suggestion_id, "reject", "dana").status == "rejected"
    assert loaded(root).rules == ()


def test_approving_goal_completion_completes_the_goal(root: Path) -> None:
    agg = aggregate(root)
    s = agg.store.create(
        "acme", "alice", "goal_completion", "Done?", "", "goal:tidy", "goal_completion", {"goal_id": "tidy"}
    )
    assert s is not None
    assert agg.decide("acme", "alice", s.suggestion_id, "approve", "dana").result == "goal tidy is completed"
    assert loaded(root).goals["tidy"].status == "completed"
    assert (root / "tenants/acme/workers/alice/goals/tidy.md").read_text(encoding="utf-8").endswith("Keep it tidy.\n")


def test_two_people_approving_at_once_apply_it_once(root: Path) -> None:
    agg = aggregate(root)
    payload = {"skill_id": "race", "description": "Race", "instructions": "Once."}
    s = agg.store.create("acme", "alice", "skill", "Race", "", "race", "test", payload)
    assert s is not None
    outcomes: list[str] = []
    barrier = threading.Barrier(4)

    def approve() -> None:
        barrier.wait()
        try:
            agg.decide("acme", "alice", s.suggestion_id, "approve", threading.current_thread().name)
            outcomes.append("approved")
        except SuggestionDecided:
            outcomes.append("decided")

    threads = [threading.Thread(target=approve) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["approved", "decided", "decided", "decided"]


def test_unknown_suggestions_and_empty_feedback_are_refused(root: Path) -> None:
    with pytest.raises(SuggestionNotFound):
        aggregate(root).decide("acme", "alice", "sg_0000000000000000", "approve", "dana")
    feedback = FeedbackStore(root)
    with pytest.raises(ValueError, match="empty"):
        feedback.add("acme", "alice", "   ", "dana")
    feedback.add("acme", "alice", "Shorter briefs please", "dana")
    assert [f["text"] for f in feedback.list("acme", "alice")] == ["Shorter briefs please"]
