"""The brief's "done automatically" section from the runs themselves: finished runs of the period
whose Policy Gate result was `brief` (they ran without asking, so a person is told afterwards).

Read through the task lifecycle (never the task files) and the policy snapshots the runs name.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from pathlib import Path

from genworker.autonomy.briefs.models import BriefItem, Option
from genworker.worker.governance.errors import SnapshotError
from genworker.worker.governance.snapshots import SnapshotStore
from genworker.worker.lifecycle import TaskLifecycle
from genworker.worker.lifecycle.errors import TaskFileError, TaskNotFound

__all__ = ["DoneSource", "done_runs"]

DoneSource = Callable[[str, str, datetime | None], Awaitable[list[BriefItem]]]
_PAGE = 200
_LONGEST_RUN = timedelta(hours=24)


def done_runs(tasks: TaskLifecycle, workspace_root: Path) -> DoneSource:
    snapshots = SnapshotStore(workspace_root)

    async def source(tenant_id: str, worker_id: str, since: datetime | None) -> list[BriefItem]:
        items: list[BriefItem] = []
        for run in await tasks.list_runs(tenant_id, worker_id, limit=_PAGE):
            if since is not None and run.timings.queued_at < since - _LONGEST_RUN:
                break  # newest first by queue time: the rest finished before `since`
            ref, finished = run.provenance.policy_snapshot_ref, run.timings.finished_at
            if not run.terminal or ref is None or finished is None or (since is not None and finished < since):
                continue
            try:
                snapshot = await asyncio.to_thread(snapshots.load_policy, tenant_id, worker_id, ref)
            except SnapshotError:
                continue
            decision = snapshot.decision
            if decision.gate_result != "brief":
                continue
            try:
                text = (await tasks.get_manifest(tenant_id, worker_id, run.task_id)).text
            except (TaskFileError, TaskNotFound, OSError):
                text = run.task_id
            title = f"{' '.join(text.split())[:120]} ({run.state.value})"
            options = (
                Option(label="Looks right"),
                Option(label="Ask me first next time", command=f"/feedback ask first for {run.provenance.source_type}"),
                Option(label="See the run", command=f"GET /api/v1/workers/{worker_id}/runs/{run.run_id}"),
            )
            items.append(
                BriefItem(
                    item_id=f"done_{run.run_id}"[:64],
                    section="done",
                    title=title,
                    created_at=finished,
                    risk=decision.risk_tier,
                    reversibility=decision.reversibility,
                    ref=run.run_id,
                    detail="; ".join(r.message for r in decision.gate_reasons),
                    options=options,
                )
            )
        return list(reversed(items))

    return source
