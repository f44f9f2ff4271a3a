"""Interruption budget and briefs: budget exhaustion routes to the brief, quiet hours and focus let
only P0 through, the brief has Steward's sections with options, and items are never lost. The
store tests run against both backends (files, real Redis)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from redis import Redis

from genworker.autonomy.briefs import (
    SECTIONS,
    BriefError,
    BriefNotFound,
    BriefService,
    BriefStore,
    FileBriefStore,
    RedisBriefStore,
    in_quiet_hours,
)
from genworker.autonomy.waiting import FileWaitingStore, WaitingPlan
from genworker.worker.governance.policy_gate import Policy, resolve_policy
from genworker.workspace.models.policy import PolicyOverrides, QuietHours

pytestmark = pytest.mark.anyio
NOON = datetime(2026, 3, 2, 4, 0, tzinfo=UTC)  # 12:00 in Asia/Shanghai


class Sink:
    """Records deliveries; a real channel sits behind BriefSink in the runtime."""

    def __init__(self, ok: bool = True) -> None:
        self.ok = ok
        self.sent: list[tuple[str, str, str]] = []

    async def deliver(self, tenant_id: str, worker_id: str, text: str) -> bool:
        self.sent.append((tenant_id, worker_id, text))
        return self.ok


def policy(**overrides: Any) -> Policy:
    return resolve_policy(PolicyOverrides.model_validate({"quiet_hours": {"timezone": "Asia/Shanghai"}, **overrides}))


MakeStore = Callable[[], BriefStore]


@pytest.fixture(params=["file", pytest.param("redis", marks=pytest.mark.redis)])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeStore]:
    """A factory of empty stores, each its own (files under a fresh folder, or a fresh Redis prefix)."""
    if request.param == "file":
        yield lambda: FileBriefStore(tmp_path / uuid.uuid4().hex)
        return
    client = Redis.from_url(request.getfixturevalue("redis_url"))
    prefix = f"gwtest-{uuid.uuid4().hex}"
    try:
        yield lambda: RedisBriefStore(client, prefix=f"{prefix}-{uuid.uuid4().hex[:8]}")
    finally:
        keys = list(client.scan_iter(match=f"{prefix}-*"))
        if keys:
            client.delete(*keys)
        client.close()


def service(store: BriefStore, sink: Sink | None, now: list[datetime], **overrides: Any) -> BriefService:
    pol = policy(**overrides)
    return BriefService(store, sink=sink, policy_of=lambda t, w: pol, clock=lambda: now[0])


async def test_budget_exhaustion_routes_to_the_brief(make_store: MakeStore) -> None:
    sink, now = Sink(), [NOON]
    svc = service(make_store(), sink, now, interruption_budget_per_day=3)
    results = [await svc.notify("acme", "w", svc.item("confirm", f"question {i}", risk="medium")) for i in range(5)]
    assert results == ["interrupted"] * 3 + ["briefed"] * 2
    assert len(sink.sent) == 3
    pending = svc.store.pending("acme", "w")
    assert [(i.title, i.reason) for i in pending] == [
        ("question 3", "budget_exhausted"),
        ("question 4", "budget_exhausted"),
    ]
    # P0 still gets through, and counts
    assert await svc.notify("acme", "w", svc.item("conflicts", "prod is down", priority="P0")) == "interrupted"
    assert svc.store.budget("acme", "w", "2026-03-02").used == 4
    # the next local day has a fresh budget
    now[0] = NOON + timedelta(days=1)
    assert await svc.notify("acme", "w", svc.item("confirm", "tomorrow")) == "interrupted"


async def test_concurrent_notifications_never_exceed_the_budget(make_store: MakeStore) -> None:
    sink, now = Sink(), [NOON]
    svc = service(make_store(), sink, now, interruption_budget_per_day=10)
    results = await asyncio.gather(*(svc.notify("acme", "w", svc.item("confirm", f"q{i}")) for i in range(30)))
    assert results.count("interrupted") == 10 and results.count("briefed") == 20
    assert len(svc.store.pending("acme", "w")) == 20


async def test_quiet_hours_and_focus_let_only_p0_through(make_store: MakeStore) -> None:
    sink, now = Sink(), [datetime(2026, 3, 2, 15, 0, tzinfo=UTC)]  # 23:00 in Shanghai
    svc = service(make_store(), sink, now, quiet_hours={"windows": ["22:00-08:00"], "timezone": "Asia/Shanghai"})
    assert await svc.notify("acme", "w", svc.item("confirm", "late question")) == "briefed"
    assert svc.store.pending("acme", "w")[0].reason == "quiet_hours"
    assert await svc.notify("acme", "w", svc.item("conflicts", "outage", priority="P0")) == "interrupted"
    focus = service(make_store(), sink, [NOON], quiet_hours={"focus": True})
    assert await focus.notify("acme", "w", svc.item("confirm", "x", priority="P1")) == "briefed"
    assert focus.store.pending("acme", "w")[0].reason == "focus"


def test_quiet_hour_windows() -> None:
    quiet = QuietHours(windows=("22:00-08:00", "12:00-13:00"), timezone="Asia/Shanghai")
    at = lambda h, m=0: datetime(2026, 3, 2, h, m, tzinfo=UTC) - timedelta(hours=8)  # noqa: E731 - Shanghai clock
    assert [in_quiet_hours(quiet, at(h)) for h in (21, 22, 23, 3, 8, 12, 13)] == [
        False, True, True, True, False, True, False,
    ]  # fmt: skip
    assert not in_quiet_hours(QuietHours(enabled=False, windows=("00:00-23:59",)), at(3))


async def test_a_failing_channel_keeps_the_item_for_the_brief(make_store: MakeStore) -> None:
    svc = service(make_store(), Sink(ok=False), [NOON])
    assert await svc.notify("acme", "w", svc.item("confirm", "q")) == "briefed"
    assert svc.store.pending("acme", "w")[0].reason == "delivery_failed"


async def test_brief_has_every_section_with_options_and_clears_pending(tmp_path: Path, make_store: MakeStore) -> None:
    sink, now = Sink(), [NOON]
    waiting = FileWaitingStore(tmp_path)
    await waiting.add(
        WaitingPlan(
            plan_id="pr42", tenant_id="acme", worker_id="w", match_key="github:pr:42:reviewed", title="PR #42 review",
            created_at=NOON, expires_at=NOON + timedelta(hours=24),
        )
    )  # fmt: skip
    pol = policy()
    svc = BriefService(
        make_store(), sink=sink, policy_of=lambda t, w: pol, clock=lambda: now[0], waiting=waiting,
        confirmations=lambda t, w: [{"id": "c1", "text": "Send the PRD commitment email?", "reasons": ["irrev."]}],
        suggestions=lambda t, w: [{"id": "s1", "title": "Install the Jira connector", "kind": "skill"}],
    )  # fmt: skip
    await svc.record("acme", "w", svc.item("done", "Labelled issue #128", risk="low", reversibility="reversible"))
    await svc.record("acme", "w", svc.item("conflicts", "Two plans change github:issue:42", risk="medium"))
    brief = await svc.generate("acme", "w")
    assert brief.delivered is True and sink.sent[-1][2] == brief.text
    assert {s: len(items) for s, items in brief.sections.items()} == {
        "done": 1, "waiting": 1, "conflicts": 1, "confirm": 1, "spaces": 0, "suggestions": 1, "feedback": 1,
    }  # fmt: skip
    for section in SECTIONS:
        for item in brief.sections[section]:
            assert item.options or section in ("done", "conflicts"), (section, item)
    text = brief.text
    assert text.startswith("Brief | 2026-03-02 12:00 (Asia/Shanghai)")
    assert "Interruption budget: 0 / 10 (today)" in text
    assert "1) Done automatically (1)\n- [Low][Reversible] Labelled issue #128" in text
    assert "`/approve_confirmation c1` (Approve)" in text and "`/approve_suggestion s1` (Approve)" in text
    assert "[Waiting] PR #42 review" in text and "`/feedback too conservative`" in text
    assert svc.store.pending("acme", "w") == []
    # stored, listed newest first, and the next brief starts where this one ended
    now[0] = NOON + timedelta(hours=4)
    second = await svc.generate("acme", "w", deliver=False)
    assert second.sections["done"] == () and second.period_start == NOON
    assert [b.brief_id for b in svc.store.list("acme", "w")] == [second.brief_id, brief.brief_id]
    assert svc.store.get("acme", "w", brief.brief_id) == brief


async def test_stored_briefs_reject_unknown_schema_versions(make_store: MakeStore) -> None:
    svc = service(make_store(), None, [NOON])
    brief = await svc.generate("acme", "w")
    assert brief.delivered is None  # no sink configured
    svc.store.save(brief.model_copy(update={"text": "tampered"}))
    assert svc.store.get("acme", "w", brief.brief_id).text == "tampered"  # save replaces
    _tamper(svc.store, brief.brief_id, lambda data: {**data, "schema_version": 7})
    with pytest.raises(BriefError, match="schema_version: Value error, unknown schema_version 7"):
        svc.store.get("acme", "w", brief.brief_id)
    with pytest.raises(BriefError, match="unknown schema_version 7"):
        svc.store.list("acme", "w")


def _tamper(store: BriefStore, brief_id: str, change: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """Rewrite a stored brief behind the store's back (a file from another build, or a Redis value)."""
    if isinstance(store, FileBriefStore):
        path = store.folder("acme", "w") / "sent" / f"{brief_id}.json"
        path.write_text(json.dumps(change(json.loads(path.read_text(encoding="utf-8")))), encoding="utf-8")
        return
    assert isinstance(store, RedisBriefStore)
    key = store._key("acme", "w", "sent")
    raw = store._redis.hget(key, brief_id)
    store._redis.hset(key, brief_id, json.dumps(change(json.loads(raw))))  # type: ignore[arg-type]


