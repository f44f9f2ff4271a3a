"""Anti-fragmentation after creation: a young space that duplicates an older one is merged into it
(recorded on both, listed in the brief as done, undone in one step), with real parts: files in a tmp
workspace, the SQLite index, LiteLLM over HTTP to the scripted model.

The model answers NEW for a fact about an incident that already has a space (as when that space was
not among the twelve it was shown, or another runtime opened it a moment before): the new space is
merged into the older one at once; a person's unmerge takes it back out and the pair is not merged
again; a young space about something else is left alone.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from genworker.autonomy.inbox import InboxItem, new_item
from genworker.autonomy.spaces import (
    Absorbed,
    Candidate,
    ContextSpaceRouter,
    SpaceChooser,
    SpaceService,
    SpaceSettings,
    pending_spaces,
)
from genworker.llm.client import LLMClient
from genworker.llm.config_source import load_model_config
from genworker.settings import load_settings
from genworker.testing import Reply, Respond, ScriptedModelServer, ToolCallReply, scripted_env

pytestmark = pytest.mark.anyio

NOW = datetime(2026, 3, 2, 14, 0, tzinfo=UTC)


def space_of(absorbed: Absorbed) -> str:
    return absorbed.space.space_id if isinstance(absorbed, Candidate) else absorbed.space_id


def new_every_time(body: dict[str, Any]) -> Reply:
    """A model that never sees the point: every fact is NEW, confidently."""
    assert json.loads(body["messages"][1]["content"])["spaces"]
    answer = {"choice": "NEW", "confidence": 0.9, "reason": "none of these"}
    return Reply(tool_calls=(ToolCallReply("choose_space", answer),))


def email(subject: str, sender: str = "support") -> InboxItem:
    return new_item("acme", "alice", "email", "mailbox", "email.received", {"subject": subject, "from": sender})


@pytest.fixture
async def service(
    small_workspace: Callable[..., Path], tmp_path: Path, model_server: ScriptedModelServer
) -> AsyncIterator[SpaceService]:
    model_server.expect(Respond(new_every_time, text="choose_space"))
    llm = LLMClient(load_model_config(load_settings(tmp_path, scripted_env(model_server))))
    clock = [NOW]
    made = SpaceService(
        small_workspace({"acme": ["alice"]}),
        ContextSpaceRouter(SpaceChooser(llm, timeout_s=30)),
        lambda t, w: SpaceSettings(enabled=True),
        clock=lambda: clock[0],
        durable=False,
    )
    yield made
    await made.stop()


async def test_a_young_duplicate_is_merged_recorded_and_can_be_taken_back(service: SpaceService) -> None:
    first = await service.absorb(email("Payments API timeouts on checkout since the 14:00 deploy", "dana"))
    assert space_of(first) == "SPACE_1"
    # the model says NEW: SPACE_2 is made, and merged into SPACE_1 at once
    dup = await service.absorb(email("Payments API timeouts on checkout after the deploy", "dana"))
    assert space_of(dup) == "SPACE_1"
    older, young = [await service.get("acme", "alice", i) for i in ("SPACE_1", "SPACE_2")]
    assert young.review == "merged" and young.merged_into == "SPACE_1" and len(young.evidence) == 1
    merge = young.changes[-1]
    assert merge.kind == "merged" and merge.other_space == "SPACE_1" and (merge.similarity or 0) >= 0.78
    assert len(older.evidence) == 2 and older.changes[-1].kind == "absorbed"
    assert "automatically" in older.changes[-1].detail
    assert {c["space_id"] for c in await service.cards("acme", "alice")} == {"SPACE_1", "SPACE_2"}
    assert (await service.count("acme", "alice"))["merged"] == 1

    # the brief says it was done, with the way back
    (item,) = [
        i for i in await pending_spaces(service)("acme", "alice", NOW - timedelta(hours=1)) if i.section == "done"
    ]
    assert item.ref == "SPACE_2" and "SPACE_1" in item.title
    assert item.reversibility == "reversible" and item.options[0].command == (
        "POST /api/v1/workers/alice/spaces/SPACE_2/unmerge"
    )

    # a person takes it back out: two spaces again, and the pair is not merged a second time
    back, target = await service.unmerge("acme", "alice", "SPACE_2")
    assert back.review == "confirmed" and back.merged_into is None and len(back.evidence) == 1
    assert [e.event_id for e in target.evidence] == [e.event_id for e in older.evidence[:1]]
    again = await service.absorb(email("Payments API timeouts on checkout after the deploy, still", "dana"))
    assert space_of(again) in ("SPACE_2", "SPACE_3")
    assert (await service.get("acme", "alice", "SPACE_2")).review == "confirmed"


async def test_a_young_space_about_something_else_is_left_alone(service: SpaceService) -> None:
    await service.absorb(email("Payments API timeouts on checkout since the 14:00 deploy", "dana"))
    other = await service.absorb(email("Quarterly offsite venue shortlist for May", "erin"))
    assert space_of(other) == "SPACE_2"
    assert (await service.get("acme", "alice", "SPACE_2")).review == "confirmed"
