"""Memory growth control: old episodes of one scope and month are folded into one summary
episode; the originals move to `memory/archive/episodes/` (kept, out of the active index).
Deterministic (no model call), so it can run on any schedule."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from genworker.ids import ID_PATTERN
from genworker.memory.models import Episode, Provenance, new_episode_id
from genworker.memory.store import OwnerMemory

__all__ = ["ConsolidationReport", "consolidate", "consolidate_workspace"]

log = logging.getLogger(__name__)

_LINE_CHARS = 200
_SUMMARY_CHARS = 4_000


@dataclass(frozen=True, slots=True)
class ConsolidationReport:
    summaries: int = 0
    archived: int = 0
    active: int = 0  # episodes left in the active index


def consolidate(
    owner: OwnerMemory,
    *,
    older_than: timedelta = timedelta(days=90),
    min_group: int = 5,
    max_active: int | None = None,
    now: datetime | None = None,
) -> ConsolidationReport:
    """Summarise episodes older than `older_than` (or, past `max_active`, the oldest ones) in
    groups of one scope, goal, duty and month with at least `min_group` members."""
    now = now or datetime.now(UTC)
    episodes = [e for e in owner.episodes.scan() if e.kind == "episode"]
    cutoff = now - older_than
    if max_active is not None and len(episodes) > max_active:
        by_age = sorted(episodes, key=lambda e: e.created_at)
        cutoff = max(cutoff, by_age[len(episodes) - max_active].created_at)
    groups: dict[tuple[str, str | None, str | None, str], list[Episode]] = defaultdict(list)
    for e in episodes:
        if e.created_at < cutoff:
            groups[(e.scope, e.provenance.goal_id, e.provenance.duty_id, f"{e.created_at:%Y-%m}")].append(e)
    summaries = archived = 0
    for (scope, goal_id, duty_id, month), members in sorted(groups.items()):
        if len(members) < min_group:
            continue
        members.sort(key=lambda e: e.created_at)
        lines = [f"- {m.created_at:%Y-%m-%d} {m.title}: {_first_line(m.body)}" for m in members]
        first = members[0]
        summary = Episode(
            episode_id=new_episode_id(now),
            tenant_id=first.tenant_id,
            worker_id=first.worker_id,
            scope=scope,
            kind="summary",
            title=f"Summary of {len(members)} episodes, {month}",
            created_at=members[-1].created_at,
            source="consolidation",
            provenance=Provenance(goal_id=goal_id, duty_id=duty_id),
            weight=max(m.weight for m in members),
            consolidated_from=tuple(m.episode_id for m in members),
            body="\n".join(lines)[:_SUMMARY_CHARS],
        )
        owner.write(summary)  # the summary first: an interrupted run loses nothing
        for m in members:
            owner.episodes.archive_episode(m.episode_id)
        try:
            owner.index.remove([m.episode_id for m in members])
        except Exception:
            log.exception("memory: archived episodes stay in the index until the next sync")
        summaries += 1
        archived += len(members)
    return ConsolidationReport(summaries, archived, len(episodes) - archived + summaries)


def _first_line(body: str) -> str:
    text = " ".join(body.split())
    return text if len(text) <= _LINE_CHARS else text[: _LINE_CHARS - 1] + "…"


def consolidate_workspace(
    root: Path,
    *,
    older_than: timedelta = timedelta(days=90),
    min_group: int = 5,
    max_active: int | None = 5_000,
    now: datetime | None = None,
    only: Callable[[str, str], bool] | None = None,
) -> dict[tuple[str, str], ConsolidationReport]:
    """`consolidate` for every worker with episodes (what a nightly schedule calls), or those
    `only(tenant_id, worker_id)` accepts; a worker that fails is logged and skipped, the others go on."""
    reports: dict[tuple[str, str], ConsolidationReport] = {}
    for folder in sorted(root.glob("tenants/*/workers/*/memory/episodes")):
        worker_dir = folder.parent.parent
        tenant_id, worker_id = worker_dir.parent.parent.name, worker_dir.name
        if not (ID_PATTERN.fullmatch(tenant_id) and ID_PATTERN.fullmatch(worker_id)):
            continue
        if only is not None and not only(tenant_id, worker_id):
            continue
        owner = OwnerMemory(folder.parent, worker_dir / "runtime")
        try:
            reports[(tenant_id, worker_id)] = consolidate(
                owner, older_than=older_than, min_group=min_group, max_active=max_active, now=now
            )
        except Exception:
            log.exception("memory: consolidating %s/%s failed", tenant_id, worker_id)
        finally:
            owner.index.close()
    return reports
