"""Context spaces in the shared profile: two runtimes (two SpaceServices, each with its own Redis
client and its own workspace folder, so nothing is shared but Redis) route facts into the same
spaces on a real Redis.

Facts about one issue absorbed by both at once all land in its one space (no lost update), each
runtime's index follows what the other saved, space numbers are never given twice, a person's change
made through one is seen by the other, and a retried item is not filed twice. The files stay
untouched: nothing is written under either workspace's spaces folder.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from redis import Redis

from genworker.autonomy.inbox import InboxItem, new_item
from genworker.autonomy.spaces import (
    Absorbed,
    Candidate,
    ContextSpaceRouter,
    RedisEventLog,
    RedisSpaceStore,
    SpaceChooser,
    SpaceService,
    SpaceSettings,
)
from genworker.autonomy.spaces.paths import spaces_dir
from genworker.llm.client import LLMClient
from genworker.llm.config_source import load_model_config
from genworker.settings import load_settings
from genworker.testing import Reply, Respond, ScriptedModelServer, ToolCallReply, scripted_env

pytestmark = [pytest.mark.anyio, pytest.mark.redis]

NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
PER_RUNTIME = 12


def space_of(absorbed: Absorbed) -> str:
    return absorbed.space.space_id if isinstance(absorbed, Candidate) else absorbed.space_id


def choose(body: dict[str, Any]) -> Reply:
    """The model: a login fact goes to SPACE_1 when it is shown, anything else is NEW."""
    question = json.loads(body["messages"][1]["content"])
    shown = [s["id"] for s in question["spaces"]]
    login = "Login" in question["event"]["summary"] and "SPACE_1" in shown
    answer = {"choice": "SPACE_1" if login else "NEW", "confidence": 0.9, "reason": "by topic"}
    return Reply(tool_calls=(ToolCallReply("choose_space", answer),))


def fact(n: int, **payload: Any) -> InboxItem:
    body = {"source": "github", "repo": "acme/api", "issue": 42, "title": f"Login 500 after deploy, report {n}"}
    return new_item("acme", "alice", "webhook", "github", "github.issue_comment", body | payload)


@pytest.fixture
async def runtimes(
    tmp_path: Path, redis_url: str, redis_prefix: str, model_server: ScriptedModelServer
) -> AsyncIterator[tuple[SpaceService, SpaceService]]:
    llm = LLMClient(load_model_config(load_settings(tmp_path, scripted_env(model_server))))
    clients = [Redis.from_url(redis_url) for _ in range(2)]

    def runtime(n: int) -> SpaceService:
        client = clients[n]
        return SpaceService(
            tmp_path / f"ws{n}",
            ContextSpaceRouter(SpaceChooser(llm, timeout_s=30)),
            lambda t, w: SpaceSettings(enabled=True),
            clock=lambda: NOW,
            store=RedisSpaceStore(client, prefix=redis_prefix),
            log=RedisEventLog(client, prefix=redis_prefix),
        )

    pair = runtime(0), runtime(1)
    yield pair
    for service in pair:
        await service.stop()
    for client in clients:
        client.close()


async def test_two_runtimes_route_into_the_same_spaces_without_losing_an_update(
    runtimes: tuple[SpaceService, SpaceService], tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    a, b = runtimes
    model_server.expect(Respond(choose, text="choose_space"))
    assert space_of(await a.absorb(fact(0))) == "SPACE_1"

    async def feed(service: SpaceService, items: list[InboxItem]) -> None:
        for item in items:
            await service.absorb(item)

    items = [fact(n) for n in range(1, 2 * PER_RUNTIME + 1)]
    await asyncio.gather(feed(a, items[::2]), feed(b, items[1::2]))

    for service in (a, b):  # the same space, every fact in it, in both runtimes' views
        space = await service.get("acme", "alice", "SPACE_1")
        assert len(space.evidence) == 2 * PER_RUNTIME + 1
        (card,) = await service.cards("acme", "alice")
        assert card["space_id"] == "SPACE_1" and card["evidence_count"] == 2 * PER_RUNTIME + 1
        assert len(await service.events("acme", "alice", "SPACE_1")) == 2 * PER_RUNTIME + 1

    # a retried item finds its space in the other runtime's index, and is not filed again
    assert space_of(await b.absorb(items[0])) == "SPACE_1"
    assert len((await a.get("acme", "alice", "SPACE_1")).evidence) == 2 * PER_RUNTIME + 1

    # new spaces made at once by both get distinct numbers
    news = [fact(100 + n, issue=500 + n, title=f"Billing export {n} is empty") for n in range(6)]
    await asyncio.gather(feed(a, news[::2]), feed(b, news[1::2]))
    ids = {c["space_id"] for c in await a.cards("acme", "alice")}
    assert ids == {f"SPACE_{n}" for n in range(1, 8)}

    # a fact with no anchor: runtime b's model is shown the space runtime a made, and files it there
    loose = new_item("acme", "alice", "email", "mailbox", "email.received", {"subject": "Login 500 after deploy"})
    assert space_of(await b.absorb(loose)) == "SPACE_1"

    # a person's pin through one runtime is what the other reads
    await b.pin("acme", "alice", "SPACE_1", True)
    assert (await a.get("acme", "alice", "SPACE_1")).manual_pin is True
    pinned = {c["space_id"]: c["is_pinned"] for c in await a.cards("acme", "alice")}
    assert pinned["SPACE_1"] is True
    assert (await a.count("acme", "alice"))["active"] == 7

    for n in range(2):  # nothing went to the files
        assert not spaces_dir(tmp_path / f"ws{n}", "acme", "alice").exists()


async def test_an_index_follows_a_redis_that_lost_its_data(
    runtimes: tuple[SpaceService, SpaceService], redis_url: str, redis_prefix: str, model_server: ScriptedModelServer
) -> None:
    a, b = runtimes
    model_server.expect(Respond(choose, text="choose_space"))
    for n in range(3):
        await a.absorb(fact(n, issue=700 + n, title=f"Billing export {n} is empty"))
    assert len(await a.cards("acme", "alice")) == 3
    with Redis.from_url(redis_url) as client:  # a restart without persistence
        client.delete(*client.scan_iter(match=f"{redis_prefix}:*"))
    assert space_of(await b.absorb(fact(9))) == "SPACE_1"
    (card,) = await a.cards("acme", "alice")  # a's index is rebuilt: no space that is gone
    assert card["space_id"] == "SPACE_1" and card["title"].startswith("Login 500")
