"""AttentionLedger: a concern is taken up once per window, by one item, across restarts and racing
runners; failed work releases it; the file stays small and refuses what it cannot read."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from genworker.autonomy.heartbeat import (
    Admitted,
    AlreadySeen,
    AttentionLedger,
    HeartbeatFileError,
    Settlement,
    concern_of,
)
from genworker.autonomy.inbox import new_item

T0 = datetime(2027, 5, 1, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def ledger(root: Path, clock: Clock, **kw: object) -> AttentionLedger:
    return AttentionLedger(root, timedelta(hours=1), clock=clock, **kw)  # type: ignore[arg-type]


pytestmark = pytest.mark.anyio


async def test_a_concern_is_taken_up_once_within_its_window(tmp_path: Path, clock: Clock) -> None:
    book = ledger(tmp_path, clock)
    first = await book.admit("acme", "alice", [("c1", "i1"), ("c1", "i2"), ("c2", "i3")])
    assert [type(a) for a in first] == [Admitted, AlreadySeen, Admitted]
    seen = first[1]
    assert (
        isinstance(seen, AlreadySeen)
        and seen.entry.item_id == "i1"
        and seen.entry.expires_at == T0 + timedelta(hours=1)
    )
    clock.now += timedelta(minutes=59)
    assert isinstance((await book.admit("acme", "alice", [("c1", "i4")]))[0], AlreadySeen)
    clock.now += timedelta(minutes=1)  # the window has passed
    assert isinstance((await book.admit("acme", "alice", [("c1", "i5")]))[0], Admitted)


async def test_the_same_item_delivered_again_is_admitted_again(tmp_path: Path, clock: Clock) -> None:
    book = ledger(tmp_path, clock)
    await book.admit("acme", "alice", [("c1", "i1")])
    assert await book.admit("acme", "alice", [("c1", "i1")]) == (Admitted("c1", "i1"),)  # e.g. after a crash


async def test_the_ledger_survives_a_restart(tmp_path: Path, clock: Clock) -> None:
    await ledger(tmp_path, clock).admit("acme", "alice", [("c1", "i1")])
    again = ledger(tmp_path, clock)  # a new process
    (result,) = await again.admit("acme", "alice", [("c1", "i2")])
    assert isinstance(result, AlreadySeen) and result.entry.item_id == "i1"
    assert [e.concern for e in await again.entries("acme", "alice")] == ["c1"]


async def test_workers_have_separate_ledgers(tmp_path: Path, clock: Clock) -> None:
    book = ledger(tmp_path, clock)
    await book.admit("acme", "alice", [("c1", "i1")])
    assert await book.admit("acme", "bob", [("c1", "i2")]) == (Admitted("c1", "i2"),)
    assert await book.admit("globex", "alice", [("c1", "i3")]) == (Admitted("c1", "i3"),)


async def test_release_forgets_only_the_items_own_claim(tmp_path: Path, clock: Clock) -> None:
    book = ledger(tmp_path, clock)
    await book.admit("acme", "alice", [("c1", "i1")])
    await book.release("acme", "alice", [("c1", "other")])
    assert isinstance((await book.admit("acme", "alice", [("c1", "i2")]))[0], AlreadySeen)
    await book.release("acme", "alice", [("c1", "i1")])
    assert await book.admit("acme", "alice", [("c1", "i2")]) == (Admitted("c1", "i2"),)


async def test_settle_records_what_became_of_the_concern(tmp_path: Path, clock: Clock) -> None:
    book = ledger(tmp_path, clock)
    await book.admit("acme", "alice", [("c1", "i1")])
    await book.settle("acme", "alice", {"c1": Settlement("summary", "silent", "run_1"), "gone": Settlement("x", "y")})
    (entry,) = await book.entries("acme", "alice")
    assert (entry.action, entry.outcome, entry.ref) == ("summary", "silent", "run_1")


async def test_racing_runners_admit_a_concern_once(tmp_path: Path, clock: Clock) -> None:
    books = [ledger(tmp_path, clock) for _ in range(8)]
    results = await asyncio.gather(*(b.admit("acme", "alice", [("c1", f"i{n}")]) for n, b in enumerate(books)))
    assert sum(isinstance(r[0], Admitted) for r in results) == 1


async def test_a_cached_ledger_sees_what_another_process_wrote(tmp_path: Path, clock: Clock) -> None:
    mine, theirs = ledger(tmp_path, clock), ledger(tmp_path, clock)  # two runtimes on one workspace
    assert await mine.admit("acme", "w", [("disk-full", "i1")]) == (Admitted("disk-full", "i1"),)
    seen, new = await theirs.admit("acme", "w", [("disk-full", "i2"), ("cert-expiry", "i3")])
    assert isinstance(seen, AlreadySeen) and isinstance(new, Admitted)
    # `mine` decoded the file before `theirs` rewrote it: its cache must not hide the new concern
    (again,) = await mine.admit("acme", "w", [("cert-expiry", "i4")])
    assert isinstance(again, AlreadySeen) and again.entry.item_id == "i3"
    assert [e.concern for e in await mine.entries("acme", "w")] == ["disk-full", "cert-expiry"]


async def test_the_file_drops_expired_entries_and_is_capped(tmp_path: Path, clock: Clock) -> None:
    book = ledger(tmp_path, clock, max_entries=5)
    for n in range(20):
        await book.admit("acme", "alice", [(f"c{n}", f"i{n}")])
        clock.now += timedelta(minutes=1)
    data = json.loads(book.path("acme", "alice").read_text(encoding="utf-8"))
    assert data["schema_version"] == 1 and [e["concern"] for e in data["entries"]] == [f"c{n}" for n in range(15, 20)]
    clock.now += timedelta(hours=2)
    await book.admit("acme", "alice", [("new", "i")])
    data = json.loads(book.path("acme", "alice").read_text(encoding="utf-8"))
    assert [e["concern"] for e in data["entries"]] == ["new"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"schema_version": 2, "tenant_id": "acme", "worker_id": "alice", "entries": []}', "schema_version 2"),
        ('{"tenant_id": "acme", "worker_id": "alice", "entries": []}', "schema_version None"),
        ("{not json", "not valid JSON"),
        ('{"schema_version": 1, "tenant_id": "acme", "worker_id": "alice", "entries": [{"concern": 1}]}', "entries.0"),
        ('{"schema_version": 1, "tenant_id": "acme", "worker_id": "bob", "entries": []}', "belongs to acme/bob"),
    ],
)
async def test_an_unreadable_file_is_refused_and_left_alone(
    tmp_path: Path, clock: Clock, content: str, message: str
) -> None:
    book = ledger(tmp_path, clock)
    path = book.path("acme", "alice")
    path.parent.mkdir(parents=True)
    path.write_text(content, encoding="utf-8")
    with pytest.raises(HeartbeatFileError, match=message) as caught:
        await book.admit("acme", "alice", [("c1", "i1")])
    assert str(path) in str(caught.value)
    assert path.read_text(encoding="utf-8") == content


def test_window_and_cap_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="window"):
        AttentionLedger(tmp_path, timedelta(0))
    with pytest.raises(ValueError, match="max_entries"):
        AttentionLedger(tmp_path, max_entries=0)


# -- what a concern is --------------------------------------------------------------------


def test_the_same_fact_resent_is_the_same_concern() -> None:
    one = new_item("acme", "alice", "webhook", "hooks", "alert", {"host": "db1", "disk": {"used": 97, "of": 100}})
    two = new_item("acme", "alice", "webhook", "hooks", "alert", {"disk": {"of": 100, "used": 97}, "host": "db1"})
    other = new_item("acme", "alice", "webhook", "hooks", "alert", {"host": "db2", "disk": {"used": 97, "of": 100}})
    elsewhere = new_item("acme", "alice", "webhook", "other", "alert", {"host": "db1", "disk": {"used": 97, "of": 100}})
    assert one.item_id != two.item_id
    assert concern_of(one) == concern_of(two) and concern_of(one).startswith("fact:")
    assert len({concern_of(one), concern_of(other), concern_of(elsewhere)}) == 3


def test_an_explicit_concern_wins_then_the_goal() -> None:
    tagged = new_item(
        "acme", "a", "webhook", "h", "alert", {"concern": "payload", "x": 1}, metadata={"concern": "meta"}
    )
    payload_only = new_item("acme", "a", "webhook", "h", "alert", {"concern": " db1-disk ", "x": 2})
    goal = new_item(
        "acme", "a", "event", "checker", "goal.check", {"goal_id": "uptime", "action": "watch", "deviation": 0.4}
    )
    assert concern_of(tagged) == "concern:meta"
    assert concern_of(payload_only) == "concern:db1-disk"
    assert concern_of(goal) == "goal:uptime:goal.check:watch"
