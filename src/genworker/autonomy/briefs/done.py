"""The brief's "done automatically" section, from what happened rather than from recorded items:

- `done_runs`: finished runs of the period whose Policy Gate result was `brief` (they ran without
  asking, so a person is told afterwards); read through the task lifecycle (never the task files)
  and the policy snapshots the runs name;
- `held_calls`: the tool calls the undo window held in the period — still pending (with the undo
  command), executed, undone; one that expired, failed or whose outcome is unknown goes to
  "Conflicts and risks", because a person has to look at it;
- `held_results`: duty results the Policy Gate held (a posture that only proposes): every run whose
  result is still held goes to "Needs your confirmation", with its draft and the command that
  sends it, in each brief until it is released (whenever the run finished).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from pathlib import Path

from genworker.autonomy.briefs.models import BriefItem, Option, Section
from genworker.tools.middlewares.undo_window import DeferredCall, UndoWindow
from genworker.worker.governance.errors import SnapshotError
from genworker.worker.governance.snapshots import SnapshotStore
from genworker.worker.lifecycle import TaskLifecycle
from genworker.worker.lifecycle.errors import TaskFileError, TaskNotFound
from genworker.worker.task import RunRecord, RunState

__all__ = ["DoneSource", "done_runs", "held_calls", "held_results", "joined"]

DoneSource = Callable[[str, str, datetime | None], Awaitable[list[BriefItem]]]
_PAGE = 200
_LONGEST_RUN = timedelta(hours=24)
_DRAFT_CHARS = 600  # of a held result, in its brief item


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


def held_results(tasks: TaskLifecycle) -> DoneSource:
    async def source(tenant_id: str, worker_id: str, since: datetime | None) -> list[BriefItem]:
        items: list[BriefItem] = []
        for run in await tasks.list_runs(tenant_id, worker_id, limit=sys.maxsize):  # held since any time
            finished = run.timings.finished_at
            if run.state is RunState.COMPLETED and finished is not None:
                item = _held_result(run, finished)
                if item is not None:
                    items.append(item)
        return list(reversed(items))

    return source


def _held_result(run: RunRecord, finished: datetime) -> BriefItem | None:
    held = [d for d in run.deliveries if d.state == "held"]
    duty = run.provenance.duty_id
    if not held or duty is None:
        return None
    draft = next((d.content for d in run.deliverables if d.kind == "text"), "").strip()
    if len(draft) > _DRAFT_CHARS:
        draft = draft[:_DRAFT_CHARS].rstrip() + " …"
    why = held[0].error or "its posture only lets it propose"
    base = f"/api/v1/workers/{run.worker_id}"
    options = (
        Option(label="Send it", command=f"POST {base}/duties/{duty}/runs/{run.run_id}/release"),
        Option(label="See the run", command=f"GET {base}/runs/{run.run_id}"),
    )
    return BriefItem(
        item_id=f"heldres_{run.run_id}"[:64],
        section="confirm",
        title=f"Duty {duty}: its result is held, not sent to {', '.join(d.to for d in held)}",
        created_at=finished,
        ref=run.run_id,
        detail=f"{why}. Draft: {draft}" if draft else why,
        options=options,
        priority="P1",
    )


def held_calls(undo: UndoWindow) -> DoneSource:
    async def source(tenant_id: str, worker_id: str, since: datetime | None) -> list[BriefItem]:
        records = await undo.records(tenant_id, worker_id)
        return [_held_item(r) for r in sorted(records, key=lambda r: r.created_at) if _in_period(r, since)]

    return source


def _in_period(record: DeferredCall, since: datetime | None) -> bool:
    """Still pending, or decided (created) since the last brief."""
    return since is None or record.state == "pending" or (record.decided_at or record.created_at) > since


def _held_item(record: DeferredCall) -> BriefItem:
    when = f"{record.execute_at:%Y-%m-%d %H:%M} UTC"
    see = Option(label="See the run", command=f"GET /api/v1/workers/{record.worker_id}/runs/{record.run_id}")
    section: Section = "done"
    match record.state:
        case "pending":
            title = f"{record.tool} runs at {when} unless undone"
            options: tuple[Option, ...] = (Option(label="Undo", command=f"/undo {record.undo_id}"), see)
        case "undone":
            title, options = f"{record.tool} was undone by {record.decided_by} before it ran", (see,)
        case "executing" | "executed":
            title, options = f"{record.tool} ran after its undo window ({when})", (Option(label="Looks right"), see)
        case _:  # expired, failed, outcome_unknown: a person has to look
            section = "conflicts"
            title, options = f"{record.tool}, held until {when}: {record.state.replace('_', ' ')}; please check", (see,)
    return BriefItem(
        item_id=f"held_{record.undo_id}"[:64],
        section=section,
        title=title,
        created_at=record.decided_at or record.created_at,
        reversibility="undo_window",
        ref=record.undo_id,
        detail=record.outcome,
        options=options,
    )


def joined(*sources: DoneSource) -> DoneSource:
    """One source giving every source's items, in order."""

    async def source(tenant_id: str, worker_id: str, since: datetime | None) -> list[BriefItem]:
        found = await asyncio.gather(*(s(tenant_id, worker_id, since) for s in sources))
        return [item for items in found for item in items]

    return source
