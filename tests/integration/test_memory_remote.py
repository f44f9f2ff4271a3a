"""A remote index behind the MemoryProvider interface, over real HTTP.

The OpenViking server itself cannot run here (it needs remote embedding and VLM models), so a
small hand-written app plays its documented `POST /api/v1/search/find` contract; it is a fake
and says so. The provider and the orchestrator around it are the real code: scope prefixes,
tenant isolation, a server that widens scope, and a server that hangs (fail open in budget)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request

from genworker.memory import MemoryBinding, MemoryConfig, MemoryQuery, MemoryService
from genworker.memory.openviking import OpenVikingProvider
from genworker.testing.live_server import LiveServer

pytestmark = pytest.mark.anyio


class FakeViking:
    def __init__(self) -> None:
        self.docs: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self.hang = False
        self.release = threading.Event()
        self.app = FastAPI()
        self.app.post("/api/v1/search/find")(self.find)

    async def find(self, request: Request) -> dict[str, Any]:
        body = await request.json()
        self.requests.append({"body": body, "key": request.headers.get("x-api-key")})
        if self.hang:
            await asyncio.to_thread(self.release.wait, 10)
        words = set(body["query"].lower().split())
        prefix = body.get("target_uri", "")
        found = [
            {"context_type": "resource", "uri": d["uri"], "level": 2, "score": 0.8, "abstract": d["text"]}
            for d in self.docs
            if (d["uri"].startswith(prefix) or d.get("leak")) and words & set(d["text"].lower().split())
        ]
        return {"status": "ok", "result": {"memories": [], "resources": found, "skills": [], "total": len(found)}}


@pytest.fixture
def viking() -> Iterator[tuple[FakeViking, str]]:
    fake = FakeViking()
    with LiveServer(fake.app) as server:
        yield fake, server.url
        fake.release.set()


def service(tmp_path: Path, url: str, timeout_s: float = 5.0) -> MemoryService:
    (tmp_path / "tenants" / "acme" / "workers" / "alice").mkdir(parents=True, exist_ok=True)
    return MemoryService(tmp_path, MemoryConfig(timeout_s=timeout_s), providers=[OpenVikingProvider(url, "k1")])


async def test_remote_hits_arrive_in_their_scopes_and_never_across_tenants(
    tmp_path: Path, viking: tuple[FakeViking, str]
) -> None:
    fake, url = viking
    fake.docs = [
        {"uri": "viking://resources/genworker/acme/alice/worker/alice/e1.md", "text": "Budget review moved to Q3"},
        {"uri": "viking://resources/genworker/acme/_tenant/e2.md", "text": "ACME budget owner is Dana"},
        {"uri": "viking://resources/genworker/globex/gina/worker/gina/e3.md", "text": "Globex budget secret"},
        {"uri": "viking://resources/genworker/globex/_tenant/e4.md", "text": "budget leak", "leak": True},
    ]
    svc = service(tmp_path, url)
    try:
        result = await svc.recall(MemoryQuery("budget", MemoryBinding("acme", "alice", run_id="r1")))
    finally:
        svc.close()
    assert [(str(h.scope), h.text) for h in result.hits] == [
        ("worker:alice", "Budget review moved to Q3"),
        ("tenant:acme", "ACME budget owner is Dana"),
    ]
    prefixes = {r["body"]["target_uri"] for r in fake.requests}
    assert all(p.startswith("viking://resources/genworker/acme/") for p in prefixes)
    assert {r["key"] for r in fake.requests} == {"k1"}


async def test_a_hanging_remote_index_fails_open_within_the_timeout(
    tmp_path: Path, viking: tuple[FakeViking, str]
) -> None:
    fake, url = viking
    fake.hang = True
    svc = service(tmp_path, url, timeout_s=0.2)
    try:
        local = svc.worker("acme", "alice")
        from datetime import UTC, datetime

        from genworker.memory.models import Episode, Provenance, new_episode_id

        local.write(
            Episode(
                episode_id=new_episode_id(), tenant_id="acme", worker_id="alice", scope="worker:alice",
                created_at=datetime.now(UTC), provenance=Provenance(), body="Budget is frozen until June.",
            )
        )  # fmt: skip
        result = await asyncio.wait_for(
            svc.recall(MemoryQuery("budget", MemoryBinding("acme", "alice", run_id="r1"))), timeout=5
        )
    finally:
        fake.release.set()
        svc.close()
    assert result.status == "degraded"
    assert [(i.provider, i.reason) for i in result.issues] == [("openviking", "timeout")]
    assert [h.text for h in result.hits] == ["Budget is frozen until June."]  # the local index still answered
