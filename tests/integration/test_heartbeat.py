"""The heartbeat through the real runtime: LiteLLM to the scripted model server, real files.

Silence and cost: an empty inbox calls no model and writes nothing; "attention": false leaves
nothing user-visible; concerns already taken up are dropped without a model call, also after a
restart; items are batched into one summary turn under a cap; a malformed answer fails the items
for a retry instead of reaching the user. The scheduler runs a job per worker.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from fastapi.testclient import TestClient

from genworker.api.app import create_app
from genworker.autonomy.heartbeat import (
    HEARTBEAT_NAME,
    TOPIC_COMPLETED,
    TOPIC_REPORTED,
    Dismiss,
    HeartbeatFileError,
    HeartbeatReport,
    Reported,
    Silent,
    SummaryFailed,
    job_id,
)
from genworker.autonomy.inbox import InboxItem, InboxState, new_item
from genworker.bus import Event
from genworker.conversation import main_session_id
from genworker.runtime.composition import Runtime
from genworker.settings import load_settings
from genworker.testing import Reply, ScriptedModelServer, scripted_env

T = TypeVar("T")

SILENT = '{"attention": false, "message": ""}'


def speak(message: str) -> str:
    return json.dumps({"attention": True, "message": message})


@pytest.fixture
def workspace(small_workspace: Callable[..., Path]) -> Path:
    return small_workspace({"acme": ["alice", "bob"]})


@contextmanager
def running(
    tmp_path: Path, workspace: Path, model: ScriptedModelServer, **env: str
) -> Iterator[tuple[TestClient, Runtime]]:
    (tmp_path / "configs").mkdir(exist_ok=True)
    values = scripted_env(model, **env)
    with TestClient(create_app(load_settings(tmp_path / "configs", values, workspace=workspace))) as client:
        yield client, client.app.state.runtime  # type: ignore[attr-defined]


def call(client: TestClient, fn: Callable[[], Awaitable[T]]) -> T:
    return client.portal.call(fn)  # type: ignore[union-attr, arg-type, return-value]


def write(client: TestClient, runtime: Runtime, *items: InboxItem) -> None:
    inbox = runtime.services.inbox

    async def go() -> None:
        for item in items:
            assert await inbox.write(item)

    call(client, go)


def heartbeat(client: TestClient, runtime: Runtime, worker: str = "alice") -> HeartbeatReport:
    service = runtime.services.heartbeat
    return call(client, lambda: service.run_once("acme", worker))


def fact(payload: dict[str, Any], *, worker: str = "alice", **kw: Any) -> InboxItem:
    return new_item("acme", worker, "webhook", "hooks", "webhook.fact", payload, **kw)


def items_in(client: TestClient, runtime: Runtime, state: InboxState, worker: str = "alice") -> list[InboxItem]:
    inbox = runtime.services.inbox
    return list(call(client, lambda: inbox.list("acme", worker, state)))


def main_messages(client: TestClient, runtime: Runtime, worker: str = "alice") -> list[Any]:
    sessions = runtime.services.router.sessions

    async def get() -> list[Any]:
        session = await sessions.get("acme", main_session_id(worker))
        return list(session.messages) if session is not None else []

    return call(client, get)


def collect_events(client: TestClient, runtime: Runtime, pattern: str) -> list[Event]:
    bus = runtime.services.bus
    seen: list[Event] = []

    async def subscribe() -> None:
        async def handler(event: Event) -> None:
            seen.append(event)

        bus.subscribe(pattern, handler)

    call(client, subscribe)
    return seen


def drain(client: TestClient, runtime: Runtime) -> None:
    bus = runtime.services.bus
    assert bus is not None and hasattr(bus, "drain")
    call(client, bus.drain)


def meta_file(workspace: Path, worker: str = "alice") -> Path:
    return workspace / "tenants/acme/workers" / worker / "runtime/heartbeat_meta.json"


# -- silence and cost ---------------------------------------------------------------


def test_an_empty_inbox_calls_no_model_and_writes_nothing(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    with running(tmp_path, workspace, model_server) as (client, runtime):
        report = heartbeat(client, runtime)
    assert report.claimed == 0 and report.items == () and report.summary is None and report.model_turns == 0
    assert model_server.requests == []
    assert not meta_file(workspace).exists()


def test_nothing_to_report_is_consumed_in_silence(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply(SILENT))
    with running(tmp_path, workspace, model_server) as (client, runtime):
        events = collect_events(client, runtime, "heartbeat.*")
        item = fact({"title": "nightly backup finished", "ok": True})
        write(client, runtime, item)
        report = heartbeat(client, runtime)
        drain(client, runtime)
        assert isinstance(report.summary, Silent)
        assert [(r.action, r.outcome) for r in report.items] == [("summary", "silent")]
        assert main_messages(client, runtime) == []  # nothing user-visible
        assert [i.item_id for i in items_in(client, runtime, InboxState.CONSUMED)] == [item.item_id]
    assert [e.topic for e in events] == [TOPIC_COMPLETED]  # no heartbeat.reported
    meta = json.loads(meta_file(workspace).read_text(encoding="utf-8"))
    assert meta["schema_version"] == 1 and meta["counters"]["silent"] == 1 and meta["counters"]["reports"] == 0
    assert meta["cursor"]["last_item_id"] == item.item_id and meta["open_concerns"] == []
    assert meta["main_session_key"] == "alice.main"


def test_consumed_items_past_their_retention_are_purged_by_the_heartbeat(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply(SILENT))
    with running(tmp_path, workspace, model_server, GENWORKER_INBOX_RETENTION_S="60") as (client, runtime):
        old, recent = fact({"title": "old news"}), fact({"title": "fresh news"})
        write(client, runtime, replace(old, created_at=old.created_at - timedelta(minutes=5)))
        heartbeat(client, runtime)  # consumes it; the purge at its end is the first: it runs
        assert items_in(client, runtime, InboxState.CONSUMED) == []  # consumed and past retention: gone
        runner = runtime.services.heartbeat.runner
        runner.settings = replace(runner.settings, purge_every=timedelta(0))
        write(client, runtime, recent)
        model_server.expect(Reply(SILENT))
        heartbeat(client, runtime)
        assert [i.item_id for i in items_in(client, runtime, InboxState.CONSUMED)] == [recent.item_id]  # kept


class DismissAll:
    def decide_action(self, item: InboxItem, config: Any) -> Dismiss:
        return Dismiss("informational")


def test_a_dismissed_item_is_consumed_without_a_model_call(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    with running(tmp_path, workspace, model_server) as (client, runtime):
        runtime.services.heartbeat.runner.strategy = DismissAll()
        item = fact({"title": "build 41 green"})
        write(client, runtime, item)
        report = heartbeat(client, runtime)
        assert [(r.action, r.outcome, r.reason) for r in report.items] == [("dismiss", "dismissed", "informational")]
        assert report.model_turns == 0 and report.summary is None
        assert [i.item_id for i in items_in(client, runtime, InboxState.CONSUMED)] == [item.item_id]
        assert main_messages(client, runtime) == []
    assert model_server.requests == []


def test_attention_puts_one_message_in_the_main_session(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    def sees_the_item(body: dict[str, Any]) -> None:
        prompt = body["messages"][-1]["content"]
        assert "disk 97% full on db1" in prompt and '"attention"' in prompt

    model_server.expect(Reply(speak("db1 is almost out of disk (97%)."), check=sees_the_item))
    with running(tmp_path, workspace, model_server) as (client, runtime):
        events = collect_events(client, runtime, TOPIC_REPORTED)
        item = fact({"title": "disk 97% full on db1"})
        write(client, runtime, item)
        report = heartbeat(client, runtime)
        drain(client, runtime)
        messages = main_messages(client, runtime)
    assert isinstance(report.summary, Reported)
    assert [(m.role, m.name, m.content) for m in messages] == [
        ("assistant", HEARTBEAT_NAME, "db1 is almost out of disk (97%).")
    ]
    assert messages[0].run_id == report.summary.run_id
    assert [e.payload["message"] for e in events] == ["db1 is almost out of disk (97%)."]
    meta = json.loads(meta_file(workspace).read_text(encoding="utf-8"))
    assert [c["item_id"] for c in meta["open_concerns"]] == [item.item_id]
    assert meta["last_run"]["summary"] == "reported" and meta["counters"]["model_turns"] == 1


def test_a_malformed_answer_fails_the_items_and_says_nothing(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply("Nothing important happened, all good."))
    with running(tmp_path, workspace, model_server) as (client, runtime):
        write(client, runtime, fact({"title": "x"}))
        report = heartbeat(client, runtime)
        failed = items_in(client, runtime, InboxState.FAILED)
        assert main_messages(client, runtime) == []
        model_server.expect(Reply(SILENT))
        # the concern was released: once retried, the same item is processed again, not a duplicate
        call(client, lambda: runtime.services.inbox_aggregate.requeue("acme", "alice", failed[0].item_id))  # type: ignore[union-attr]
        again = heartbeat(client, runtime)
    assert isinstance(report.summary, SummaryFailed) and report.summary.retry
    assert "attention" in report.summary.error
    assert len(failed) == 1 and failed[0].last_error is not None and "not {" in failed[0].last_error
    assert [(r.action, r.outcome) for r in again.items] == [("summary", "silent")]


def test_items_are_batched_into_one_turn_under_the_cap(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    first = [fact({"title": f"event {n}"}) for n in range(3)]

    def lists_two(body: dict[str, Any]) -> None:
        prompt = body["messages"][-1]["content"]
        assert first[0].item_id in prompt and first[1].item_id in prompt and first[2].item_id not in prompt

    model_server.expect(Reply(SILENT, check=lists_two), Reply(SILENT))
    with running(tmp_path, workspace, model_server, GENWORKER_HEARTBEAT_BATCH_SIZE="2") as (client, runtime):
        write(client, runtime, *first)
        one = heartbeat(client, runtime)
        two = heartbeat(client, runtime)
        three = heartbeat(client, runtime)
    assert (one.claimed, two.claimed, three.claimed) == (2, 1, 0)
    assert len(model_server.requests) == 2


# -- dedupe through the attention ledger ----------------------------------------------------


def test_a_concern_is_not_processed_twice_within_its_window_even_after_a_restart(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply(speak("The build on main is red.")))
    alert = {"title": "build failed", "branch": "main"}
    with running(tmp_path, workspace, model_server) as (client, runtime):
        write(client, runtime, fact(alert), fact(alert))  # two items, one concern, one batch
        first = heartbeat(client, runtime)
    assert [r.outcome for r in first.items] == ["reported", "duplicate"]
    with running(tmp_path, workspace, model_server) as (client, runtime):  # a new process
        write(client, runtime, fact(alert, metadata={"note": "re-sent"}))
        second = heartbeat(client, runtime)
        consumed = items_in(client, runtime, InboxState.CONSUMED)
        messages = main_messages(client, runtime)
    assert [(r.action, r.outcome) for r in second.items] == [("duplicate", "duplicate")]
    assert second.model_turns == 0 and len(model_server.requests) == 1
    assert len(consumed) == 3 and len(messages) == 1
    meta = json.loads(meta_file(workspace).read_text(encoding="utf-8"))
    assert meta["counters"]["duplicates"] == 2 and meta["counters"]["model_turns"] == 1


def test_an_explicit_concern_groups_different_facts(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply(SILENT))
    with running(tmp_path, workspace, model_server) as (client, runtime):
        write(
            client,
            runtime,
            fact({"cpu": 91}, metadata={"concern": "db1-load"}),
            fact({"cpu": 93}, metadata={"concern": "db1-load"}),
            fact({"cpu": 95}, metadata={"concern": "db2-load"}),
        )
        report = heartbeat(client, runtime)
    assert [r.outcome for r in report.items] == ["silent", "duplicate", "silent"]
    assert len(model_server.requests) == 1


def test_workers_have_separate_heartbeats(tmp_path: Path, workspace: Path, model_server: ScriptedModelServer) -> None:
    model_server.expect(Reply(speak("for bob")))
    with running(tmp_path, workspace, model_server) as (client, runtime):
        write(client, runtime, fact({"title": "same"}, worker="bob"))
        alice = heartbeat(client, runtime, "alice")
        bob = heartbeat(client, runtime, "bob")
        assert main_messages(client, runtime, "alice") == []
        assert [m.content for m in main_messages(client, runtime, "bob")] == ["for bob"]
    assert alice.claimed == 0 and bob.claimed == 1


def test_an_unreadable_ledger_fails_the_items_with_the_reason(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    ledger = workspace / "tenants/acme/workers/alice/runtime/attention_ledger.json"
    ledger.parent.mkdir(parents=True)
    ledger.write_text('{"schema_version": 7}', encoding="utf-8")
    with running(tmp_path, workspace, model_server) as (client, runtime):
        write(client, runtime, fact({"title": "x"}))
        with pytest.raises(HeartbeatFileError, match="schema_version 7"):
            heartbeat(client, runtime)
        (failed,) = items_in(client, runtime, InboxState.FAILED)
    assert failed.last_error is not None and str(ledger) in failed.last_error
    assert model_server.requests == [] and ledger.read_text(encoding="utf-8") == '{"schema_version": 7}'


# -- the scheduler --------------------------------------------------------------------


def test_the_scheduler_runs_one_coalescing_job_per_worker(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply(SILENT))
    env = {"GENWORKER_HEARTBEAT_ENABLED": "true", "GENWORKER_HEARTBEAT_INTERVAL_S": "0.2"}
    with running(tmp_path, workspace, model_server, **env) as (client, runtime):
        jobs = runtime.services.heartbeat.scheduler.jobs()
        assert set(jobs) == {job_id("acme", "alice"), job_id("acme", "bob")}
        assert all(j.max_instances == 1 and j.coalesce for j in jobs.values())
        bus = runtime.services.bus

        async def scheduled_heartbeat_processes_the_item() -> None:
            done = asyncio.Event()

            async def on_completed(event: Event) -> None:
                if event.worker_id == "alice":
                    done.set()

            bus.subscribe(TOPIC_COMPLETED, on_completed)
            await runtime.services.inbox.write(fact({"title": "scheduled"}))
            async with asyncio.timeout(20):
                await done.wait()

        call(client, scheduled_heartbeat_processes_the_item)
        consumed = items_in(client, runtime, InboxState.CONSUMED)
    assert len(consumed) == 1 and len(model_server.requests) == 1


# -- the shared profile ------------------------------------------------------------------


@pytest.mark.redis
def test_the_shared_profile_keeps_the_inbox_in_redis(
    tmp_path: Path, small_workspace: Callable[..., Path], model_server: ScriptedModelServer, redis_url: str
) -> None:
    import uuid

    import redis

    from genworker.autonomy.inbox import RedisInboxStore
    from genworker.bus import RedisEventBus

    tenant = f"t{uuid.uuid4().hex[:12]}"  # the runtime's default key prefix is shared: keep to our own tenant
    workspace = small_workspace({tenant: ["alice"]})
    model_server.expect(Reply(speak("from redis")))
    try:
        with running(tmp_path, workspace, model_server, REDIS_URL=redis_url, GENWORKER_PROFILE="shared") as (
            client,
            runtime,
        ):
            assert isinstance(runtime.services.inbox, RedisInboxStore) and isinstance(
                runtime.services.bus, RedisEventBus
            )
            inbox, service, sessions = (
                runtime.services.inbox,
                runtime.services.heartbeat,
                runtime.services.router.sessions,
            )

            async def go() -> tuple[HeartbeatReport, Any]:
                assert await inbox.write(new_item(tenant, "alice", "webhook", "h", "webhook.fact", {"title": "r"}))
                report = await service.run_once(tenant, "alice")
                return report, await sessions.get(tenant, main_session_id("alice"))

            report, session = call(client, go)
        assert isinstance(report.summary, Reported) and [m.content for m in session.messages] == ["from redis"]
        assert not (workspace / "tenants" / tenant / "workers/alice/runtime/inbox").exists()
    finally:
        with redis.Redis.from_url(redis_url) as r:
            keys = list(r.scan_iter(match=f"*{tenant}*"))
            if keys:
                r.delete(*keys)
