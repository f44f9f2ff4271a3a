"""Two OS processes drain one inbox (files with flock, or Redis with Lua): each item consumed exactly once."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from genworker.autonomy.inbox import FileInboxStore, InboxState, InboxStore, RedisInboxStore, new_item
from genworker.testing.processes import release, start_ready

pytestmark = pytest.mark.anyio

ITEMS = 1000

RUNNER = r"""
import asyncio, json, sys
from pathlib import Path
from genworker.autonomy.inbox import FileInboxStore, InboxAggregate, RedisInboxStore

kind, where, prefix, owner = sys.argv[1:5]

async def drain() -> list[str]:
    store = FileInboxStore(Path(where)) if kind == "file" else RedisInboxStore(where, prefix=prefix)
    inbox = InboxAggregate(store)
    consumed = []
    while batch := await inbox.claim("acme", "alice", owner, limit=5, lease_s=600):
        for item in batch:
            await inbox.consume(item, owner)
            consumed.append(item.item_id)
    if kind == "redis":
        await store.aclose()
    return consumed

print("ready", flush=True)
sys.stdin.readline()  # the start signal: both processes begin together
print(json.dumps(asyncio.run(drain())), flush=True)
"""


class Inbox:
    def __init__(self, kind: str, where: str, prefix: str, store: InboxStore) -> None:
        self.kind, self.where, self.prefix, self.store = kind, where, prefix, store


@pytest.fixture(params=["file", pytest.param("redis", marks=pytest.mark.redis)])
async def inbox(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Inbox]:
    if request.param == "file":
        root = tmp_path / "ws"
        yield Inbox("file", str(root), "", FileInboxStore(root))
        return
    url, prefix = request.getfixturevalue("redis_url"), request.getfixturevalue("redis_prefix")
    client = Redis.from_url(url)
    try:
        yield Inbox("redis", url, prefix, RedisInboxStore(client, prefix=prefix))
    finally:
        await client.aclose()


async def start_runner(inbox: Inbox, owner: str) -> asyncio.subprocess.Process:
    return await start_ready(RUNNER, inbox.kind, inbox.where, inbox.prefix, owner)


async def finish(process: asyncio.subprocess.Process) -> list[str]:
    consumed: list[str] = await release(process)
    return consumed


async def test_two_processes_drain_1000_items_each_consumed_exactly_once(inbox: Inbox) -> None:
    ids = []
    for n in range(ITEMS):
        item = new_item("acme", "alice", "webhook", "hook-1", "webhook.fact", {"n": n})
        assert await inbox.store.write(item)
        ids.append(item.item_id)
    runners = [await start_runner(inbox, owner) for owner in ("proc-a", "proc-b")]
    try:
        first, second = await asyncio.gather(*(finish(p) for p in runners))
    finally:
        for process in runners:
            if process.returncode is None:
                process.kill()
                await process.wait()
    assert Counter(first + second) == Counter(ids)  # none twice, none missing
    assert first and second, "both processes should have taken a share"
    counts = await inbox.store.counts("acme", "alice")
    assert counts == {**dict.fromkeys(InboxState, 0), InboxState.CONSUMED: ITEMS}
