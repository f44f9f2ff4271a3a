"""The outbox against the Slack stand-in over real HTTP (the real ChannelDelivery): one send per
idempotency key however often it is asked for, re-sends on the schedule until the vendor takes
the message, a person's re-send after it was given up, a restart that picks up what was waiting,
and a send cut short by a dying process that is never repeated by itself."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from genworker.channels.outbound import ChannelDelivery, RetryPolicy, VendorEndpoints
from genworker.channels.registry import ChannelRegistry
from genworker.delivery.outbox import Outbox, OutboxEntry, OutboxError, OutboxMessage, Recipient
from genworker.delivery.redelivery import DueTimes, RedeliveryPolicy
from genworker.testing.live_server import LiveServer
from genworker.testing.vendors import Vendor
from genworker.workspace.registry import WorkspaceRegistry

pytestmark = pytest.mark.anyio

POST = "/chat.postMessage"
PERSONA = "---\nidentity: {name: Alice, worker_id: alice}\nchannels:\n  - {type: slack, chat_ids: [C-OPS]}\n---\nHi.\n"
DANA = Recipient("slack", "U-DANA", label="Dana (slack)")


class ManualClock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@dataclass
class Setup:
    root: Path
    vendor: Vendor
    delivery: ChannelDelivery
    clock: ManualClock

    def outbox(self, policy: RedeliveryPolicy | None = None, owner: str = "proc-1") -> Outbox:
        return Outbox(self.root, self.delivery.send_to, policy or RedeliveryPolicy(), owner=owner,
                      due=DueTimes(self.clock))  # fmt: skip

    def texts(self) -> list[str]:
        return [r.body["text"] for r in self.vendor.calls(POST)]


@pytest.fixture
async def setup(write_tree: Callable[[Mapping[str, str]], Path]) -> AsyncIterator[Setup]:
    root = write_tree(
        {
            "tenants/acme/TENANT.json": '{"tenant_id": "acme", "name": "Acme"}',
            "tenants/acme/workers/alice/PERSONA.md": PERSONA,
            "tenants/acme/workers/alice/CHANNEL_CREDENTIALS.json": json.dumps(
                {"slack": {"bot_token": "xoxb-test", "signing_secret": "s" * 32}}
            ),
        }
    )
    registry = WorkspaceRegistry(root, product_skills=None)
    registry.load_all()
    vendor = Vendor()
    with LiveServer(vendor.app()) as live:
        delivery = ChannelDelivery(ChannelRegistry(registry), endpoints=VendorEndpoints(slack=live.url))
        delivery.http.policy = RetryPolicy(base_delay=0.001, max_delay=0.002)  # the in-send retries, fast
        try:
            yield Setup(root, vendor, delivery, ManualClock())
        finally:
            await delivery.aclose()


async def send(outbox: Outbox, key: str = "tool:run_1:c1", text: str = "Deploy done.", **kw: object) -> OutboxEntry:
    recipients = kw.pop("recipients", [DANA])
    return await outbox.send(key, "acme", "alice", recipients, OutboxMessage(text), **kw)  # type: ignore[arg-type]


class Settled:
    """An announcer: every settled entry, and a way to wait for a state."""

    def __init__(self) -> None:
        self.seen: list[OutboxEntry] = []
        self.changed = asyncio.Condition()

    async def __call__(self, entry: OutboxEntry) -> None:
        async with self.changed:
            self.seen.append(entry)
            self.changed.notify_all()

    async def wait(self, state: str, count: int = 1) -> OutboxEntry:
        async with self.changed:
            await asyncio.wait_for(
                self.changed.wait_for(lambda: sum(e.state == state for e in self.seen) >= count), 30
            )
            return [e for e in self.seen if e.state == state][-1]


async def test_one_send_per_key_however_often_it_is_asked(setup: Setup) -> None:
    outbox = setup.outbox()
    entries = await asyncio.gather(*(send(outbox) for _ in range(5)))
    assert setup.texts() == ["Deploy done."]
    [body] = [r.body for r in setup.vendor.calls(POST)]
    assert body["channel"] == "U-DANA"
    final = await outbox.find("acme", "alice", "tool:run_1:c1")
    assert final is not None and final.state == "sent" and final.delivered_to == "Dana (slack)"
    assert final.message_id and final.platform == "slack"
    assert {e.entry_id for e in entries} == {final.entry_id}
    again = await send(outbox, text="something else")  # the key decides, not the text
    assert again.state == "sent" and setup.texts() == ["Deploy done."]
    other = await send(outbox, key="tool:run_1:c2")
    assert other.state == "sent" and setup.texts() == ["Deploy done.", "Deploy done."]


async def test_a_failed_send_is_re_sent_on_schedule_until_the_vendor_takes_it(setup: Setup) -> None:
    outbox = setup.outbox()
    settled = Settled()
    outbox.announce = settled
    setup.vendor.down[POST] = 503
    first = await send(outbox)
    assert (first.state, first.attempts) == ("retrying", 1)
    assert first.next_at == pytest.approx(setup.clock.now + 30) and "HTTP 503" in (first.last_error or "")
    assert len(setup.texts()) == 4  # the in-send retries of one attempt
    assert [e.entry_id for e in await outbox.undelivered("acme", "alice")] == [first.entry_id]
    await outbox.start()
    try:
        assert first.next_at is not None
        setup.clock.now = first.next_at  # the second attempt, still down
        outbox.due.wake()
        second = await settled.wait("retrying", 2)
        assert second.attempts == 2 and second.next_at == pytest.approx(setup.clock.now + 60)
        setup.vendor.down.clear()
        assert second.next_at is not None
        setup.clock.now = second.next_at
        outbox.due.wake()
        sent = await settled.wait("sent")
    finally:
        await outbox.stop()
    assert sent.attempts == 2 and len(setup.texts()) == 9  # 4 + 4 refused, then the one taken
    assert await outbox.undelivered("acme", "alice") == []
    again = await send(outbox)
    assert again.state == "sent" and len(setup.texts()) == 9


async def test_past_the_horizon_it_is_given_up_and_a_person_can_send_it_again(setup: Setup) -> None:
    outbox = setup.outbox(RedeliveryPolicy(base_s=30, horizon_s=0.5))
    setup.vendor.down[POST] = 503
    first = await send(outbox)
    assert first.state == "retrying" and first.next_at is not None
    setup.clock.now = first.next_at  # 30 s later: past the horizon
    given_up = await outbox.retry(outbox._path("acme", "alice", first.entry_id))
    assert given_up is not None and given_up.state == "given_up" and given_up.attempts == 2
    [listed] = await outbox.undelivered("acme", "alice")
    assert listed.describe()["state"] == "given_up" and "503" in listed.describe()["last_error"]
    with pytest.raises(ValueError, match="only given_up or outcome_unknown"):
        await outbox.resend("acme", "alice", (await send(outbox, key="tool:run_2:c1", text="x")).entry_id)
    setup.vendor.down.clear()
    resent = await outbox.resend("acme", "alice", first.entry_id)
    assert resent.state == "sent" and setup.texts().count("Deploy done.") == 9
    with pytest.raises(OutboxError, match="no outbox entry"):
        await outbox.resend("acme", "alice", "ob_000000000000000000000000")


async def test_a_restart_sends_what_was_waiting_and_never_repeats_a_send_cut_short(setup: Setup) -> None:
    before = setup.outbox(owner="proc-1")
    setup.vendor.down[POST] = 503
    waiting = await send(before, key="heartbeat:acme:alice:run_1", text="waiting")
    assert waiting.state == "retrying"
    # another entry, whose sender died between writing it and hearing from the vendor
    cut = OutboxEntry("ob_" + "c" * 24, "tool:run_9:c1", "acme", "alice", (DANA,), OutboxMessage("maybe sent"), {},
                      owner="proc-dead", created_at=setup.clock.now)  # fmt: skip
    before._write(cut)
    setup.vendor.down.clear()
    calls = len(setup.texts())
    after = setup.outbox(owner="proc-2")
    settled = Settled()
    after.announce = settled
    assert await after.start(alive=lambda owner: False) == 1  # the waiting one
    try:
        unknown = await after.get("acme", "alice", cut.entry_id)
        assert unknown.state == "outcome_unknown" and unknown.owner is None
        assert waiting.next_at is not None
        setup.clock.now = waiting.next_at
        after.due.wake()
        sent = await settled.wait("sent")
    finally:
        await after.stop()
    assert sent.key == "heartbeat:acme:alice:run_1"
    assert setup.texts()[calls:] == ["waiting"]  # the cut-short one was not sent again
    assert [e.state for e in await after.undelivered("acme", "alice")] == ["outcome_unknown"]
    alive = setup.outbox(owner="proc-3")
    live = OutboxEntry("ob_" + "d" * 24, "tool:run_8:c1", "acme", "alice", (DANA,), OutboxMessage("busy"), {},
                       owner="proc-live", created_at=setup.clock.now)  # fmt: skip
    alive._write(live)
    assert await alive.recover(alive=lambda owner: owner == "proc-live") == []  # still being sent elsewhere


async def test_without_retries_a_failure_is_final_and_recipients_are_tried_in_order(setup: Setup) -> None:
    outbox = setup.outbox()
    nowhere = Recipient("feishu", "ou_dana", label="Dana (feishu)")  # alice has no feishu channel
    sent = await send(outbox, recipients=[nowhere, DANA])
    assert sent.state == "sent" and sent.delivered_to == "Dana (slack)"
    failed = await send(outbox, key="heartbeat:acme:alice:run_2", recipients=[nowhere], retry=False)
    assert failed.state == "failed" and "has no feishu channel" in (failed.last_error or "")
    assert failed.next_at is None and len(setup.texts()) == 1


async def test_a_file_of_an_unknown_version_is_refused_naming_it(setup: Setup) -> None:
    outbox = setup.outbox()
    entry = await send(outbox)
    path = outbox._path("acme", "alice", entry.entry_id)
    data = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps({**data, "schema_version": 9}), encoding="utf-8")
    with pytest.raises(OutboxError, match=rf"{path.name}: schema_version 9 is unknown"):
        await outbox.get("acme", "alice", entry.entry_id)
    assert await outbox.recover() == []  # skipped, left as it is
    assert json.loads(path.read_text(encoding="utf-8"))["schema_version"] == 9