async def test_items_are_kept_once_and_each_brief_takes_them_once(make_store: MakeStore) -> None:
    svc = service(make_store(), None, [NOON])
    item = svc.item("conflicts", "two plans change github:issue:42")
    assert svc.store.add_item("acme", "w", item) is True
    assert svc.store.add_item("acme", "w", item.model_copy(update={"title": "retry"})) is False
    assert [i.title for i in svc.store.pending("acme", "w")] == ["two plans change github:issue:42"]
    assert svc.store.pending("acme", "other") == []
    briefs = await asyncio.gather(*(svc.generate("acme", "w", deliver=False) for _ in range(4)))
    assert sorted(len(b.sections["conflicts"]) for b in briefs) == [0, 0, 0, 1]
    assert svc.store.pending("acme", "w") == []
    assert len(svc.store.list("acme", "w", limit=3)) == 3 and len(svc.store.list("acme", "w")) == 4
    with pytest.raises(BriefNotFound):
        svc.store.get("acme", "w", "brief_none")


async def test_channel_brief_sink_sends_markdown_through_a_channel_sender() -> None:
    from genworker.autonomy.briefs import ChannelBriefSink
    from genworker.delivery.messages import DeliveryResult, OutboundMessage

    class Sender:
        """Records sends; the real ChannelDelivery is tested with the vendors' APIs in the channels tests."""

        def __init__(self, ok: bool) -> None:
            self.ok, self.sent = ok, []

        async def send(self, tenant_id: str, worker_id: str, outbound: OutboundMessage, **_: Any) -> DeliveryResult:
            self.sent.append((tenant_id, worker_id, outbound))
            return DeliveryResult(ok=self.ok, platform="slack", error=None if self.ok else "no channel")

    good, bad = Sender(True), Sender(False)
    assert await ChannelBriefSink(good).deliver("acme", "w", "Brief | ...") is True
    assert good.sent == [("acme", "w", OutboundMessage(text="Brief | ...", format="markdown"))]
    assert await ChannelBriefSink(bad).deliver("acme", "w", "x") is False


async def test_a_brief_job_per_worker_every_brief_window(ws: Any, tmp_path: Path) -> None:
    ws.persona(worker_id="a", extra="policy:\n  brief_window_hours: 2\n")
    ws.persona(worker_id="b")
    a, b = ws.load_worker(worker_id="a")[0], ws.load_worker(worker_id="b")[0]
    policies = {"a": resolve_policy(PolicyOverrides(), a.persona.policy), "b": resolve_policy(PolicyOverrides())}
    svc = BriefService(FileBriefStore(tmp_path), policy_of=lambda t, w: policies[w])
    await svc.start([a, b])
    try:
        jobs = svc.jobs()
        assert {k: j.trigger.interval for k, j in jobs.items()} == {
            "brief:acme/a": timedelta(hours=2),
            "brief:acme/b": timedelta(hours=4),
        }
        svc.sync([b])
        assert list(svc.jobs()) == ["brief:acme/b"]
    finally:
        await svc.stop()
