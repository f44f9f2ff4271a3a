"""Context spaces over a scripted stream, with real parts: files in a tmp workspace, the SQLite index,
LiteLLM over HTTP to the scripted model answering as a perfect oracle (genworker.testing.fact_stream).

200 facts about ten topics from six sources, among 60 unrelated spaces: the facts land in their
topic's space (B-cubed precision and recall against the labels); the model is never shown more than
12 spaces, and is shown 12 when the crowd is there; the first fact about the archived warehouse
topic brings its space back (recorded, revertible); low-confidence and unusable routes become NEW
spaces listed in the brief, and a person's re-filing puts them where they belong.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from genworker.autonomy.briefs import BriefService, FileBriefStore
from genworker.autonomy.spaces import (
    Candidate,
    ContextSpaceRouter,
    SpaceChooser,
    SpaceService,
    SpaceSettings,
    SpaceState,
    pending_spaces,
)
from genworker.llm.client import LLMClient
from genworker.llm.config_source import load_model_config
from genworker.settings import load_settings
from genworker.testing import Respond, ScriptedModelServer, scripted_env
from genworker.testing.fact_stream import Oracle, bcubed, scripted_stream, seed_spaces

pytestmark = pytest.mark.anyio

START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


async def test_two_hundred_facts_land_in_their_spaces(
    small_workspace: Callable[..., Path], tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    root = small_workspace({"acme": ["alice"]})
    stream = scripted_stream(start=START)
    assert len(stream.facts) == 200 and len(stream.sources) >= 4 and len({f.label for f in stream.facts}) == 10
    oracle = Oracle(stream)
    model_server.expect(Respond(oracle, text="choose_space"))
    now = [START]
    llm = LLMClient(load_model_config(load_settings(tmp_path, scripted_env(model_server))))
    service = SpaceService(
        root,
        ContextSpaceRouter(SpaceChooser(llm, timeout_s=30)),
        lambda t, w: SpaceSettings(enabled=True),
        clock=lambda: now[0],
        durable=False,  # routing is what is tested here, not fsync
    )
    landed: dict[int, str] = {}
    for fact in stream.facts:
        if fact.at >= stream.jump and not landed.get(-1):
            now[0] = stream.jump
            assert seed_spaces(service, 60, stream.jump) >= 60  # the crowd, after the warehouse went quiet
            landed[-1] = "seeded"
        now[0] = fact.at
        absorbed = await service.absorb(fact.item)
        space_id = absorbed.space.space_id if isinstance(absorbed, Candidate) else absorbed.space_id
        landed[fact.n] = space_id
        oracle.learned(space_id, fact.label)
    await service.stop()

    # the bounded workbench: never more than 12 shown, and 12 once the crowd is there
    assert oracle.shown and max(oracle.shown) == 12
    garbled = [f for f in stream.facts if f.garbled]
    assert [oracle.asked[f.summary] for f in garbled] == [2] * len(garbled)  # asked again once, then NEW

    # the archived warehouse space came back for the first late fact about it
    revival = next(f for f in stream.facts if f.resurrects)
    warehouse = landed[0]
    assert landed[revival.n] == warehouse
    space = await service.get("acme", "alice", warehouse)
    change = next(c for c in space.changes if c.kind == "resurrected")
    assert change.from_state is SpaceState.ARCHIVED and change.similarity is not None and change.similarity >= 0.78
    assert space.state is SpaceState.ACTIVE

    # low-confidence and unusable routes: NEW spaces in the brief, for a person to confirm or re-file
    flagged = [f for f in stream.facts if f.ambiguous or f.garbled]
    pending = await service.cards("acme", "alice", review="pending")
    assert sorted(c["space_id"] for c in pending) == sorted({landed[f.n] for f in flagged})
    briefs = BriefService(FileBriefStore(root), done=pending_spaces(service), clock=lambda: now[0])
    brief = await briefs.generate("acme", "alice", deliver=False)
    listed = brief.sections["spaces"]
    assert {i.ref for i in listed} == {c["space_id"] for c in pending}
    assert f"New context spaces to confirm or re-file ({len(pending)})" in brief.text
    assert all(any("/confirm" in (o.command or "") for o in i.options) for i in listed)

    pairs = [(f.label, landed[f.n]) for f in stream.facts]
    precision, recall = bcubed(pairs)
    print(f"\ncontext spaces, 200 facts: B-cubed precision {precision:.3f}, recall {recall:.3f} before review")
    assert precision >= 0.97 and recall >= 0.9

    # a person confirms a pending space that became its topic's home, and re-files the others into
    # their topic's space: recall comes back
    home = {
        label: Counter(landed[f.n] for f in stream.facts if f.label == label).most_common(1)[0][0]
        for label in {f.label for f in stream.facts}
    }
    for space_id, label in {landed[f.n]: f.label for f in flagged}.items():
        if home[label] == space_id:
            await service.confirm("acme", "alice", space_id)
            continue
        await service.refile("acme", "alice", space_id, home[label])
        landed.update({f.n: home[label] for f in stream.facts if landed[f.n] == space_id})
    precision, recall = bcubed((f.label, landed[f.n]) for f in stream.facts)
    print(f"context spaces, after re-filing: precision {precision:.3f}, recall {recall:.3f}")
    assert precision >= 0.97 and recall >= 0.97
    assert await service.cards("acme", "alice", review="pending") == []

    # the resurrection is reversible: the fact gets its own space (the warehouse facts that came
    # since keep theirs active)
    old, own = await service.revert("acme", "alice", warehouse, change.event_id or "")
    assert old.state is SpaceState.ACTIVE and not old.has_event(change.event_id or "")
    assert own.has_event(change.event_id or "") and own.space_id != warehouse
    assert old.changes[-1].kind == "resurrection_reverted" and old.changes[-1].other_space == own.space_id
