"""InboxItem values, the item codec, and the pure rules the stores and the aggregate share."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from types import MappingProxyType

import pytest

from genworker.autonomy.inbox import (
    SCHEMA_VERSION,
    InboxAggregate,
    InboxCorruptError,
    InboxItem,
    InboxSchemaError,
    InboxState,
    InvalidItemError,
    decode_item,
    encode_item,
    exponential_backoff,
    new_item,
)
from genworker.autonomy.inbox.codec import check_owner
from genworker.autonomy.inbox.store import check_new_item, claimed, due_at, is_claimable, iso, micros

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


def item(**changes: object) -> InboxItem:
    value = new_item("acme", "alice", "git", "repo-1", "git.commit", {"sha": "abc", "files": ["a.py"]})
    return replace(value, **{"created_at": T0, **changes})  # type: ignore[arg-type]


def test_new_item_is_pending_deeply_frozen_and_versioned() -> None:
    value = new_item("acme", "alice", "git", "repo-1", "git.commit", {"files": ["a.py"]}, metadata={"m": {"x": 1}})
    assert value.item_id.startswith("ibx_") and value.state is InboxState.PENDING
    assert (value.attempts, value.version, value.schema_version) == (0, 0, SCHEMA_VERSION)
    assert isinstance(value.payload, MappingProxyType) and value.payload["files"] == ("a.py",)
    assert isinstance(value.metadata["m"], MappingProxyType)
    assert value.created_at.tzinfo is not None


def test_items_refuse_naive_datetimes_and_coerce_the_state() -> None:
    with pytest.raises(ValueError, match="created_at must be timezone-aware"):
        item(created_at=datetime(2025, 1, 1))  # noqa: DTZ001
    with pytest.raises(ValueError, match="retry_at must be timezone-aware"):
        item(retry_at=datetime(2025, 1, 1))  # noqa: DTZ001
    assert item(state="dead").state is InboxState.DEAD
    with pytest.raises(ValueError, match="'nope' is not a valid InboxState"):
        item(state="nope")


def test_codec_round_trip() -> None:
    value = item(state=InboxState.FAILED, attempts=2, retry_at=T0, last_error="x", version=3, route="task")
    assert decode_item(encode_item(value), "f.json") == value
    other_zone = item(created_at=T0.astimezone(timezone(timedelta(hours=8))))
    assert decode_item(encode_item(other_zone), "f.json").created_at == T0


@pytest.mark.parametrize(
    ("mutate", "error", "message"),
    [
        (lambda doc: "{oops", InboxCorruptError, "not valid JSON"),
        (lambda doc: "[]", InboxCorruptError, "expected a JSON object"),
        (lambda doc: json.dumps({**doc, "schema_version": 2}), InboxSchemaError, "schema_version 2"),
        (lambda doc: json.dumps({k: v for k, v in doc.items() if k != "schema_version"}), InboxSchemaError, "None"),
        (lambda doc: json.dumps({**doc, "schema_version": "1"}), InboxSchemaError, "'1'"),
        (lambda doc: json.dumps({k: v for k, v in doc.items() if k != "tenant_id"}), InboxCorruptError, "tenant_id"),
        (lambda doc: json.dumps({**doc, "state": "lost"}), InboxCorruptError, "state"),
        (lambda doc: json.dumps({**doc, "created_at": "2025-01-01T00:00:00"}), InboxCorruptError, "created_at"),
    ],
)
def test_unreadable_items_name_their_source(mutate: object, error: type[Exception], message: str) -> None:
    doc = json.loads(encode_item(item()))
    with pytest.raises(error, match=message) as caught:
        decode_item(mutate(doc), "/ws/pending/x.json")  # type: ignore[operator]
    assert str(caught.value).startswith("/ws/pending/x.json: ")


def test_check_owner_refuses_another_workers_item() -> None:
    with pytest.raises(InboxCorruptError, match="holds an item of worker 'alice'"):
        check_owner(item(), "acme", "bob", "src")


def test_check_new_item() -> None:
    stored = check_new_item(item())
    assert stored.version == 1 and stored.state is InboxState.PENDING
    for bad in (item(version=1), item(lease_owner="r1"), item(state=InboxState.CONSUMED), item(schema_version=2)):
        with pytest.raises(InvalidItemError):
            check_new_item(bad)


def test_claim_rule() -> None:
    pending = check_new_item(item())
    first = claimed(pending, "r1", T0, 30)
    assert (first.state, first.lease_owner, first.lease_expires_at, first.attempts, first.version) == (
        InboxState.PROCESSING,
        "r1",
        T0 + timedelta(seconds=30),
        1,
        2,
    )
    assert due_at(first) == T0 + timedelta(seconds=30) and due_at(pending) is None
    assert not is_claimable(first, T0 + timedelta(seconds=29)) and is_claimable(first, T0 + timedelta(seconds=30))
    again = claimed(first, "r2", T0 + timedelta(seconds=30), 30)
    assert again.last_error == "lease of r1 expired at 2025-01-01T12:00:30Z" and again.attempts == 2
    failed = replace(first, state=InboxState.FAILED, retry_at=T0 + timedelta(seconds=5), lease_owner=None)
    assert not is_claimable(failed, T0) and is_claimable(failed, T0 + timedelta(seconds=5))
    assert not is_claimable(replace(first, state=InboxState.DEAD), T0 + timedelta(days=999))


def test_time_helpers() -> None:
    assert micros(datetime(1970, 1, 1, 0, 0, 1, 5, tzinfo=UTC)) == 1_000_005
    assert micros(T0) < 2**53  # exact as a Redis score
    assert iso(T0) == "2025-01-01T12:00:00Z"
    assert (
        iso(T0.astimezone(timezone(timedelta(hours=-5))) + timedelta(microseconds=7)) == "2025-01-01T12:00:00.000007Z"
    )


def test_exponential_backoff_is_capped() -> None:
    delay = exponential_backoff(timedelta(seconds=10), timedelta(minutes=1))
    assert [delay(n).total_seconds() for n in (0, 1, 2, 3, 4, 100)] == [10, 10, 20, 40, 60, 60]


def test_aggregate_refuses_nonsense_settings() -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        InboxAggregate(object(), max_attempts=0)  # type: ignore[arg-type]


def test_the_redis_state_fields_are_what_pydantic_writes() -> None:
    from genworker.autonomy.inbox.codec import item_to_json
    from genworker.autonomy.inbox.redis_store import _state_fields
    from genworker.autonomy.inbox.store import STATE_FIELDS

    value = claimed(check_new_item(item(last_error="x")), "r1", T0 + timedelta(microseconds=5), 30)
    value = replace(value, retry_at=T0)
    expected = item_to_json(value)
    assert _state_fields(value) == {name: expected[name] for name in STATE_FIELDS}
