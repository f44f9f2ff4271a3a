"""Pruning of the learning files: the decision log and the feedback are bounded by age and count
(`learning.retention`), never below what learning still reads; policy steps (the history of the
versions) always stay, and an append after a prune lands in the same file."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from genworker.autonomy.learning import FeedbackEvent, Learner, LearningStore
from genworker.workspace.models.steward import LearningConfig

NOW = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def gate(store: LearningStore, at: datetime, n: int) -> None:
    store.log("acme", "alice", {"kind": "gate", "at": at.isoformat(), "decision_id": f"d{n}"})


def step(store: LearningStore, at: datetime, n: int) -> None:
    store.log("acme", "alice", {"kind": "policy", "at": at.isoformat(), "step": "applied", "version": n})


def feedback(store: LearningStore, at: datetime, n: int) -> None:
    store.add_feedback(FeedbackEvent(f"fb_{n}", "acme", "alice", "snooze", at))


def test_prune_keeps_the_newest_within_age_and_count_and_every_policy_step(tmp_path: Path) -> None:
    store = LearningStore(tmp_path)
    for n in range(10):
        at = NOW + timedelta(hours=n)
        gate(store, at, n)
        feedback(store, at, n)
        if n in (0, 9):
            step(store, at, n)
    before = NOW + timedelta(hours=2)
    assert store.prune("acme", "alice", log_before=before, log_max=3, feedback_before=before, feedback_max=5) == (7, 5)
    rows = store.decisions("acme", "alice")
    assert [(r["kind"], r.get("decision_id") or r.get("version")) for r in reversed(rows)] == [
        ("policy", 0), ("gate", "d7"), ("gate", "d8"), ("gate", "d9"), ("policy", 9),
    ]  # fmt: skip
    assert [e.feedback_id for e in store.feedback("acme", "alice")] == [f"fb_{n}" for n in range(5, 10)]
    gate(store, NOW + timedelta(hours=10), 10)  # appends go on in the same file
    feedback(store, NOW + timedelta(hours=10), 10)
    assert store.decisions("acme", "alice", limit=1)[0]["decision_id"] == "d10"
    assert store.feedback("acme", "alice")[-1].feedback_id == "fb_10"
    assert store.prune("acme", "alice", log_before=before, log_max=3, feedback_before=before, feedback_max=6) == (1, 0)


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime:
        return self.now


def learner(tmp_path: Path, cfg: dict[str, Any], **kw: Any) -> Learner:
    config = LearningConfig.model_validate(cfg)
    return Learner(LearningStore(tmp_path), lambda t: config, lambda t, w, a: False, **kw)


def test_the_learner_prunes_once_a_day_never_below_what_it_reads(tmp_path: Path) -> None:
    clock = Clock()
    lrn = learner(tmp_path, {"retention": {"decision_log_days": 1, "feedback_days": 1}}, clock=clock)
    for day in (0, 20, 40):
        at = NOW + timedelta(days=day)
        gate(lrn.store, at, day)
        feedback(lrn.store, at, day)
    step(lrn.store, NOW, 1)
    clock.now = NOW + timedelta(days=45)
    # retention says 1 day, but feedback within decay_half_life_days (30) is still read: kept
    assert lrn.prune("acme", "alice") == (1, 1)
    assert [r["decision_id"] for r in lrn.store.decisions("acme", "alice") if r["kind"] == "gate"] == ["d40", "d20"]
    assert lrn.store.decisions("acme", "alice", limit=1)[0] | {"at": ""} == {
        "kind": "retention", "at": "", "schema_version": 1, "log_entries": 1, "feedback_events": 1,
    }  # fmt: skip
    assert [e.feedback_id for e in lrn.store.feedback("acme", "alice")] == ["fb_20", "fb_40"]
    assert any(r.get("step") == "applied" for r in lrn.store.decisions("acme", "alice"))  # 45 days old, kept
    clock.now += timedelta(hours=23)
    assert lrn.prune("acme", "alice") is None  # once a day
    lrn.tick("acme", "alice")
    assert len(lrn.store.feedback("acme", "alice")) == 2
    clock.now = NOW + timedelta(days=51)
    lrn.tick("acme", "alice")  # days on: the tick prunes day 20's, now 31 days old
    assert [e.feedback_id for e in lrn.store.feedback("acme", "alice")] == ["fb_40"]


def test_pruning_with_the_real_clock(tmp_path: Path) -> None:
    """Real time arithmetic: the default retention (90 days) against datetime.now."""
    lrn = learner(tmp_path, {})
    now = datetime.now(UTC)
    for n, age in enumerate((91, 89, 0)):
        gate(lrn.store, now - timedelta(days=age), n)
        feedback(lrn.store, now - timedelta(days=age), n)
    assert lrn.prune("acme", "alice") == (1, 1)
    assert [e.feedback_id for e in lrn.store.feedback("acme", "alice")] == ["fb_1", "fb_2"]
