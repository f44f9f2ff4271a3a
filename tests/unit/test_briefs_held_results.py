"""A duty result the Policy Gate held is listed under "Needs your confirmation" in every brief
while it is still held, not only in the first one after it was held (#25), and no more once it
was released. Real task lifecycle and brief store on disk; the clock is a variable."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from genworker.autonomy.briefs import Brief, BriefService, FileBriefStore, held_results
from genworker.engine.base import RunResult
from genworker.worker.contract_record import DeliveryRecord
from genworker.worker.lifecycle import TaskLifecycle
from genworker.worker.task import RunRef, TaskManifest, TaskProvenance

pytestmark = pytest.mark.anyio
T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
KEY = "duty:acme:w:run_held:0"


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


async def held_run(lifecycle: TaskLifecycle, run_id: str) -> RunRef:
    provenance = TaskProvenance(source_type="duty", duty_id="digest")
    manifest = TaskManifest(f"t-{run_id}", run_id, "acme", "w", "Write the digest.", T0, provenance=provenance)
    await lifecycle.persist_initial(manifest, start=True)
    ref = RunRef("acme", "w", run_id)
    await lifecycle.complete(ref, RunResult("completed", "Revenue is up 4% this week."))
    why = "governance posture proposal_only: the run may only propose; its result is not sent"
    await lifecycle.record_deliveries(ref, [DeliveryRecord(KEY, "chat slack:C-OPS", "text", "held", T0, error=why)])
    return ref


def held_refs(brief: Brief) -> list[str | None]:
    return [item.ref for item in brief.sections["confirm"] if item.item_id.startswith("heldres_")]


async def test_a_held_result_is_in_every_brief_until_it_is_released(tmp_path: Path) -> None:
    clock = Clock()
    lifecycle = TaskLifecycle(tmp_path, clock=clock)
    briefs = BriefService(FileBriefStore(tmp_path), done=held_results(lifecycle), clock=clock)
    ref = await held_run(lifecycle, "run_held")

    clock.now = T0 + timedelta(hours=1)
    first = await briefs.generate("acme", "w")
    assert held_refs(first) == ["run_held"]
    clock.now = T0 + timedelta(hours=5)
    second = await briefs.generate("acme", "w")  # the run finished before this brief's period: still held
    assert second.period_start == first.period_end
    assert held_refs(second) == ["run_held"]
    assert "Revenue is up 4% this week." in second.text
    clock.now = T0 + timedelta(days=3)
    assert held_refs(await briefs.generate("acme", "w")) == ["run_held"]

    sent = DeliveryRecord(KEY, "chat slack:C-OPS", "text", "sent", clock.now)  # released and sent
    await lifecycle.record_deliveries(ref, [sent])
    clock.now += timedelta(hours=4)
    assert held_refs(await briefs.generate("acme", "w")) == []
