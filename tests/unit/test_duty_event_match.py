"""Event triggers written for upstream genworker: `source` as an event-type pattern (also under the
upstream name of our sensors' event types) and filter expressions; an explicit `event_type` keeps
`source` a publisher pattern."""

from __future__ import annotations

from typing import Any

import pytest

from genworker.autonomy.duties import event_matches
from genworker.autonomy.duties.event_types import upstream_pattern_matches
from genworker.bus.models import Event, new_event
from genworker.workspace.models.duty import EventTrigger
from genworker.workspace.snapshot import Worker


class _Worker:
    tenant_id, worker_id = "acme", "alice"


WORKER: Worker = _Worker()  # type: ignore[assignment]


def trigger(source: str, event_type: str | None = None, **filters: Any) -> EventTrigger:
    return EventTrigger(id="e", type="event", source=source, event_type=event_type, filter=filters)


def ev(topic: str, source: str = "sensor.x", **payload: Any) -> Event:
    return new_event(topic, source=source, tenant_id="acme", worker_id="alice", payload=payload)


@pytest.mark.parametrize(
    ("pattern", "event_type", "matches"),
    [("*", "a.b.c", True), ("external.*", "external.git_commit", True), ("external.*", "external.a.b", False),
     ("external.*", "external", False), ("external.*", "externalx.y", False), ("a.b", "a.b", True),
     ("a.b", "a.bc", False)],
)  # fmt: skip
def test_upstream_pattern_rules(pattern: str, event_type: str, matches: bool) -> None:
    assert upstream_pattern_matches(pattern, event_type) is matches


def test_source_as_an_event_type_with_upstream_names() -> None:
    assert event_matches(trigger("external.email_received"), WORKER, ev("email.received"))
    assert event_matches(trigger("external.*"), WORKER, ev("git.commit"))
    assert event_matches(trigger("local.file_changed"), WORKER, ev("file.deleted"))
    assert event_matches(trigger("email.received"), WORKER, ev("email.received"))
    assert not event_matches(trigger("external.git_commit"), WORKER, ev("email.received"))
    assert event_matches(trigger("sensor.*"), WORKER, ev("email.received"))  # still a publisher pattern
    item = new_event(
        "inbox.item_written",
        source="inbox",
        tenant_id="acme",
        worker_id="alice",
        payload={"source_id": "mailbox", "event_type": "email.received"},
    )
    assert event_matches(trigger("external.email_received"), WORKER, item)  # a sensor's item, by its event type


def test_an_explicit_event_type_keeps_source_a_publisher() -> None:
    assert not event_matches(trigger("external.*", event_type="*"), WORKER, ev("git.commit"))
    assert event_matches(trigger("sensor.*", event_type="git.*"), WORKER, ev("git.commit"))


def test_filter_expressions() -> None:
    watched = trigger("external.*", severity=">= 3", table="regex:^(fin|growth)_", summary="contains:customer")
    assert event_matches(watched, WORKER, ev("webhook.fact", severity=4, table="FIN_daily", summary="Customer x"))
    assert not event_matches(watched, WORKER, ev("webhook.fact", severity=2, table="fin_daily", summary="customer"))
    assert not event_matches(watched, WORKER, ev("webhook.fact", severity=4, table="fin_daily"))  # key missing
    assert event_matches(trigger("*", tags="urgent"), WORKER, ev("webhook.fact", tags=["later", "urgent"]))
