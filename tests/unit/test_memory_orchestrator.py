"""MemoryOrchestrator: providers asked concurrently, each isolated and under a timeout; merged
into layers run -> duty -> conversation -> worker -> tenant with per-layer budgets; fail open."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest

from genworker.memory.models import LayerBudget, MemoryBinding, MemoryHit, MemoryQuery, Scope, ScopeKind
from genworker.memory.orchestrator import MemoryOrchestrator

pytestmark = pytest.mark.anyio

BINDING = MemoryBinding("acme", "alice", run_id="r1", duty_id="d1", thread_id="t1")
NOW = datetime(2026, 5, 1, tzinfo=UTC)


def hit(ident: str, scope: str, score: float = 1.0, text: str = "text", **kw: object) -> MemoryHit:
    return MemoryHit(ident, Scope.parse(scope), str(kw.pop("kind", "episode")), "", text, score, NOW, **kw)  # type: ignore[arg-type]


class Fixed:
    def __init__(self, name: str, hits: Sequence[MemoryHit]) -> None:
        self.name, self.hits = name, hits

    async def recall(self, query: MemoryQuery) -> Sequence[MemoryHit]:
        return self.hits


class Blocking:
    """A provider that answers only when released: stands in for a remote index that hangs."""

    name = "remote"

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.cancelled = asyncio.Event()

    async def recall(self, query: MemoryQuery) -> Sequence[MemoryHit]:
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return [hit("late", "worker:alice")]


class Broken:
    name = "broken"

    async def recall(self, query: MemoryQuery) -> Sequence[MemoryHit]:
        raise ConnectionError("index server refused the connection")


async def test_a_hanging_provider_fails_open_within_its_timeout(caplog: pytest.LogCaptureFixture) -> None:
    slow = Blocking()
    orchestrator = MemoryOrchestrator([slow, Fixed("local", [hit("a", "worker:alice")])], timeout_s=0.05)
    with caplog.at_level(logging.WARNING):
        result = await asyncio.wait_for(orchestrator.query(MemoryQuery("x", BINDING)), timeout=5)
    assert [h.episode_id for h in result.hits] == ["a"]
    assert result.status == "degraded"
    assert [(i.provider, i.reason) for i in result.issues] == [("remote", "timeout")]
    assert slow.cancelled.is_set()
    assert "timed out" in caplog.text


async def test_a_failing_provider_is_isolated() -> None:
    orchestrator = MemoryOrchestrator([Broken(), Fixed("local", [hit("a", "worker:alice")])])
    result = await orchestrator.query(MemoryQuery("x", BINDING))
    assert [h.episode_id for h in result.hits] == ["a"]
    assert result.issues[0].reason == "error"
    assert "refused the connection" in result.issues[0].detail


async def test_all_providers_down_gives_empty_memory_not_an_error() -> None:
    result = await MemoryOrchestrator([Broken()]).query(MemoryQuery("x", BINDING))
    assert (result.hits, result.status, result.items()) == ((), "degraded", ())


async def test_layers_come_in_binding_order_each_within_its_budget() -> None:
    hits = [
        hit("t1", "tenant:acme", 9),
        hit("w1", "worker:alice", 5),
        hit("w2", "worker:alice", 7),
        hit("w3", "worker:alice", 6),
        hit("c1", "conversation:t1", 1),
        hit("r1", "run:r1", 0.1, text="x" * 50),
    ]
    budgets = {kind: LayerBudget(2, 1000) for kind in ScopeKind} | {ScopeKind.RUN: LayerBudget(1, 20)}
    result = await MemoryOrchestrator([Fixed("local", hits)], budgets=budgets).query(MemoryQuery("x", BINDING))
    assert [h.episode_id for h in result.hits] == ["r1", "c1", "w2", "w3", "t1"]
    assert result.omitted == 1
    assert len(result.hits[0].text) == 20 and result.hits[0].text.endswith("…")
    assert result.layers == {"run": 1, "conversation": 1, "worker": 2, "tenant": 1}


async def test_hits_outside_the_binding_are_dropped() -> None:
    foreign = [hit("x", "worker:bob"), hit("y", "tenant:other"), hit("z", "conversation:t2"), hit("ok", "duty:d1")]
    result = await MemoryOrchestrator([Fixed("remote", foreign)]).query(MemoryQuery("x", BINDING))
    assert [h.episode_id for h in result.hits] == ["ok"]


async def test_the_same_hit_from_two_providers_is_kept_once_with_the_better_score() -> None:
    a = Fixed("a", [hit("e1", "worker:alice", 1.0)])
    b = Fixed("b", [hit("e1", "worker:alice", 3.0)])
    result = await MemoryOrchestrator([a, b]).query(MemoryQuery("x", BINDING))
    assert [(h.episode_id, h.score) for h in result.hits] == [("e1", 3.0)]


async def test_disagreeing_statements_across_layers_are_flagged_not_overridden() -> None:
    hits = [
        hit("p1", "worker:alice", text="reports in English", kind="preference", metadata={"key": "language"}),
        hit("p2", "conversation:t1", text="reports in German", kind="preference", metadata={"key": "language"}),
        hit("p3", "worker:alice", text="Mondays", kind="preference", metadata={"key": "meeting day"}),
    ]
    result = await MemoryOrchestrator([Fixed("statements", hits)]).query(MemoryQuery("x", BINDING))
    flagged = {h.episode_id: h.conflict for h in result.hits}
    assert flagged == {"p1": True, "p2": True, "p3": False}
    texts = [i.text for i in result.items()]
    assert "[conversation, conflicting] reports in German" in texts
    assert "[worker] Mondays" in texts
