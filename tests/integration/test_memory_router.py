"""Memory wired into the real pipeline (real runtime, LiteLLM over HTTP to the scripted model
server): a completed run leaves an episode, promoted memory reaches the system prompt of later
runs, a failed run leaves nothing, and extraction (only when enabled) supersedes decisions."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from genworker.api.app import create_app
from genworker.engine.events import TextDelta
from genworker.memory import MemoryBinding, MemoryService
from genworker.memory.models import parse_episode
from genworker.runtime.composition import Runtime
from genworker.settings import load_settings
from genworker.testing import Fail, Reply, ScriptedModelServer, scripted_env
from genworker.worker.router import RouteDone, RouteRequest, RouterEvent


@contextmanager
def running(
    tmp_path: Path, workspace: Path, model: ScriptedModelServer, **extra: str
) -> Iterator[tuple[TestClient, Runtime]]:
    (tmp_path / "configs").mkdir(exist_ok=True)
    env = scripted_env(model, GENWORKER_HEARTBEAT_ENABLED="true", **extra)
    with TestClient(create_app(load_settings(tmp_path / "configs", env, workspace=workspace))) as client:
        yield client, client.app.state.runtime  # type: ignore[attr-defined]


def route(client: TestClient, runtime: Runtime, req: RouteRequest) -> list[RouterEvent]:
    async def collect() -> list[RouterEvent]:
        return [event async for event in runtime.services.router.route_stream(req)]

    return client.portal.call(collect)  # type: ignore[union-attr]


def memory_of(runtime: Runtime) -> MemoryService:
    return runtime.services.router.memory


def system_prompt(body: dict[str, Any]) -> str:
    first = body["messages"][0]
    return str(first["content"]) if first["role"] == "system" else ""


@pytest.fixture
def workspace(small_workspace: Callable[..., Path]) -> Path:
    return small_workspace({"acme": ["alice"], "globex": ["gina"]})


def test_a_completed_chat_leaves_an_episode_that_its_own_thread_does_not_repeat(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    def no_memory_segment(body: dict[str, Any]) -> None:
        assert "Relevant memory" not in system_prompt(body)  # the turn is already in the history

    model_server.expect(Reply("Noted, the Hamburg lease renews in May."), Reply("May.", check=no_memory_segment))
    with running(tmp_path, workspace, model_server) as (client, runtime):
        route(client, runtime, RouteRequest("acme", "alice", "The Hamburg lease renews in May.", thread_id="t1"))
        route(client, runtime, RouteRequest("acme", "alice", "When does the Hamburg lease renew?", thread_id="t1"))
        episodes = sorted((workspace / "tenants/acme/workers/alice/memory/episodes").glob("ep_*.md"))
        assert len(episodes) == 2
        text = next(t for e in episodes if "Request: The Hamburg" in (t := e.read_text(encoding="utf-8")))
        stored = parse_episode(text, "episode")
        assert stored.scope == "conversation:t1" and stored.provenance.channel == "chat"
        assert "renews in May" in stored.body
        assert (workspace / "tenants/acme/workers/alice/runtime/memory_index.sqlite3").is_file()


def test_promoted_memory_reaches_the_prompt_of_a_new_thread_and_not_another_tenant(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    def sees_fact(body: dict[str, Any]) -> None:
        assert "## Relevant memory" in system_prompt(body)
        assert "Finance wants invoices as PDF" in system_prompt(body)

    def blind(body: dict[str, Any]) -> None:
        assert "Finance wants" not in json.dumps(body)

    model_server.expect(Reply("Sending it as PDF.", check=sees_fact), Reply("Which format?", check=blind))
    with running(tmp_path, workspace, model_server) as (client, runtime):
        memory = memory_of(runtime)

        async def promote() -> None:
            made = await memory.propose(MemoryBinding("acme", "alice", run_id="r0"), "Finance wants invoices as PDF")
            assert made is not None
            await memory.decide_candidate("acme", "alice", made.candidate_id, "approve", "owner")

        client.portal.call(promote)  # type: ignore[union-attr]
        route(client, runtime, RouteRequest("acme", "alice", "Send the invoices to finance", thread_id="new"))
        route(client, runtime, RouteRequest("globex", "gina", "Send the invoices to finance", thread_id="new"))


def test_a_matter_from_another_channel_is_asked_about_before_it_is_used(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    def knows_nothing_yet(body: dict[str, Any]) -> None:
        assert "Relevant memory" not in system_prompt(body)  # asked first, nothing injected

    def sees_the_summary(body: dict[str, Any]) -> None:
        assert "Earlier on slack" in system_prompt(body) and "Hamburg" in system_prompt(body)

    model_server.expect(
        Reply("Noted: Hamburg warehouse lease renewal due in May; I will track it."),
        Reply("Let me look.", check=knows_nothing_yet),
        Reply("It renews in May.", check=sees_the_summary),
    )
    with running(tmp_path, workspace, model_server) as (client, runtime):
        text = "The Hamburg warehouse lease renewal is due in May, please track it."
        route(client, runtime, RouteRequest("acme", "alice", text, source_id="slack:U1", thread_id="slack-c42"))
        asked = route(
            client, runtime,
            RouteRequest("acme", "alice", "Any update on the Hamburg warehouse lease?", source_id="email:dana@x",
                         thread_id="mail-7"),
        )  # fmt: skip
        done = next(e for e in asked if isinstance(e, RouteDone))
        assert done.result.output.startswith("Let me look.") and "Shall I bring" in done.result.output
        deltas = "".join(e.text for e in asked if isinstance(e, TextDelta))
        assert deltas.endswith(done.result.output.removeprefix("Let me look."))  # streamed too
        route(
            client, runtime,
            RouteRequest("acme", "alice", "Yes please.", source_id="email:dana@x", thread_id="mail-7"),
        )  # fmt: skip
        offers = memory_of(runtime).offers("acme", "alice").file.load()
        assert [o.status for o in offers] == ["accepted"]


def test_a_turn_ends_before_its_index_update_and_the_next_read_of_the_index_waits_for_it(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index learns from a finished run in the background (`learn_later`): the first turn
    returns while its index update is held, and the next turn's continuation check (a read of the
    index) waits for that update, so it still finds the matter from the other channel."""
    held, release = threading.Event(), threading.Event()
    waiting = threading.Event()
    real_index, real_indexed = MemoryService._index_run, MemoryService.indexed

    def index_run(self: MemoryService, *args: Any) -> None:
        held.set()
        assert release.wait(30), "the test never released the index update"
        real_index(self, *args)

    async def indexed(self: MemoryService) -> None:
        if self._indexing:
            waiting.set()
        await real_indexed(self)

    monkeypatch.setattr(MemoryService, "_index_run", index_run)
    monkeypatch.setattr(MemoryService, "indexed", indexed)
    model_server.expect(Reply("Noted: the Hamburg warehouse lease renews in May."), Reply("Let me look."))
    with running(tmp_path, workspace, model_server) as (client, runtime):
        router = runtime.services.router
        assert router is not None
        text = "The Hamburg warehouse lease renewal is due in May, please track it."
        later = "Any update on the Hamburg warehouse lease?"

        async def scenario() -> list[RouterEvent]:
            first = [e async for e in router.route_stream(RouteRequest("acme", "alice", text, source_id="slack:U1"))]
            assert isinstance(first[-1], RouteDone) and first[-1].result.status == "completed"
            assert not release.is_set()  # the turn ended with its index update pending
            assert await asyncio.to_thread(held.wait, 30)  # which is under way, held
            req = RouteRequest("acme", "alice", later, source_id="email:dana@x", thread_id="mail-7")
            second = asyncio.create_task(collect(router.route_stream(req)))
            assert await asyncio.to_thread(waiting.wait, 30), "the next turn did not wait for the index"
            release.set()
            return await second

        asked = client.portal.call(scenario)  # type: ignore[union-attr]
        done = asked[-1]
        assert isinstance(done, RouteDone) and "Shall I bring" in done.result.output


