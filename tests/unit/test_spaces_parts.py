"""Context spaces, part by part: a fact's anchors, entities and hints; the similarity the resurrection
check uses; the lifecycle (states by idle time, pins); the evidence score and when it yields a task;
the settings chain (seed defaults <- tenant <- worker) and its refusals; a space file read back and an
unknown schema_version refused; the event log skipping a torn last line; retrieval bounded at
`retrieval_candidates_max` and ranking at `llm_candidates_max`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from genworker.autonomy.inbox import InboxItem, new_item
from genworker.autonomy.spaces import (
    DEFAULT_SETTINGS,
    FileEventLog,
    FileSpaceStore,
    SpaceFileError,
    SpaceIndex,
    SpaceSettings,
    SpaceState,
    SpaceTransitionError,
    event_from_item,
    evidence_score,
    resolve_settings,
)
from genworker.autonomy.spaces.document import parse_space, render_space
from genworker.autonomy.spaces.evidence import fresh_evidence, make_candidate
from genworker.autonomy.spaces.lifecycle import join, new_space, pin_of, resurrect, settle, state_at
from genworker.autonomy.spaces.retrieval import rank, retrieve
from genworker.autonomy.spaces.review import revert_resurrection
from genworker.autonomy.spaces.similarity import similarity, tokens
from genworker.workspace.models.context_space import ContextSpaceOverrides

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
ON = SpaceSettings(enabled=True)


def fact(source_type: str = "webhook", **payload: Any) -> InboxItem:
    return new_item("acme", "alice", source_type, "hooks", "webhook.fact", payload)


def event(source_type: str = "webhook", **payload: Any) -> Any:
    return event_from_item(fact(source_type, **payload), NOW)


# -- facts ---------------------------------------------------------------------------------------


def test_a_fact_gives_its_strong_anchors_entities_and_hints() -> None:
    e = event(
        source="github", repo="Acme/API", issue=42, title="Login broken", actor="bob",
        text="see acme/web#7 and @carol, config.yaml", thread_id="T9", platform="slack", goal_id="launch",
        due_at="2026-03-03T09:00:00Z", commitment="ship the fix", waiting_on="vendor reply", severity="critical",
    )  # fmt: skip
    assert e.source == "github" and e.actor == "bob" and e.summary.startswith("Login broken")
    assert e.anchors == ("issue:acme/api#42", "issue:acme/web#7", "thread:slack:t9", "goal:launch")
    assert {"person:bob", "person:carol", "repo:acme/api", "file:config.yaml"} <= set(e.entities)
    assert e.hints.priority == "P0" and e.hints.commitment == "open" and e.hints.waiting_on == "vendor reply"
    assert e.hints.due_at == datetime(2026, 3, 3, 9, tzinfo=UTC)
    assert e.confidence == 0.7  # github's default perception confidence
    assert e.event_id == "cev_" + e.raw_ref.removeprefix("inbox:ibx_")


def test_sources_and_confidence_come_from_the_item_unless_the_payload_says() -> None:
    assert event("channel", text="hi").source == "chat"
    assert event("email", subject="x").confidence == 0.6
    assert event("webhook", source="Screen", text="x").source == "screen"
    assert event("webhook", confidence=0.95, text="x").confidence == 0.95
    assert event("webhook", source="calendar", topic="Weekly sync").anchors == ("calendar:weekly-sync",)


# -- similarity ----------------------------------------------------------------------------------


def test_similarity_weighs_anchors_over_people_and_is_containment() -> None:
    space_entities = ["issue:acme/api#42", "person:bob", "repo:acme/api"]
    space_words = tokens("login broken for everyone after the deploy of the auth service")
    words = tokens("login broken after deploy")
    assert similarity(["issue:acme/api#42"], words, space_entities, space_words) == pytest.approx(1.0)
    only_person = similarity(["person:bob"], tokens("lunch on friday"), space_entities, space_words)
    assert only_person < 0.2  # a shared person is weak evidence
    assert similarity([], words, [], space_words) == 1.0


# -- lifecycle -----------------------------------------------------------------------------------


def test_states_follow_idle_time_and_a_pinned_space_stays_active() -> None:
    space = new_space("SPACE_1", event(text="plan the offsite"), NOW, ON)
    assert [state_at(space, NOW + d, ON) for d in (timedelta(hours=47), timedelta(hours=49))] == [
        SpaceState.ACTIVE,
        SpaceState.DORMANT,
    ]
    assert state_at(space, NOW + timedelta(days=8), ON) is SpaceState.PARKED
    assert state_at(space, NOW + timedelta(days=31), ON) is SpaceState.ARCHIVED
    waiting = join(space, event(text="waiting on the venue", waiting_on="venue"), NOW, ON)
    assert (waiting.is_pinned, waiting.pin_reason) == (True, "waiting_dependency")
    assert settle(waiting, NOW + timedelta(days=90), ON).state is SpaceState.ACTIVE
    resolved = join(waiting, event(text="venue confirmed", resolved=True), NOW, ON)
    assert (resolved.is_pinned, resolved.waiting_on) == (False, None)
    off = SpaceSettings(enabled=True, auto_pin_if_waiting_dependency=False)
    assert pin_of(waiting, NOW, off) == (False, None)
    due = join(space, event(text="deadline", due_at="2026-03-05T00:00:00Z"), NOW, ON)
    assert pin_of(due, NOW, ON) == (True, "deadline")
    assert pin_of(due, NOW + timedelta(days=5), ON) == (False, None)  # a day after the due date


def test_a_reverted_resurrection_puts_the_space_back_and_the_fact_in_its_own(tmp_path: Path) -> None:
    log = FileEventLog(tmp_path)
    first = event(text="migrate the ledger to postgres")
    log.append(first)
    later = NOW + timedelta(days=40)
    old = settle(new_space("SPACE_3", first, NOW, ON), later, ON)
    revival = event(text="ledger migration to postgres again")
    log.append(revival)
    back = resurrect(old, revival, later, ON, similarity=0.8, via="similarity")
    restored, own = revert_resurrection(back, revival.event_id, "SPACE_9", log, later, ON)
    assert restored.state is SpaceState.ARCHIVED and restored.last_active_at == NOW
    assert restored.evidence_events == (first.event_id,) and own.evidence_events == (revival.event_id,)
    with pytest.raises(SpaceTransitionError, match="no resurrection"):
        revert_resurrection(restored, revival.event_id, "SPACE_10", log, later, ON)


def test_a_resurrection_records_what_it_can_revert() -> None:
    old = settle(new_space("SPACE_3", event(text="migrate the ledger"), NOW, ON), NOW + timedelta(days=40), ON)
    assert old.state is SpaceState.ARCHIVED
    later = NOW + timedelta(days=40)
    back = resurrect(old, event(text="ledger migration again"), later, ON, similarity=0.81, via="similarity")
    assert back.state is SpaceState.ACTIVE and back.last_reactivated_at == later
    change = back.changes[-1]
    assert (change.kind, change.from_state, change.similarity) == ("resurrected", SpaceState.ARCHIVED, 0.81)
    assert change.previous_active_at == NOW and back.evidence[-1].route.startswith("resurrected")


# -- evidence and task candidates ---------------------------------------------------------------


def test_one_source_per_noisy_or_and_a_screen_is_capped() -> None:
    space = new_space("SPACE_1", event("channel", text="prod is down"), NOW, ON)
    assert evidence_score(space.evidence) == pytest.approx(0.6)
    twice = join(space, event("channel", text="prod still down"), NOW, ON)
    assert evidence_score(twice.evidence) == pytest.approx(0.6)  # the same source counts once
    three = join(twice, event("email", subject="prod down"), NOW, ON)
    assert evidence_score(three.evidence) == pytest.approx(1 - 0.4 * 0.4)
    screen = new_space("SPACE_2", event(source="screen", text="error dialog", confidence=0.99), NOW, ON)
    assert evidence_score(screen.evidence) == 0.5


def test_a_candidate_takes_its_facts_hints_and_only_fresh_evidence_counts_next() -> None:
    space = new_space(
        "SPACE_1", event("channel", text="checkout fails", severity="high", intent="investigate"), NOW, ON
    )
    space = join(space, event("email", subject="checkout fails", risk="medium"), NOW, ON)
    candidate = make_candidate(space, fresh_evidence(space), evidence_score(space.evidence), NOW)
    assert (candidate.priority, candidate.risk_level, candidate.intent) == ("P1", "medium", "investigate")
    assert candidate.sources == ("chat", "email") and candidate.urgency_score >= 75
    with_task = space.model_copy(update={"candidates": (candidate,)})
    assert fresh_evidence(with_task) == ()
    assert [e.summary for e in fresh_evidence(join(with_task, event(text="more"), NOW, ON))] == ["more"]


# -- settings ------------------------------------------------------------------------------------


def test_settings_are_the_seed_defaults_overridden_by_tenant_then_worker() -> None:
    assert (DEFAULT_SETTINGS.enabled, DEFAULT_SETTINGS.retrieval_candidates_max) == (False, 50)
    assert (DEFAULT_SETTINGS.llm_candidates_max, DEFAULT_SETTINGS.min_confidence) == (12, 0.70)
    assert DEFAULT_SETTINGS.resurrection_similarity_threshold == 0.78
    tenant = ContextSpaceOverrides.model_validate({"enabled": True, "router": {"min_confidence": 0.8}})
    worker = ContextSpaceOverrides.model_validate(
        {"router": {"llm_candidates_max": 8}, "lifecycle": {"parked_after_days": 3}}
    )
    s = resolve_settings(tenant, worker)
    assert (s.enabled, s.min_confidence, s.llm_candidates_max, s.parked_after_days) == (True, 0.8, 8, 3)
    assert s.dormant_after_hours == 48


@pytest.mark.parametrize(
    "block",
    [
        {"router": {"llm_candidates_max": 20, "retrieval_candidates_max": 10}},
        {"router": {"allow_unbounded_space_store": False}},
        {"router": {"min_confidence": 1.5}},
        {"lifecycle": {"states": ["active", "archived"]}},
        {"lifecycle": {"parked_after_days": 10, "archive_after_days": 5}},
    ],
)
def test_settings_that_break_the_seed_are_refused(block: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        ContextSpaceOverrides.model_validate(block)


# -- files ---------------------------------------------------------------------------------------


def test_a_space_file_reads_back_and_an_unknown_version_is_refused(tmp_path: Path) -> None:
    space = join(new_space("SPACE_7", event(text="quarterly planning"), NOW, ON), event(text="agenda draft"), NOW, ON)
    text = render_space(space)
    assert "# SPACE_7: quarterly planning" in text and "agenda draft" in text
    assert parse_space(text, "x.md") == space
    with pytest.raises(SpaceFileError, match="unknown schema_version 9"):
        parse_space(text.replace("schema_version: 1", "schema_version: 9", 1), "x.md")
    store = FileSpaceStore(tmp_path)
    store.save(space)
    assert store.load("acme", "alice", "SPACE_7") == space
    path = store.path("acme", "alice", "SPACE_7")  # a person edits the file: the edit is what is read
    path.write_text(path.read_text(encoding="utf-8").replace("title: quarterly planning", "title: Q3 plan"))
    assert store.load("acme", "alice", "SPACE_7").title == "Q3 plan"
    assert [store.next_id("acme", "alice") for _ in range(2)] == ["SPACE_8", "SPACE_9"]  # after the files


def test_the_event_log_is_append_only_and_ignores_a_torn_last_line(tmp_path: Path) -> None:
    log = FileEventLog(tmp_path)
    first, second = event(text="one"), event(text="two")
    log.append(first)
    log.append(second)
    with log.path("acme", "alice").open("ab") as f:
        f.write(b'{"schema_version": 1, "event_id": "cev_torn')  # a crash mid-append
    assert [e.summary for e in log.read("acme", "alice")] == ["one", "two"]
    assert log.read("acme", "alice", [second.event_id]) == [second]


# -- the bounded workbench -----------------------------------------------------------------------


def test_retrieval_stops_at_its_maximum_and_the_model_is_shown_at_most_twelve(tmp_path: Path) -> None:
    store = FileSpaceStore(tmp_path, durable=False)
    spaces = [new_space(f"SPACE_{n}", event(text=f"invoice batch {n} for billing"), NOW, ON) for n in range(1, 81)]
    index = SpaceIndex(tmp_path / "index.sqlite3", lambda: iter(spaces))
    for space in spaces:
        store.save(space)
    index.put(spaces)
    e = event(text="billing invoice batch failed")
    found = retrieve(index, e, ON, NOW)
    assert len(found) == 50 and len(set(found)) == 50
    assert len(rank(index.profiles(found), e, ON, NOW)) == 12
    small = SpaceSettings(enabled=True, retrieval_candidates_max=5, llm_candidates_max=12)
    assert len(rank(index.profiles(retrieve(index, e, small, NOW)), e, small, NOW)) == 5
    (tmp_path / "index.sqlite3").write_bytes(b"not a database")  # a broken index comes back from the files
    index.close()
    assert SpaceIndex(tmp_path / "index.sqlite3", lambda: store.all("acme", "alice")).counts()["active"] == 80


def _ranked(tmp_path: Path, spaces: list[Any], e: Any, s: SpaceSettings = ON) -> list[str]:
    index = SpaceIndex(tmp_path / "index.sqlite3", lambda: iter(spaces))
    index.put(spaces)
    return [p.space_id for p, _ in rank(index.profiles([x.space_id for x in spaces]), e, s, NOW)]


def test_a_late_fact_goes_first_to_the_space_whose_facts_happened_near_it(tmp_path: Path) -> None:
    """Out of order: an email about this morning's outage arrives in the afternoon. Two spaces cover
    it as well; the one whose facts happened within the time window of it is ranked first, though
    the other was active last."""
    morning = NOW - timedelta(hours=5)

    def space(space_id: str, at: datetime, seen: datetime) -> Any:
        e = event_from_item(fact(text="checkout errors on the payments page", occurred_at=at.isoformat()), seen)
        return new_space(space_id, e, seen, ON)

    early = space("SPACE_1", morning, morning + timedelta(minutes=30))
    late = space("SPACE_2", NOW - timedelta(minutes=20), NOW - timedelta(minutes=10))
    at = (morning + timedelta(minutes=25)).isoformat()
    email = event_from_item(fact("email", subject="customers report checkout errors", occurred_at=at), NOW)
    assert _ranked(tmp_path, [early, late], email) == ["SPACE_1", "SPACE_2"]
    off = SpaceSettings(enabled=True, time_window_minutes=1)  # without the window, the latest wins
    assert _ranked(tmp_path, [early, late], email, off) == ["SPACE_2", "SPACE_1"]


def test_a_meetings_start_is_a_time_anchor_for_the_notes_that_follow(tmp_path: Path) -> None:
    invite_at = NOW - timedelta(hours=6)
    invite = event_from_item(
        fact("webhook", source="calendar", title="Vendor review", attendees=["dana"], start=NOW.isoformat(),
             occurred_at=invite_at.isoformat()),
        invite_at,
    )  # fmt: skip
    assert invite.hints.starts_at == NOW
    meeting = new_space("SPACE_1", invite, invite_at, ON)
    chat_at = NOW - timedelta(hours=1)
    lunch = fact("channel", text="lunch plans", sender_name="dana", occurred_at=chat_at.isoformat())
    other = new_space("SPACE_2", event_from_item(lunch, chat_at), chat_at, ON)
    after = NOW + timedelta(minutes=40)
    notes = event_from_item(
        fact("channel", text="notes so far", sender_name="dana", occurred_at=after.isoformat()), after
    )
    assert _ranked(tmp_path, [meeting, other], notes) == ["SPACE_1", "SPACE_2"]
