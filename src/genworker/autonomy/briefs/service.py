"""BriefService: decides whether something may interrupt now (budget, quiet hours, P0), records
everything else for the brief, and generates + delivers a brief every `brief_window_hours`
(4 h by default) per worker through a `BriefSink`.

A brief's sections come from the recorded items plus live views taken at generation time: the
worker's WAITING plans, its pending confirmations and suggestions (the IM command backend's
shapes), and a feedback prompt.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.interval import IntervalTrigger

from genworker.autonomy.briefs.budget import Admission, in_quiet_hours, local_day
from genworker.autonomy.briefs.done import DoneSource
from genworker.autonomy.briefs.models import SECTIONS, Brief, BriefItem, Option, Section
from genworker.autonomy.briefs.render import render_brief, render_item
from genworker.autonomy.briefs.sink import BriefSink
from genworker.autonomy.briefs.store import BriefStore
from genworker.autonomy.waiting import WaitingPlan, WaitingStore
from genworker.worker.governance.policy_gate import DEFAULT_POLICY, Policy, Priority
from genworker.workspace.snapshot import Worker

__all__ = ["JOB_PREFIX", "BriefService", "BriefSink", "LearnedBriefs", "ListSource", "Review"]

log = logging.getLogger("genworker.briefs")

JOB_PREFIX = "brief:"
ListSource = Callable[[str, str], list[dict[str, Any]]]
Review = Callable[[str, str, dict[Section, list[BriefItem]]], Awaitable[dict[Section, list[BriefItem]]]]
"""(tenant, worker, live items by section) -> the items as the brief shows them (the Conflict Arbiter's
semantic check: two exclusive items become one conflict card)."""


class LearnedBriefs(Protocol):
    """What learning from feedback changes here (autonomy/learning/briefs.py): the day's interruption
    budget and an item's priority, each decision logged with what versions in shadow would have done."""

    def limit(self, tenant_id: str, worker_id: str, base: int) -> int:
        """Blocking. The budget per day: the learned one when applied, else `base` (the policy's)."""
        ...

    def admitted(self, tenant_id: str, worker_id: str, item_id: str, taken: bool, used: int, limit: int) -> None:
        """Blocking. An item within the budget's reach interrupted (`taken`) or not."""
        ...

    async def prioritise(self, tenant_id: str, worker_id: str, item: BriefItem) -> BriefItem:
        """`item` with its learned priority."""
        ...


def _utc_now() -> datetime:
    return datetime.now(UTC)


def new_item_id() -> str:
    """Sortable by creation within one host (nanoseconds first), unique across hosts (random tail)."""
    return f"bi_{time.time_ns():x}_{uuid.uuid4().hex[:8]}"


FEEDBACK_OPTIONS = (
    Option(label="too many interruptions", command="/feedback too many interruptions"),
    Option(label="too conservative", command="/feedback too conservative"),
    Option(label="just right", command="/feedback just right"),
)


