"""The dashboard aggregator: blocks run concurrently, each under its own timeout; a block that raises,
hangs or has no service is reported alone; a shared load runs once per request. And suggestions
decided from a dashboard session through the runtime's CommandBackend (the IM commands' backend)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from fastapi.testclient import TestClient

from genworker.api.app import create_app
from genworker.auth import ApiKeyStore, Principal
from genworker.autonomy.suggestions.store import SuggestionStore
from genworker.dashboard import Block, BlockContext, BlockUnavailable, DashboardAggregator, default_aggregator
from genworker.runtime.composition import Runtime, build_runtime
from genworker.settings import load_settings
from genworker.testing import ScriptedModelServer, scripted_env
from genworker.workspace.registry import WorkspaceRegistry


@pytest.fixture
def context(small_workspace: Callable[..., Path]) -> Callable[[], BlockContext]:
    registry = WorkspaceRegistry(small_workspace({"acme": ["alice"]}))
    registry.load_all()
    worker = registry.worker("acme", "alice")
    assert worker is not None
    # these blocks read no service (an error names paths relative to the workspace); the real
    # runtime is exercised in test_dashboard_api.py
    runtime = cast(Runtime, SimpleNamespace(registry=registry))
    return lambda: BlockContext(runtime, Principal("acme", "k1"), worker)


def test_one_failing_or_hanging_block_does_not_fail_the_others(context: Callable[[], BlockContext]) -> None:
    started: list[str] = []
    release = asyncio.Event()

    async def ok(ctx: BlockContext) -> dict[str, str]:
        started.append("ok")
        return {"worker": ctx.worker_id}

    async def boom(ctx: BlockContext) -> None:
        started.append("boom")
        raise RuntimeError("the store is on fire")

    async def hang(ctx: BlockContext) -> None:
        started.append("hang")
        await release.wait()  # never set: only the block's timeout ends it

    async def absent(ctx: BlockContext) -> None:
        raise BlockUnavailable("not built yet")

    aggregator = DashboardAggregator(
        [Block("ok", ok), Block("boom", boom), Block("hang", hang, timeout_s=0.05), Block("absent", absent)],
        timeout_s=30,
    )
    body = asyncio.run(aggregator.collect(context()))
    blocks = body["blocks"]
    assert list(blocks) == ["ok", "boom", "hang", "absent"]
    assert blocks["ok"]["status"] == "ok" and blocks["ok"]["data"] == {"worker": "alice"}
    assert blocks["boom"] == {"status": "error", "reason": "RuntimeError: the store is on fire"}
    assert blocks["hang"] == {"status": "timeout", "reason": "no answer within 0.05 s"}
    assert blocks["absent"] == {"status": "unavailable", "reason": "not built yet"}
    assert sorted(started) == ["boom", "hang", "ok"]
    assert body["tenant_id"] == "acme" and body["worker_id"] == "alice"


def test_blocks_run_concurrently_and_share_one_load(context: Callable[[], BlockContext]) -> None:
    loads = 0
    both_waiting = asyncio.Barrier(2)

    async def load() -> list[int]:
        nonlocal loads
        loads += 1
        return [1, 2, 3]

    def reader(factor: int) -> Callable[[BlockContext], Any]:
        async def fetch(ctx: BlockContext) -> int:
            async with asyncio.timeout(5):
                await both_waiting.wait()  # only returns when both blocks run at the same time
            return factor * sum(await ctx.shared("numbers", load))

        return fetch

    aggregator = DashboardAggregator([Block("one", reader(1)), Block("ten", reader(10))])
    blocks = asyncio.run(aggregator.collect(context()))["blocks"]
    assert blocks["one"]["data"] == 6 and blocks["ten"]["data"] == 60
    assert loads == 1


def test_a_failed_shared_load_fails_each_reader_and_nothing_else(context: Callable[[], BlockContext]) -> None:
    async def load() -> None:
        raise OSError("disk gone")

    async def reader(ctx: BlockContext) -> Any:
        return await ctx.shared("runs", load)

    async def other(ctx: BlockContext) -> str:
        return "fine"

    aggregator = DashboardAggregator([Block("a", reader), Block("b", reader), Block("c", other)])
    blocks = asyncio.run(aggregator.collect(context()))["blocks"]
    assert blocks["a"] == blocks["b"] == {"status": "error", "reason": "OSError: disk gone"}
    assert blocks["c"]["data"] == "fine"


def test_block_names_are_unique_and_a_block_can_be_rewired() -> None:
    async def fetch(ctx: BlockContext) -> None:
        return None

    with pytest.raises(ValueError, match="unique"):
        DashboardAggregator([Block("a", fetch), Block("a", fetch)])
    default = default_aggregator()
    rewired = default.replace("briefs", fetch)
    assert [b.name for b in rewired.blocks] == [b.name for b in default.blocks]
    assert next(b for b in rewired.blocks if b.name == "briefs").fetch is fetch
    with pytest.raises(KeyError):
        default.replace("nope", fetch)


def test_the_service_blocks_are_unavailable_on_a_runtime_that_has_not_started(
    tmp_path: Path, small_workspace: Callable[..., Path]
) -> None:
    workspace = small_workspace({"acme": ["alice"]})
    (tmp_path / "configs").mkdir()
    settings = load_settings(tmp_path / "configs", {"GENWORKER_HOT_RELOAD": "false"}, workspace=workspace)
    built = build_runtime(settings)  # loaded, never started: no services yet
    worker = built.registry.worker("acme", "alice")
    assert worker is not None
    ctx = BlockContext(built, Principal("acme", "k1"), worker)
    blocks = asyncio.run(default_aggregator().collect(ctx))["blocks"]
    for name in ("tasks", "runs", "pending", "activity", "decisions", "outbox", "briefs", "channels"):
        assert blocks[name]["status"] == "unavailable", name
        assert blocks[name]["reason"] == "the runtime has not started (or has stopped)", name
    assert blocks["profile"]["status"] == "ok"  # what the workspace says needs no service


def test_suggestions_are_listed_and_decided_from_a_dashboard_session(
    tmp_path: Path, small_workspace: Callable[..., Path], model_server: ScriptedModelServer
) -> None:
    workspace = small_workspace({"acme": ["alice"], "globex": ["gina"]})
    key = ApiKeyStore(workspace).create("acme")[1]
    store = SuggestionStore(workspace)
    made = store.create("acme", "alice", "rule", "Always cite sources", "seen 3 times", "cite", "rule_crystallizer")
    assert made is not None
    (tmp_path / "configs").mkdir()
    env = scripted_env(model_server)
    with TestClient(create_app(load_settings(tmp_path / "configs", env, workspace=workspace))) as client:
        assert client.post("/dashboard/login", json={"api_key": key}).status_code == 200
        csrf = client.get("/dashboard/session").json()["csrf_token"]
        block = client.get("/api/v1/workers/alice/dashboard").json()["blocks"]["suggestions"]
        assert block["status"] == "ok"
        assert [(s["id"], s["title"]) for s in block["data"]["suggestions"]] == [(made.suggestion_id, made.title)]

        path = f"/api/v1/workers/alice/dashboard/suggestions/{made.suggestion_id}/reject"
        assert client.post(path).status_code == 403  # no CSRF header
        rejected = client.post(path, headers={"X-CSRF-Token": csrf})
        assert rejected.status_code == 200 and rejected.json()["suggestion"]["status"] == "rejected"
        assert client.post(path, headers={"X-CSRF-Token": csrf}).status_code == 409
        unknown = "/api/v1/workers/alice/dashboard/suggestions/sg_0000000000000000/approve"
        assert client.post(unknown, headers={"X-CSRF-Token": csrf}).status_code == 404
        foreign = f"/api/v1/workers/globex%2Fgina/dashboard/suggestions/{made.suggestion_id}/approve"
        assert client.post(foreign, headers={"X-CSRF-Token": csrf}).status_code == 404
        block = client.get("/api/v1/workers/alice/dashboard").json()["blocks"]["suggestions"]
        assert block["data"]["suggestions"] == []
