"""The brief's "done automatically" section from real runs: the governance stage decides (Policy
Gate `brief`), the task lifecycle runs and finishes the task, and the brief lists it once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from genworker.autonomy.briefs import BriefService, FileBriefStore, done_runs
from genworker.engine.base import RunResult
from genworker.tools.base import Effect
from genworker.worker.governance import GovernanceInput, TaskGovernanceStage
from genworker.worker.lifecycle import TaskLifecycle
from genworker.worker.task import RunRef, TaskManifest, TaskProvenance
from genworker.workspace.models import Tenant

pytestmark = pytest.mark.anyio
T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)

DUTY = """
triggers:
  - {id: hook, type: event, source: github}
contract:
  version: "1"
  decision_scope:
    - "auto: internal_status_transition"
    - "auto: label"
"""


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


async def run_task(
    stage: TaskGovernanceStage, lifecycle: TaskLifecycle, worker: Any, run_id: str, text: str, **fields: Any
) -> None:
    tenant = Tenant(tenant_id="acme", trust_level=3)
    outcome = stage.evaluate(GovernanceInput(tenant, worker, text, source_type="event", duty_id="ops", **fields))
    assert outcome.decision.action == "auto"
    provenance = TaskProvenance(
        source_type="event", duty_id="ops", policy_snapshot_ref=outcome.manifest.policy_snapshot_ref
    )
    manifest = TaskManifest(f"t-{run_id}", run_id, "acme", "w", text, T0, provenance=provenance)
    await lifecycle.persist_initial(manifest, start=True)
    await lifecycle.complete(RunRef("acme", "w", run_id), RunResult("completed", "done"))


async def test_brief_lists_runs_the_gate_sent_to_the_brief(ws: Any) -> None:
    ws.persona()
    ws.duty("ops", DUTY)
    worker = ws.load_worker()[0]
    root: Path = ws.root
    clock = Clock()
    stage, lifecycle = TaskGovernanceStage(root), TaskLifecycle(root, clock=clock)
    external = frozenset({Effect.EXTERNAL})
    await run_task(
        stage,
        lifecycle,
        worker,
        "r1",
        "Move issue 42 to done",
        requested_actions=("internal_status_transition",),
        requested_effects=external,
    )
    await run_task(
        stage,
        lifecycle,
        worker,
        "r2",
        "Read the board",
        requested_actions=("label",),
        requested_effects=frozenset({Effect.READ}),
    )
    briefs = BriefService(FileBriefStore(root), done=done_runs(lifecycle, root), clock=clock)
    clock.now = T0 + timedelta(minutes=5)
    first = await briefs.generate("acme", "w")
    [item] = first.sections["done"]  # r2 was low risk and reversible: `auto`, silent
    assert (item.ref, item.risk, item.reversibility) == ("r1", "high", "undo_window")
    assert item.title == "Move issue 42 to done (completed)"
    assert [o.label for o in item.options] == ["Looks right", "Ask me first next time", "See the run"]
    assert "[High][Undo Window] Move issue 42 to done" in first.text
    clock.now = T0 + timedelta(hours=4)
    assert (await briefs.generate("acme", "w")).sections["done"] == ()  # reported once