async def collect(events: AsyncIterator[RouterEvent]) -> list[RouterEvent]:
    return [event async for event in events]


def test_a_failed_run_leaves_no_memory(tmp_path: Path, workspace: Path, model_server: ScriptedModelServer) -> None:
    model_server.expect(Fail(500, "provider exploded"))  # one model for every tier: nothing to fall back to
    with running(tmp_path, workspace, model_server) as (client, runtime):
        events = route(client, runtime, RouteRequest("acme", "alice", "Do the thing", thread_id="t1"))
        done = events[-1]
        assert isinstance(done, RouteDone) and done.result.status == "failed"
    assert not (workspace / "tenants/acme/workers/alice/memory/episodes").exists()


def test_extraction_when_enabled_records_and_supersedes_decisions(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    def extraction(value: str, replaces: bool) -> Reply:
        item = {"kind": "decision", "key": "printing vendor", "value": value, "replaces_previous": replaces,
                "quote": value}  # fmt: skip

        def is_extraction(body: dict[str, Any]) -> None:
            assert "extract durable memory" in system_prompt(body)

        return Reply(json.dumps({"items": [item]}), check=is_extraction)

    model_server.expect(
        Reply("OK, ACME it is."),
        extraction("Use ACME for printing", False),
        Reply("Switched to Globex."),
        extraction("Use Globex for printing", True),
    )
    with running(tmp_path, workspace, model_server, GENWORKER_MEMORY_EXTRACT="1") as (client, runtime):
        memory = memory_of(runtime)  # extraction runs after the turn: waited for, so the model answers in order
        route(client, runtime, RouteRequest("acme", "alice", "Let's use ACME for printing.", thread_id="t1"))
        client.portal.call(memory.learned)  # type: ignore[union-attr]
        route(client, runtime, RouteRequest("acme", "alice", "Change of plan: Globex for printing.", thread_id="t1"))
        client.portal.call(memory.learned)  # type: ignore[union-attr]
        decisions = memory_of(runtime).statements("acme", "alice", "decision").all()
    assert [(d.value, d.status) for d in decisions] == [
        ("Use ACME for printing", "superseded"),
        ("Use Globex for printing", "active"),
    ]
    assert decisions[0].superseded_by == decisions[1].id and decisions[0].evidence.run_id is not None
