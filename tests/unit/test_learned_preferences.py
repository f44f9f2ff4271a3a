"""Steward's personal adaptations: priority personalisation by similarity_key and the interruption
budget's auto-tune within floor / ceiling — learned as versions in shadow, applied by a person, rolled
back, each decision under them logged with what the shadow versions would have decided."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from genworker.autonomy.briefs import BriefItem
from genworker.autonomy.learning import FeedbackEvent, Learner, LearningState, LearningStore
from genworker.autonomy.learning.briefs import LearnedBriefOverlay
from genworker.autonomy.learning.models import similarity_key
from genworker.autonomy.learning.preferences import budget_change, priority_changes, shifted
from genworker.workspace.models.steward import LearningConfig

pytestmark = pytest.mark.anyio
NOW = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
ALIKE = {"source": "duty", "intent": "label_issue", "entity_type": "duty:triage", "counterpart_role": "trust:2"}
OTHER = {**ALIKE, "intent": "close_issue"}
KEY = similarity_key(ALIKE, ("source", "intent", "entity_type", "counterpart_role"))
_n = 0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def event(kind: str, at: datetime = NOW, features: dict[str, str] | None = None, **kw: Any) -> FeedbackEvent:
    global _n
    _n += 1
    values: dict[str, Any] = {"features": ALIKE if features is None else features, **kw}
    return FeedbackEvent(f"fb_{_n}", "acme", "alice", kind, at, **values)  # type: ignore[arg-type]


def raised(at: datetime = NOW, features: dict[str, str] | None = None) -> FeedbackEvent:
    return event("edit_priority", at, features, old_value="P2", new_value="P1")


def config(**loop: Any) -> LearningConfig:
    return LearningConfig.model_validate({"feedback_loop": loop})


def test_priority_edits_of_items_alike_add_up_to_a_level_with_decay() -> None:
    cfg = config()
    four = [raised() for _ in range(4)]
    assert priority_changes(cfg, LearningState(), four, NOW) == []  # below min_samples_for_adaptation (5)
    (change, evidence), *rest = priority_changes(cfg, LearningState(), [*four, raised()], NOW)
    assert rest == [] and (change.kind, change.action, change.value) == ("priority", KEY, 1)
    assert len(evidence) == 5 and change.reason.startswith("5 priority edits of items alike add up to +1.25")
    # the same edits 20 days old weigh 0.5**(20/30) each: 5 x 0.25 x 0.63 < 1 level
    old = [raised(NOW - timedelta(days=20)) for _ in range(5)]
    assert priority_changes(cfg, LearningState(), old, NOW) == []
    # older than decay_half_life_days: not counted at all
    assert priority_changes(cfg, LearningState(), [raised(NOW - timedelta(days=31)) for _ in range(9)], NOW) == []
    # items of another kind, or edits that are no priorities, count apart
    mixed = [*[raised(features=OTHER) for _ in range(3)], *[raised() for _ in range(2)]]
    mixed.append(event("edit_priority", old_value="urgent", new_value="P1"))
    assert priority_changes(cfg, LearningState(), mixed, NOW) == []


def test_a_priority_boost_is_capped_and_never_into_p0() -> None:
    cfg = config(priority_personalization={"manual_priority_boost_weight": 1.0, "max_auto_boost_level": 1})
    jumps = [event("edit_priority", old_value="P3", new_value="P0") for _ in range(5)]
    [(change, _)] = priority_changes(cfg, LearningState(), jumps, NOW)
    assert change.value == 1  # 15 levels weighed, capped at max_auto_boost_level
    assert [shifted(p, 1) for p in ("P0", "P1", "P2", "P3")] == ["P0", "P1", "P1", "P2"]
    assert [shifted(p, -2) for p in ("P0", "P1", "P2", "P3")] == ["P0", "P3", "P3", "P3"]
    off = config(priority_personalization={"enabled": False})
    assert priority_changes(off, LearningState(), [raised() for _ in range(9)], NOW) == []


def answered(kind: str = "approve") -> FeedbackEvent:
    return event(kind, gate_result="confirm")


def test_the_interruption_budget_moves_a_step_within_floor_and_ceiling() -> None:
    cfg = config()
    snoozes = [event("snooze") for _ in range(5)]
    [change, evidence] = budget_change(cfg, LearningState(), snoozes, NOW, lambda: 10)  # type: ignore[misc]
    assert (change.kind, change.value, len(evidence)) == ("budget", 9, 5)
    assert budget_change(cfg, LearningState(), snoozes, NOW, lambda: 6) is None  # at the floor
    assert budget_change(cfg, LearningState(), snoozes[:4], NOW, lambda: 10) is None  # too few samples
    acted = [answered("approve"), answered("reject"), answered(), raised(), event("snooze"), answered()]
    [up, _] = budget_change(cfg, LearningState(), acted, NOW, lambda: 10)  # type: ignore[misc]
    assert up.value == 11 and up.reason.startswith("5 of 6 interruptions acted on")
    assert budget_change(cfg, LearningState(), acted, NOW, lambda: 16) is None  # at the ceiling
    even = [*(event("snooze") for _ in range(3)), *(answered() for _ in range(3))]
    assert budget_change(cfg, LearningState(), even, NOW, lambda: 10) is None  # neither way enough
    off = config(interruption_budget_auto_tune={"enabled": False})
    assert budget_change(off, LearningState(), snoozes, NOW, lambda: 10) is None


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime:
        return self.now


def learner(tmp_path: Path, clock: Clock | None = None, cfg: LearningConfig | None = None) -> Learner:
    got = cfg or LearningConfig(safe_apply_after_shadow_days=2)
    kw: dict[str, Any] = {"clock": clock} if clock is not None else {}
    return Learner(LearningStore(tmp_path), lambda t: got, lambda t, w, a: False, budget_of=lambda t, w: 10, **kw)


async def test_budget_and_priority_versions_shadow_apply_and_roll_back(tmp_path: Path) -> None:
    clock = Clock()
    lrn = learner(tmp_path, clock)
    features = {"run_1": ALIKE, "run_2": OTHER}

    async def features_of(tenant_id: str, worker_id: str, ref: str) -> dict[str, str] | None:
        return features.get(ref)

    overlay = LearnedBriefOverlay(lrn, features_of)
    for _ in range(5):
        lrn.record(event("snooze", clock.now))
    for _ in range(5):
        lrn.record(raised(clock.now))
    state = lrn.store.state("acme", "alice")
    assert [(v.version, v.kind, v.status, v.describe()) for v in state.versions] == [
        (1, "budget", "shadow", "interruption budget -> 9 a day"),
        (2, "priority", "shadow", f"priority of [{KEY}] +1 level(s)"),
    ]
    # in shadow: nothing changes, each decision is logged with what the shadow versions would have done
    assert overlay.limit("acme", "alice", 10) == 10
    overlay.admitted("acme", "alice", "bi_1", True, 10, 10)  # the 10th interruption of the day
    item = BriefItem(item_id="bi_2", section="done", title="Labelled #42", created_at=NOW, ref="run_1")
    assert (await overlay.prioritise("acme", "alice", item)).priority == "P2"
    unlike = item.model_copy(update={"ref": "run_2"})
    assert await overlay.prioritise("acme", "alice", unlike) is unlike  # not alike: nothing logged
    prio, gate = lrn.store.decisions("acme", "alice", limit=2)
    assert (prio["kind"], prio["priority"], prio["policy_version"], prio["shadow"]) == (
        "priority",
        "P2",
        0,
        [{"version": 2, "would_have": "P1"}],
    )
    assert (gate["kind"], gate["result"], gate["shadow"]) == (
        "interruption",
        "interrupt",
        [{"version": 1, "limit": 9, "would_have": "brief"}],
    )
    assert "1 of 1 decisions would have been different" in lrn.shadow_summary("acme", "alice", state.versions[0])

    clock.now += timedelta(days=2)
    for number in (1, 2):
        lrn.apply("acme", "alice", number, "dana")
    assert overlay.limit("acme", "alice", 10) == 9
    boosted = await overlay.prioritise("acme", "alice", item)
    assert boosted.priority == "P1" and "learned policy v2 for items alike" in boosted.detail
    lrn.rollback("acme", "alice", "dana", 1)  # the budget
    assert overlay.limit("acme", "alice", 10) == 10
    assert (await overlay.prioritise("acme", "alice", item)).priority == "P1"
    log = reversed(lrn.store.decisions("acme", "alice"))
    steps = [(r["step"], r.get("version")) for r in log if r["kind"] == "policy"]
    assert steps == [("shadow_started", 1), ("shadow_started", 2), ("applied", 1), ("applied", 2), ("rolled_back", 1)]
    # one budget step a day: more snoozes the same day learn nothing new
    for _ in range(5):
        lrn.record(event("snooze", clock.now))
    assert [v.version for v in lrn.store.state("acme", "alice").versions] == [1, 2]


def test_learning_with_the_real_clock(tmp_path: Path) -> None:
    """Real time arithmetic: snoozes stamped now count, those stamped 31 days ago do not."""
    lrn = learner(tmp_path)
    now = datetime.now(UTC)
    for _ in range(5):
        lrn.record(event("snooze", now - timedelta(days=31)))
    assert lrn.store.state("acme", "alice").versions == ()
    for _ in range(5):
        lrn.record(event("snooze", datetime.now(UTC)))
    [version] = lrn.store.state("acme", "alice").versions
    assert version.kind == "budget" and version.changes[0].value == 9
    assert timedelta(days=2) - timedelta(seconds=5) < version.shadow_until - now <= timedelta(days=2, seconds=5)
