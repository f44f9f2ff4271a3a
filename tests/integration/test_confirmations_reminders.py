"""An unanswered confirmation is reminded every `remind_every`, escalated once after
`escalate_after` (a P0 inbox item naming `reports_to`), keeps being reminded after that, and goes
quiet only once decided — with the file inbox and with the Redis inbox shared by processes."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from genworker.autonomy.briefs import BriefService, FileBriefStore
from genworker.autonomy.confirmation_notices import InboxConfirmationNotifier, through_briefs
from genworker.autonomy.inbox import FileInboxStore, InboxStore, RedisInboxStore
from genworker.bus import Event, InProcessEventBus
from genworker.worker.confirmations.models import (
    CONFIRMATION_CLOSED,
    CONFIRMATION_ESCALATED,
    CONFIRMATION_REMINDED,
    CONFIRMATION_REQUESTED,
    POLICY_TIMEOUT,
    Confirmation,
    ConfirmationError,
    ConfirmationPolicy,
)
from genworker.worker.confirmations.reminders import ConfirmationReminders
from genworker.worker.confirmations.store import ConfirmationStore
from genworker.worker.governance.policy_gate import resolve_policy
from genworker.workspace.models.policy import PolicyOverrides, QuietHours

pytestmark = pytest.mark.anyio

START = datetime(2027, 1, 4, 9, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture(params=["file", "redis"])
async def inbox(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[InboxStore]:
    if request.param == "file":
        yield FileInboxStore(tmp_path / "ws")
        return
    store = RedisInboxStore(request.getfixturevalue("redis_url"), prefix=f"gwtest-{uuid.uuid4().hex}")
    try:
        yield store
    finally:
        await store.aclose()


async def test_unanswered_requests_are_reminded_escalated_and_never_dropped(tmp_path: Path, inbox: InboxStore) -> None:
    clock = Clock()
    bus = InProcessEventBus()
    events: list[Event] = []

    async def record(event: Event) -> None:
        events.append(event)

    subscription = bus.subscribe("task.confirmation_*", record)
    delivered: list[tuple[str, str]] = []

    async def notify(confirmation: Confirmation, priority: str, text: str) -> None:
        delivered.append((priority, text))

    notifier = InboxConfirmationNotifier(inbox, bus, notify=notify, escalate_to=lambda t, w: "dana@acme")
    store = ConfirmationStore(tmp_path / "ws", notifier=notifier, clock=clock)
    reminders = ConfirmationReminders(store, notifier, ConfirmationPolicy(timedelta(hours=4), timedelta(hours=24)))
    asked = await store.request(
        tenant_id="acme", worker_id="alice", run_id="run_1", task_id="task_1", thread_id="t",
        text="Pay the invoice", skill_id=None, gate_ref="snapshot:policy:x", reasons=("approval_required: yes",),
    )  # fmt: skip
    other = await store.request(
        tenant_id="acme", worker_id="alice", run_id="run_2", task_id="task_2", thread_id="t",
        text="Send the contract", skill_id=None, gate_ref="snapshot:policy:y", reasons=(),
    )  # fmt: skip

    async def scan_at(hours: float) -> list[tuple[str, bool]]:
        clock.now = START + timedelta(hours=hours)
        sent = await reminders.scan([("acme", "alice")])
        return sorted((r.confirmation.text, r.escalated) for r in sent)

    assert await scan_at(3) == []
    assert await scan_at(4) == [("Pay the invoice", False), ("Send the contract", False)]
    assert await scan_at(5) == []  # not again before remind_every has passed
    store.decide("acme", "alice", other.confirmation_id, "approved", "dana")
    assert await scan_at(8) == [("Pay the invoice", False)]
    assert await scan_at(24) == [("Pay the invoice", True)]
    assert await scan_at(30) == []
    assert await scan_at(48) == [("Pay the invoice", False)]  # after escalation: every escalate_after
    stored = store.get("acme", "alice", asked.confirmation_id)
    assert stored is not None and stored.status == "pending" and stored.reminders == 4 and stored.escalated_at

    items = await inbox.list("acme", "alice", limit=50)
    kinds = [(i.event_type, i.payload.get("priority")) for i in items if i.source_id == asked.confirmation_id]
    assert kinds == [
        (CONFIRMATION_REQUESTED, "P1"),
        (CONFIRMATION_REMINDED, "P1"),
        (CONFIRMATION_REMINDED, "P1"),
        (CONFIRMATION_ESCALATED, "P0"),
        (CONFIRMATION_REMINDED, "P1"),
    ]
    escalation = next(i for i in items if i.event_type == CONFIRMATION_ESCALATED)
    assert escalation.payload["escalated_to"] == "dana@acme" and escalation.metadata["priority"] == "P0"
    assert [p for p, text in delivered if "escalated to dana@acme" in text] == ["P0"]
    await subscription.join()
    await bus.close()
    topics = [e.topic for e in events if e.payload["confirmation_id"] == asked.confirmation_id]
    assert topics.count(CONFIRMATION_ESCALATED) == 1 and topics[0] == CONFIRMATION_REQUESTED


async def test_a_scan_racing_a_decision_sends_nothing_for_it(tmp_path: Path, inbox: InboxStore) -> None:
    clock = Clock()
    notifier = InboxConfirmationNotifier(inbox)
    store = ConfirmationStore(tmp_path / "ws", notifier=notifier, clock=clock)
    asked = await store.request(
        tenant_id="acme", worker_id="alice", run_id="run_1", task_id="task_1", thread_id="t",
        text="Pay", skill_id=None, gate_ref=None, reasons=(),
    )  # fmt: skip
    clock.now = START + timedelta(days=2)
    stale = store.list("acme", "alice", "pending")  # what a scan read just before a person decided
    store.decide("acme", "alice", asked.confirmation_id, "rejected", "dana")
    assert store.record_reminder(stale[0], escalate=True) is None
    assert await ConfirmationReminders(store, notifier).scan([("acme", "alice")]) == []
    assert [i.event_type for i in await inbox.list("acme", "alice")] == [CONFIRMATION_REQUESTED]


def test_policy_values_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        ConfirmationPolicy(remind_every=timedelta(0))


async def test_two_runtimes_scanning_at_once_remind_once(tmp_path: Path, inbox: InboxStore) -> None:
    clock = Clock()
    notifier = InboxConfirmationNotifier(inbox)
    store = ConfirmationStore(tmp_path / "ws", notifier=notifier, clock=clock)
    await store.request(
        tenant_id="acme", worker_id="alice", run_id="run_1", task_id="task_1", thread_id="t",
        text="Pay", skill_id=None, gate_ref=None, reasons=(),
    )  # fmt: skip
    clock.now = START + timedelta(hours=5)
    other = ConfirmationStore(tmp_path / "ws", notifier=notifier, clock=clock)  # a second process's store
    stale = store.list("acme", "alice", "pending")  # both scans read the same pending confirmation
    first = ConfirmationReminders(store, notifier)
    second = ConfirmationReminders(other, notifier)
    assert first.due(stale[0], clock.now) is not None and second.due(stale[0], clock.now) is not None
    assert len(await first.scan([("acme", "alice")])) == 1
    assert (
        other.record_reminder(stale[0], escalate=False, still_due=lambda c: second.due(c, clock.now) is not None)
        is None
    )
    assert await second.scan([("acme", "alice")]) == []
    reminded = [i for i in await inbox.list("acme", "alice") if i.event_type == CONFIRMATION_REMINDED]
    assert len(reminded) == 1


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        ("remind", [(h, "remind") for h in range(4, 53, 4)]),  # every 4 h, never escalated
        ("escalate", [(24, "escalate"), (48, "remind")]),  # silent until the timeout
        ("close", [*((h, "remind") for h in range(4, 24, 4)), (24, "close")]),
    ],
)
async def test_the_workers_timeout_action_decides_what_happens(
    tmp_path: Path, inbox: InboxStore, action: str, expected: list[tuple[int, str]]
) -> None:
    notifier = InboxConfirmationNotifier(inbox)
    store = ConfirmationStore(tmp_path / "ws", notifier=notifier, clock=Clock())
    closed: list[str] = []

    async def close_run(confirmation: Confirmation) -> None:
        closed.append(confirmation.run_id)

    policy = ConfirmationPolicy(timedelta(hours=4), timedelta(hours=24), action)  # type: ignore[arg-type]
    reminders = ConfirmationReminders(
        store, notifier, policy_of=lambda t, w: policy if w == "alice" else ConfirmationPolicy(), close_run=close_run
    )
    asked = await store.request(
        tenant_id="acme", worker_id="alice", run_id="run_1", task_id="task_1", thread_id="t",
        text="Pay", skill_id=None, gate_ref=None, reasons=(),
    )  # fmt: skip
    happened = []
    for hours in range(0, 53):
        for sent in await reminders.scan([("acme", "alice")], now=START + timedelta(hours=hours)):
            happened.append((hours, sent.kind))
    assert happened == expected
    final = store.get("acme", "alice", asked.confirmation_id)
    assert final is not None
    if action == "close":
        assert (final.status, final.decided_by, closed) == ("rejected", POLICY_TIMEOUT, ["run_1"])
        assert [i.event_type for i in await inbox.list("acme", "alice")][-1] == CONFIRMATION_CLOSED
    else:
        assert final.status == "pending" and closed == []


async def test_notices_respect_the_interruption_budget_but_escalations_always_get_through(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    sent: list[str] = []

    class Channel:  # a recording stand-in for the IM channel (real vendor delivery: the channels tests)
        async def deliver(self, tenant_id: str, worker_id: str, text: str) -> bool:
            sent.append(text)
            return True

    policy = resolve_policy(PolicyOverrides(interruption_budget_per_day=1, quiet_hours=QuietHours(enabled=False)))
    briefs = BriefService(FileBriefStore(root), sink=Channel(), policy_of=lambda t, w: policy, clock=Clock())
    notifier = InboxConfirmationNotifier(FileInboxStore(root), notify=through_briefs(briefs))
    clock = Clock()
    store = ConfirmationStore(root, notifier=notifier, clock=clock)
    asked = []
    for text in ("Pay A", "Pay B"):
        asked.append(
            await store.request(
                tenant_id="acme",
                worker_id="alice",
                run_id="run_1",
                task_id="task_1",
                thread_id="t",
                text=text,
                skill_id=None,
                gate_ref=None,
                reasons=(),
            )
        )
    assert [t.split(": ", 1)[1] for t in sent] == ["Pay A"]  # the budget of one is used by the first
    assert FileBriefStore(root).pending("acme", "alice") == []  # B is in every brief's confirm section anyway
    reminders = ConfirmationReminders(store, notifier, ConfirmationPolicy(timedelta(hours=4), timedelta(hours=24)))
    await reminders.scan([("acme", "alice")], now=START + timedelta(hours=24))
    assert sum("escalated" in t for t in sent) == 2  # P0: both escalations interrupt past the budget
    closer = ConfirmationReminders(
        store, notifier, ConfirmationPolicy(timedelta(hours=4), timedelta(hours=24), "close")
    )
    store.decide("acme", "alice", asked[0].confirmation_id, "approved", "dana")
    await closer.scan([("acme", "alice")], now=START + timedelta(hours=30))
    (closed,) = FileBriefStore(root).pending("acme", "alice")  # no budget left: into the next brief
    assert closed.section == "done" and closed.ref == asked[1].confirmation_id and "Closed unanswered" in closed.title


def test_a_version_1_confirmation_still_reads_and_an_unknown_version_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "ws/tenants/acme/workers/alice/runtime/confirmations"
    folder.mkdir(parents=True)
    old = {
        "confirmation_id": "cf_0123456789abcdef", "tenant_id": "acme", "worker_id": "alice", "run_id": "run_1",
        "task_id": "task_1", "thread_id": "t", "text": "Pay", "skill_id": None, "gate_ref": "snapshot:policy:x",
        "reasons": ["approval_required: yes"], "created_at": START.isoformat(), "status": "pending",
        "decided_at": None, "decided_by": None, "schema_version": 1,
    }  # fmt: skip
    (folder / "cf_0123456789abcdef.json").write_text(json.dumps(old), encoding="utf-8")
    store = ConfirmationStore(tmp_path / "ws")
    found = store.get("acme", "alice", "cf_0123456789abcdef")
    assert found is not None and (found.kind, found.reminders, found.source_type) == ("gate", 0, "task")
    decided = store.decide("acme", "alice", "cf_0123456789abcdef", "approved", "dana")
    assert json.loads((folder / "cf_0123456789abcdef.json").read_text(encoding="utf-8"))["schema_version"] == 3
    assert decided.status == "approved"
    (folder / "cf_0123456789abcdef.json").write_text(json.dumps({**old, "schema_version": 9}), encoding="utf-8")
    with pytest.raises(ConfirmationError, match="unsupported schema_version 9"):
        store.get("acme", "alice", "cf_0123456789abcdef")
