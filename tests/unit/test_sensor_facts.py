"""FactEmitter: filter before routing, deterministic dedupe keys, and goal proposals (auto_create_goal)."""

from __future__ import annotations

from typing import Any

import pytest

from genworker.autonomy.sensing.facts import GOAL_PROPOSED, Fact, FactEmitter
from genworker.autonomy.sensing.testing import MemoryInboxWriter
from genworker.workspace.models.persona import SensorConfig

pytestmark = pytest.mark.anyio


def emitter(writer: MemoryInboxWriter, **fields: Any) -> FactEmitter:
    config = SensorConfig.model_validate({"source_type": "workspace_file", "sensor_id": "docs", **fields})
    return FactEmitter("acme", "w", config, writer)


async def test_a_fact_becomes_a_routed_item_with_a_deterministic_dedupe_key() -> None:
    writer = MemoryInboxWriter()
    rules = [{"field": "path", "pattern": "reports/", "match": "prefix", "route": "task"}]
    emit = emitter(writer, routing_rules=rules, fallback_route="summary")
    first = await emit.emit(Fact("file.created", {"path": "reports/q1.csv"}, "7:created:reports/q1.csv:1:2"))
    assert first.written and first.item is not None
    item = first.item
    assert (item.tenant_id, item.worker_id, item.source_type, item.source_id) == ("acme", "w", "workspace_file", "docs")
    assert item.route == "task" and item.event_type == "file.created"
    assert item.dedupe_key == "workspace_file:docs:7:created:reports/q1.csv:1:2"
    again = await emit.emit(Fact("file.created", {"path": "reports/q1.csv"}, "7:created:reports/q1.csv:1:2"))
    assert not again.written and again.items_written() == []
    assert len(writer.items) == 1 and len(writer.dropped) == 1
    other = await emit.emit(Fact("file.created", {"path": "notes.md"}, "7:created:notes.md:1:2"))
    assert other.item is not None and other.item.route == "summary"


async def test_the_filter_drops_facts_before_routing() -> None:
    writer = MemoryInboxWriter()
    emit = emitter(writer, filter={"exclude": ["*.tmp"]})
    dropped = await emit.emit(Fact("file.created", {"path": "x.tmp"}, "k"))
    assert dropped.item is None and writer.items == []


@pytest.mark.parametrize("require_approval", [True, False])
async def test_auto_create_goal_writes_a_proposal(require_approval: bool) -> None:
    writer = MemoryInboxWriter()
    rules = [{"field": "path", "pattern": "goals/", "match": "prefix", "route": "goal"}]
    emit = emitter(writer, routing_rules=rules, auto_create_goal=True, require_approval=require_approval)
    result = await emit.emit(Fact("file.created", {"path": "goals/launch.md"}, "k1"))
    assert [i.event_type for i in result.items_written()] == ["file.created", GOAL_PROPOSED]
    proposal = writer.of_type(GOAL_PROPOSED)[0]
    assert proposal.metadata["require_approval"] is require_approval
    assert proposal.payload["fact_dedupe_key"] == "workspace_file:docs:k1"
    assert proposal.payload["title"] == "file.created: goals/launch.md"
    assert proposal.route == "goal"


async def test_a_goal_field_makes_a_fact_goal_worthy_and_titles_the_proposal() -> None:
    writer = MemoryInboxWriter()
    emit = emitter(writer, auto_create_goal=True)
    await emit.emit(Fact("file.created", {"path": "a.md", "goal": "Ship v2 by March"}, "k"))
    await emit.emit(Fact("file.created", {"path": "b.md"}, "k2"))  # not goal-worthy
    assert [p.payload["title"] for p in writer.of_type(GOAL_PROPOSED)] == ["Ship v2 by March"]


async def test_without_auto_create_goal_there_is_no_proposal() -> None:
    writer = MemoryInboxWriter()
    await emitter(writer).emit(Fact("file.created", {"path": "a.md", "goal": "x"}, "k"))
    assert writer.of_type(GOAL_PROPOSED) == []


async def test_a_crash_between_fact_and_proposal_is_repaired_on_retry() -> None:
    writer = MemoryInboxWriter()
    emit = emitter(writer, auto_create_goal=True)
    fact = Fact("file.created", {"path": "a.md", "goal": "x"}, "k")
    writer.fail_on = lambda item: item.event_type == GOAL_PROPOSED
    with pytest.raises(OSError):
        await emit.emit(fact)
    assert [i.event_type for i in writer.items] == ["file.created"]
    writer.fail_on = None
    retry = await emit.emit(fact)
    assert not retry.written and retry.proposal_written  # the fact is a duplicate, the proposal is not
    again = await emit.emit(fact)
    assert not again.written and not again.proposal_written
