"""The router's hook for duty runs: the contract checked before a run may complete, and what
follows once it is recorded. Implemented by `genworker.autonomy.duties.outcomes.DutyOutcomes`
(the composition root sets `WorkerRouter.duty_outcomes`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from genworker.engine.base import RunResult
    from genworker.worker.task import RunRecord, RunRef, ToolCallRecord
    from genworker.workspace.models.duty import DutySpec
    from genworker.workspace.snapshot import Worker

__all__ = ["DutyOutcomeSteps"]


class DutyOutcomeSteps(Protocol):
    async def settle(
        self, worker: Worker, duty: DutySpec, ref: RunRef, result: RunResult, tool_calls: Sequence[ToolCallRecord]
    ) -> RunResult:
        """A completed engine result checked against the duty's contract (the run is `evaluating`
        meanwhile): the result to record, maybe repaired or failed. Other results come back as given."""
        ...

    async def ended(self, worker: Worker, duty: DutySpec, record: RunRecord) -> RunRecord:
        """The run is recorded: deliver its result and make its escalations; the run as it is then."""
        ...
