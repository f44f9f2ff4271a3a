"""Two OS processes spend one worker's interruption budget at once (files with flock, or Redis with
Lua): together they never take more than the day's cap, and a retried item counts once."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis

from genworker.autonomy.briefs import BriefStore, FileBriefStore, RedisBriefStore
from genworker.autonomy.briefs.redis_store import BUDGET_TTL_S
from genworker.testing.processes import release, start_ready

pytestmark = pytest.mark.anyio

LIMIT = 10
TRIES = 60  # per process

RUNNER = r"""
import json, sys
from pathlib import Path
from redis import Redis
from genworker.autonomy.briefs import FileBriefStore, RedisBriefStore

kind, where, prefix, owner, limit, tries = sys.argv[1:7]
store = FileBriefStore(Path(where)) if kind == "file" else RedisBriefStore(Redis.from_url(where), prefix=prefix)
print("ready", flush=True)
sys.stdin.readline()  # the start signal: both processes begin together
taken = []
for n in range(int(tries)):
    item = f"{owner}_{n}"
    ok, used = store.take_interruption("acme", "alice", "2026-03-02", int(limit), item)
    if ok:
        taken.append(item)
print(json.dumps(taken), flush=True)
"""


class Backend:
    def __init__(self, kind: str, where: str, prefix: str, store: BriefStore) -> None:
        self.kind, self.where, self.prefix, self.store = kind, where, prefix, store


@pytest.fixture(params=["file", pytest.param("redis", marks=pytest.mark.redis)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "file":
        root = tmp_path / "ws"
        yield Backend("file", str(root), "", FileBriefStore(root))
        return
    url, prefix = request.getfixturevalue("redis_url"), request.getfixturevalue("redis_prefix")
    with Redis.from_url(url) as client:
        yield Backend("redis", url, prefix, RedisBriefStore(client, prefix=prefix))


async def start_runner(backend: Backend, owner: str) -> asyncio.subprocess.Process:
    return await start_ready(RUNNER, backend.kind, backend.where, backend.prefix, owner, str(LIMIT), str(TRIES))


async def finish(process: asyncio.subprocess.Process) -> list[str]:
    taken: list[str] = await release(process)
    return taken


async def test_two_processes_never_exceed_the_days_budget(backend: Backend) -> None:
    runners = [await start_runner(backend, owner) for owner in ("proc-a", "proc-b")]
    try:
        first, second = await asyncio.gather(*(finish(p) for p in runners))
    finally:
        for process in runners:
            if process.returncode is None:
                process.kill()
                await process.wait()
    assert len(first) + len(second) == LIMIT
    day = backend.store.budget("acme", "alice", "2026-03-02")
    assert day.used == LIMIT and sorted(day.interruptions) == sorted(first + second)
    # P0 still interrupts past the cap, and counts; a retry of a counted item is not counted again
    store, day_id, counted = backend.store, "2026-03-02", (first + second)[0]
    assert store.take_interruption("acme", "alice", day_id, LIMIT, "outage", force=True) == (True, LIMIT + 1)
    assert store.take_interruption("acme", "alice", day_id, LIMIT, counted) == (True, LIMIT + 1)
    assert store.take_interruption("acme", "alice", day_id, LIMIT, "one_more") == (False, LIMIT + 1)
    assert backend.store.budget("acme", "alice", "2026-03-03").used == 0
    if isinstance(store, RedisBriefStore):  # a day's counter expires on its own
        assert 0 < store._redis.ttl(store._budget_key("acme", "alice", day_id)) <= BUDGET_TTL_S