class BriefService:
    def __init__(
        self,
        store: BriefStore,
        *,
        sink: BriefSink | None = None,
        policy_of: Callable[[str, str], Policy] | None = None,
        waiting: WaitingStore | None = None,
        confirmations: ListSource | None = None,
        suggestions: ListSource | None = None,
        done: DoneSource | None = None,
        clock: Callable[[], datetime] = _utc_now,
    ) -> None:
        self.store = store
        self.sink = sink
        self.waiting = waiting
        self.confirmations = confirmations
        self.suggestions = suggestions
        self.done = done
        self.review: Review | None = None
        self.learned: LearnedBriefs | None = None
        self._policy_of = policy_of or (lambda tenant_id, worker_id: DEFAULT_POLICY)
        self._clock = clock
        self._scheduler: AsyncIOScheduler | None = None

    def now(self) -> datetime:
        return self._clock()

    def policy(self, tenant_id: str, worker_id: str) -> Policy:
        return self._policy_of(tenant_id, worker_id)

    def limit(self, tenant_id: str, worker_id: str, policy: Policy) -> int:
        """Blocking: the interruption budget per day, as learned or as the policy says."""
        base = policy.interruption_budget_per_day
        return base if self.learned is None else self.learned.limit(tenant_id, worker_id, base)

    # -- items and interruptions ---------------------------------------------------------------

    def item(self, section: Section, title: str, **fields: Any) -> BriefItem:
        fields.setdefault("item_id", new_item_id())
        fields.setdefault("created_at", self._clock())
        return BriefItem(section=section, title=title, **fields)

    async def record(self, tenant_id: str, worker_id: str, item: BriefItem) -> BriefItem:
        await asyncio.to_thread(self.store.add_item, tenant_id, worker_id, item)
        return item

    def admit(self, tenant_id: str, worker_id: str, priority: Priority, item_id: str) -> Admission:
        """Blocking: may this item interrupt now? Counts it when it may."""
        policy, now = self.policy(tenant_id, worker_id), self._clock()
        day, limit = local_day(policy, now), self.limit(tenant_id, worker_id, policy)
        if priority == "P0":
            _, used = self.store.take_interruption(tenant_id, worker_id, day, limit, item_id, force=True)
            return Admission(True, "p0", used, limit)
        used = self.store.budget(tenant_id, worker_id, day).used
        if policy.quiet_hours.enabled and policy.quiet_hours.focus:
            return Admission(False, "focus", used, limit)
        if in_quiet_hours(policy.quiet_hours, now):
            return Admission(False, "quiet_hours", used, limit)
        taken, used = self.store.take_interruption(tenant_id, worker_id, day, limit, item_id)
        if self.learned is not None:
            self.learned.admitted(tenant_id, worker_id, item_id, taken, used, limit)
        return Admission(taken, "within_budget" if taken else "budget_exhausted", used, limit)

    async def notify(self, tenant_id: str, worker_id: str, item: BriefItem) -> Literal["interrupted", "briefed"]:
        """Interrupt now when the budget and quiet hours allow it; otherwise keep it for the brief.
        Its priority is first the learned one for items alike."""
        if self.learned is not None:
            item = await self.learned.prioritise(tenant_id, worker_id, item)
        admission = await asyncio.to_thread(self.admit, tenant_id, worker_id, item.priority, item.item_id)
        if admission.interrupt and self.sink is not None:
            try:
                if await self.sink.deliver(tenant_id, worker_id, render_item(item)):
                    return "interrupted"
            except Exception:  # a broken channel must not lose the item: it goes to the brief
                log.exception("[Briefs] interruption for %s/%s failed", tenant_id, worker_id)
        reason = admission.reason if not admission.interrupt else "delivery_failed" if self.sink else "no_sink"
        await self.record(tenant_id, worker_id, item.model_copy(update={"reason": reason}))
        return "briefed"

    # -- generation ----------------------------------------------------------------------------

    async def generate(self, tenant_id: str, worker_id: str, *, deliver: bool = True) -> Brief:
        live = await self._live_items(tenant_id, worker_id)
        if self.review is not None:
            live = await self.review(tenant_id, worker_id, live)
        brief = await asyncio.to_thread(self._generate, tenant_id, worker_id, live)
        if deliver and self.sink is not None:
            try:
                ok = await self.sink.deliver(tenant_id, worker_id, brief.text)
                brief = brief.model_copy(update={"delivered": ok})
            except Exception as exc:
                log.exception("[Briefs] delivery for %s/%s failed", tenant_id, worker_id)
                brief = brief.model_copy(update={"delivered": False, "delivery_error": f"{type(exc).__name__}: {exc}"})
            await asyncio.to_thread(self.store.save, brief)
        return brief

    def _generate(self, tenant_id: str, worker_id: str, live: Mapping[Section, list[BriefItem]]) -> Brief:
        policy, now = self.policy(tenant_id, worker_id), self._clock()
        previous = self.store.list(tenant_id, worker_id, limit=1)
        limit = self.limit(tenant_id, worker_id, policy)

        def build(recorded: list[BriefItem]) -> Brief:
            sections: dict[Section, list[BriefItem]] = {s: [] for s in SECTIONS}
            for item in recorded:
                sections[item.section].append(item)
            for items in live.values():  # a live source may file an item elsewhere (e.g. a held call's problem)
                for item in items:
                    sections[item.section].append(item)
            for items in sections.values():  # the most urgent first (a learned priority moves items alike)
                items.sort(key=lambda i: i.priority)
            sections["feedback"].append(self._feedback(tenant_id, worker_id, policy, now, limit))
            brief = Brief(
                brief_id=f"brief_{now.astimezone(UTC):%Y%m%dT%H%M%S}Z_{uuid.uuid4().hex[:4]}",
                tenant_id=tenant_id,
                worker_id=worker_id,
                created_at=now,
                period_start=previous[0].period_end if previous else None,
                period_end=now,
                timezone=policy.quiet_hours.timezone,
                budget_used=self.store.budget(tenant_id, worker_id, local_day(policy, now)).used,
                budget_limit=limit,
                sections={s: tuple(items) for s, items in sections.items()},
                text="",
            )
            return brief.model_copy(update={"text": render_brief(brief)})

        return self.store.generate(tenant_id, worker_id, build)

    def _feedback(self, tenant_id: str, worker_id: str, policy: Policy, now: datetime, limit: int) -> BriefItem:
        used = self.store.budget(tenant_id, worker_id, local_day(policy, now)).used
        title = f"Interruptions today: {used} of {limit}. Tell me how this felt; I use it to tune when I interrupt."
        return self.item("feedback", title, item_id=f"fb_{now:%Y%m%d%H%M%S}", options=FEEDBACK_OPTIONS)

    async def _live_items(self, tenant_id: str, worker_id: str) -> dict[Section, list[BriefItem]]:
        live: dict[Section, list[BriefItem]] = {"done": [], "waiting": [], "confirm": [], "suggestions": []}
        if self.done is not None:
            previous = await asyncio.to_thread(self.store.list, tenant_id, worker_id, 1)
            live["done"] = await self.done(tenant_id, worker_id, previous[0].period_end if previous else None)
        if self.waiting is not None:
            live["waiting"] = [self._waiting_item(p) for p in await self.waiting.list(tenant_id, worker_id, "waiting")]
        if self.confirmations is not None:
            rows = await asyncio.to_thread(self.confirmations, tenant_id, worker_id)
            live["confirm"] = [self._confirmation_item(row) for row in rows]
        if self.suggestions is not None:
            rows = await asyncio.to_thread(self.suggestions, tenant_id, worker_id)
            live["suggestions"] = [self._suggestion_item(row) for row in rows]
        return live

    def _waiting_item(self, plan: WaitingPlan) -> BriefItem:
        deadline = f"{plan.expires_at:%Y-%m-%d %H:%M} UTC"
        title = f"{plan.title or plan.match_key}: waiting for {plan.match_key}, timeout {deadline}"
        options = (
            Option(label="Keep waiting"),
            Option(label="Resume now", command=f"POST /api/v1/workers/{plan.worker_id}/waiting/{plan.plan_id}/resume"),
            Option(label="Cancel", command=f"POST /api/v1/workers/{plan.worker_id}/waiting/{plan.plan_id}/cancel"),
        )
        return self.item("waiting", title, item_id=f"wait_{plan.plan_id}", ref=plan.plan_id, options=options)

    def _confirmation_item(self, row: Mapping[str, Any]) -> BriefItem:
        cid = str(row.get("id"))
        reasons = row.get("reasons") or ()
        options = (
            Option(label="Approve", command=f"/approve_confirmation {cid}"),
            Option(label="Reject", command=f"/reject_confirmation {cid}"),
        )
        return self.item(
            "confirm", str(row.get("text") or cid), item_id=f"conf_{cid}"[:64], ref=cid, options=options,
            detail="; ".join(str(r) for r in reasons), priority="P1",
        )  # fmt: skip

    def _suggestion_item(self, row: Mapping[str, Any]) -> BriefItem:
        sid = str(row.get("id"))
        options = (
            Option(label="Approve", command=f"/approve_suggestion {sid}"),
            Option(label="Reject", command=f"/reject_suggestion {sid}"),
            Option(label="Remind me later"),
        )
        title = f"{row.get('title') or sid} ({row.get('kind') or 'suggestion'})"
        return self.item("suggestions", title, item_id=f"sug_{sid}"[:64], ref=sid, options=options)

    # -- scheduling ----------------------------------------------------------------------------

    async def start(self, workers: Iterable[Worker]) -> None:
        if self._scheduler is not None:
            return
        self._scheduler = AsyncIOScheduler(timezone=UTC)
        self._scheduler.start()
        self.sync(workers)

    def sync(self, workers: Iterable[Worker]) -> None:
        """One interval job per worker, every brief_window_hours of its policy."""
        if self._scheduler is None:
            return
        wanted = {f"{JOB_PREFIX}{w.tenant_id}/{w.worker_id}": w.key for w in workers}
        for job in self._scheduler.get_jobs():
            if job.id not in wanted:
                job.remove()
        for ident, (tenant_id, worker_id) in wanted.items():
            hours = self.policy(tenant_id, worker_id).brief_window_hours
            trigger = IntervalTrigger(hours=hours, timezone=UTC)
            job = self._scheduler.get_job(ident)
            if job is not None and job.trigger.interval == timedelta(hours=hours):
                continue
            self._scheduler.add_job(
                self._tick, trigger, args=(tenant_id, worker_id), id=ident, replace_existing=True,
                max_instances=1, coalesce=True, misfire_grace_time=600,
            )  # fmt: skip

    async def _tick(self, tenant_id: str, worker_id: str) -> None:
        try:
            await self.generate(tenant_id, worker_id)
        except Exception:  # one worker's failure must not stop the others' briefs
            log.exception("[Briefs] brief for %s/%s failed", tenant_id, worker_id)

    def jobs(self) -> dict[str, Any]:
        return {job.id: job for job in self._scheduler.get_jobs()} if self._scheduler is not None else {}

    async def stop(self) -> None:
        scheduler, self._scheduler = self._scheduler, None
        if scheduler is not None:
            scheduler.shutdown(wait=False)
