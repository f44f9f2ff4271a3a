"""The composition root: builds every component in dependency order, exactly once.

An optional component that fails to start is reported `degraded` or `failed` with its
reason; it never stops the runtime from starting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import redis
import redis.asyncio as aioredis

from genworker.autonomy.briefs import (
    BriefService,
    BriefStore,
    ChannelBriefSink,
    FileBriefStore,
    RedisBriefStore,
    done_runs,
    held_calls,
    held_results,
    joined,
)
from genworker.autonomy.command_backend import AutonomyCommandBackend
from genworker.autonomy.confirmation_notices import InboxConfirmationNotifier, through_briefs
from genworker.autonomy.duties import DutyScheduler, DutyStore, MetricSource, WorkerMetrics, route_through
from genworker.autonomy.duties.outcomes import DutyOutcomes, build_duty_outcomes
from genworker.autonomy.goals import GoalAggregate, GoalEvaluator, GoalProgressChecker, GoalProgressProjector
from genworker.autonomy.goals.jobs import LifecycleJobs, confirmation_policy_of, lifecycle_settings
from genworker.autonomy.heartbeat import HeartbeatService, OwnerNotices, heartbeat_settings
from genworker.autonomy.inbox import FileInboxStore, InboxAggregate, InboxFacts, InboxStore, RedisInboxStore
from genworker.autonomy.sensing import SensorRegistry
from genworker.autonomy.suggestions import FeedbackStore, SuggestionAggregate, SuggestionDetectors, SuggestionStore
from genworker.autonomy.waiting import FileWaitingStore, RedisWaitingStore, WaitingService, WaitingStore
from genworker.autonomy.waiting.replies import ChannelReplies
from genworker.autonomy.waiting.resume import registry_policy, resume_through, scan_interval, timeout_to_brief
from genworker.autonomy.waiting.runs import cancel_parked, park_run
from genworker.bus import EventBus, InProcessEventBus, RedisEventBus
from genworker.channels.email import EmailPolling
from genworker.channels.ingest import Channels, redelivery_policy
from genworker.channels.longconn import LongConnections, build_long_connections, stop_long_connections
from genworker.channels.outbound import ChannelDelivery, VendorEndpoints
from genworker.channels.registry import ChannelRegistry
from genworker.conversation import FileSessionStore, RedisSessionStore, SessionManager, SessionStore, ThreadQueue
from genworker.delivery.outbox import Outbox, outbox_events
from genworker.llm.bookkeeping import defer_bookkeeping, restore_task_factory, turns_running
from genworker.llm.client import LLMClient
from genworker.llm.config_source import ModelConfigState, load_model_config
from genworker.memory import MemoryConfig, MemoryService
from genworker.memory.consolidation import consolidate_workspace
from genworker.observability.status import ComponentRuntimeStatus, ComponentStatus, Reason
from genworker.settings import Settings
from genworker.tools.environment import ToolRuntime, WorkerLookup, undo_events, undo_max_late_s
from genworker.worker.confirmations.reminders import ConfirmationReminders
from genworker.worker.confirmations.resolve import cancel_waiting_run
from genworker.worker.confirmations.store import ConfirmationStore
from genworker.worker.context.tokens import load_tokenizer
from genworker.worker.delegation import Delegation, DelegationLimits
from genworker.worker.engine_runs import checkpoint_stores
from genworker.worker.governance import ApprovalResolver, TaskGovernanceStage
from genworker.worker.handoff import HandOffs
from genworker.worker.lifecycle import TaskLifecycle
from genworker.worker.lifecycle.leases import FileInstanceLeases, InstanceLeases, RedisInstanceLeases
from genworker.worker.router import WorkerRouter
from genworker.worker.service import ServiceDesk
from genworker.worker.skill_matcher import SkillMatcher
from genworker.workspace.models import Tenant
from genworker.workspace.registry import ReloadOutcome, WorkspaceRegistry
from genworker.workspace.snapshot import Worker
from genworker.workspace.watcher import WorkspaceWatcher
from genworker.write_journal import DIRECT, JournaledFiles, recover_journals

__all__ = ["GOVERNANCE_COMPONENTS", "Runtime", "build_runtime"]

log = logging.getLogger("genworker.runtime")

GOVERNANCE_COMPONENTS = ("task_governance",)


@dataclass
class Runtime:
    settings: Settings
    registry: WorkspaceRegistry
    model: ModelConfigState
    llm: LLMClient
    tools: ToolRuntime
    components: dict[str, ComponentRuntimeStatus] = field(default_factory=dict)
    redis: redis.Redis | None = None
    watcher: WorkspaceWatcher | None = None
    router: WorkerRouter | None = None
    bus: EventBus | None = None
    inbox: InboxStore | None = None  # sensors write here
    inbox_aggregate: InboxAggregate | None = None  # the only thing that changes item state
    heartbeat: HeartbeatService | None = None
    sensors: SensorRegistry | None = None
    duties: DutyScheduler | None = None
    duty_outcomes: DutyOutcomes | None = None  # a duty run's contract checks, deliveries and escalations
    metrics: MetricSource | None = None  # what condition triggers read (default: WorkerMetrics)
    goals: GoalAggregate | None = None  # goals / suggestions / confirmations lifecycle (build_lifecycle)
    suggestions: SuggestionAggregate | None = None
    feedback: FeedbackStore | None = None
    lifecycle: LifecycleJobs | None = None
    command_backend: AutonomyCommandBackend | None = None  # the IM commands' backend (channels)
    channel_replier: ChannelDelivery | None = None  # outbound replies and proactive sends (channels.outbound)
    long_connections: LongConnections | None = None  # Slack Socket Mode, Feishu/Lark ws, DingTalk Stream
    channels: Channels | None = None  # the IM webhooks' ingress: journal, processor (channels.ingest)
    outbox: Outbox | None = None  # proactive sends once per key, re-sent until delivered (channels.outbound)
    briefs: BriefService | None = None  # interruption budget + scheduled briefs
    waiting: WaitingService | None = None  # WAITING plans: event wake-ups + timeout scan
    aredis: aioredis.Redis | None = None  # the async client sessions and thread locks share
    leases: InstanceLeases | None = None  # this process's lease; runs it owns carry its instance id
    files: JournaledFiles | None = None  # the write journal run records, sessions and episodes go through
    memory_consolidations: int = 0  # passes of the memory consolidation job so far
    background: set[asyncio.Task[None]] = field(default_factory=set)  # runs whose client went away
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    # -- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        # File stores run in threads; LiteLLM's callbacks share the default pool, which is
        # only cpu+4 wide. A wider pool keeps a run's writes from queueing behind them.
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(max_workers=32, thread_name_prefix="io"))
        defer_bookkeeping(loop)  # LiteLLM's after-call logging waits until the turn has ended
        tokenizer = asyncio.create_task(asyncio.to_thread(load_tokenizer), name="load-tokenizer")
        self.leases = self._instance_leases()
        await asyncio.to_thread(self.leases.renew)
        await self._open_write_journal()
        self.router = build_router(self)
        self._connect_collaboration(self.router)
        recovered = await self.router.tasks.recover_interrupted(alive=self.leases.alive)
        if recovered:
            log.warning("[Runtime] %d runs left running by a stopped process are now interrupted", len(recovered))
        self._tasks.append(asyncio.create_task(self._hold_lease(self.leases), name="instance-lease"))
        await self.tools.start(
            (state.tenant, worker) for state in self.registry.tenants() for worker in state.workers.values()
        )
        await build_autonomy(self)
        self.tools.undo.owner = self.leases.instance_id  # deferred calls left by a stopped process: run or expire
        await self.tools.undo.recover(alive=self.leases.alive)
        if self.waiting is not None:  # plans it resumes name this instance, for recovery after a crash
            self.waiting.owner = self.leases.instance_id
        # channels: outbound delivery first (the ingress replies through it), vendor API bases from settings
        self.channel_replier = ChannelDelivery(
            ChannelRegistry(self.registry), endpoints=VendorEndpoints.from_settings(self.settings.get)
        )
        await self._start_outbox(self.channel_replier, self.leases)
        # channels: verified IM webhooks -> dedupe -> durable journal -> processor (genworker.channels)
        from genworker.channels.ingest import build_channels, stop_with

        inbox = InboxFacts(self.inbox) if self.inbox is not None else None  # watched group messages
        channels = self.channels = await build_channels(
            self.registry,
            self.router,
            aredis=self.aredis,
            replier=self.channel_replier,
            inbox=inbox,
            commands_backend=self.command_backend,
            policy=redelivery_policy(self.settings.number),
        )
        self._connect_waiting(channels)
        self._tasks.append(asyncio.create_task(stop_with(self._stop, channels), name="channels"))
        self.long_connections = build_long_connections(self, channels)  # their events enter the same ingest
        email = EmailPolling(self.registry.root, channels.registry, channels.ingest.accept)  # IMAP conversation
        self._tasks.append(asyncio.create_task(email.run(self._stop), name="email-channel"))
        if self.heartbeat is not None:
            await self.heartbeat.start(self.registry.workers())
        if self.duties is not None:
            await self.duties.start(self.registry.workers())
        if self.lifecycle is not None:  # stopped as soon as stop() sets _stop
            await self.lifecycle.start()
            self._tasks.append(asyncio.create_task(_after(self._stop, self.lifecycle.stop), name="lifecycle"))
        if self.briefs is not None:
            self._connect_briefs(self.briefs)
            await self.briefs.start(self.registry.workers())
        if self.waiting is not None:  # first plans a stopped process left mid-resume or mid-cancel
            await self.waiting.recover(((w.tenant_id, w.worker_id) for w in self.registry.workers()), self.leases.alive)
            await self.waiting.start()
        if self.router.memory is not None and self.router.memory.config.enabled:
            self._tasks.append(asyncio.create_task(self._consolidate_memory(self.router.memory), name="memory"))
        if self.inbox is not None:
            self.sensors = SensorRegistry(self.registry.root, self.inbox)
            await self.sensors.sync(self.registry.workers())
        if self.watcher is not None:
            self.watcher.on_reload = self._reloaded
            self._tasks.append(asyncio.create_task(self._watch(self.watcher), name="hot-reload"))
        await tokenizer  # ready only once the first turn will not load it on the loop

    async def _consolidate_memory(self, memory: MemoryService) -> None:
        """Fold old episodes into summaries (originals archived) every `consolidate_every_s`, so each
        worker's active memory stays bounded; the first pass runs one interval after start."""
        config = memory.config
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), config.consolidate_every_s)
            if self._stop.is_set():
                return
            older = timedelta(days=config.consolidate_after_days)
            try:
                reports = await asyncio.to_thread(consolidate_workspace, self.registry.root, older_than=older)
            except Exception:  # housekeeping never takes the runtime down; next pass tries again
                log.exception("[Memory] consolidation failed")
                continue
            folded = sum(r.archived for r in reports.values())
            if folded:
                log.info("[Memory] consolidated %d old episodes across %d workers", folded, len(reports))
            self.memory_consolidations += 1

    def _instance_leases(self) -> InstanceLeases:
        if self.redis is not None:
            return RedisInstanceLeases(self.redis)
        return FileInstanceLeases(self.registry.root)

    async def _hold_lease(self, leases: InstanceLeases) -> None:
        """Renew this instance's lease (3 times per ttl) and, once per ttl, interrupt runs whose
        owner stopped renewing: a process that died while this one runs."""
        interval = leases.ttl.total_seconds() / 3
        beat = 0
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), interval)
            if self._stop.is_set():
                break
            beat += 1
            try:
                await asyncio.to_thread(leases.renew)
                if beat % 3 == 0:
                    await self.sweep_stopped_instances(leases)
            except Exception:  # Redis or the disk hiccuped: try again next beat
                log.exception("[Runtime] instance lease renewal failed")
        with contextlib.suppress(Exception):
            await asyncio.to_thread(leases.release)

    async def sweep_stopped_instances(self, leases: InstanceLeases) -> None:
        """Take over what processes that stopped renewing their lease left: their runs become
        `interrupted`, their deferred calls are run or expired, their WAITING resumes restarted."""
        if self.router is None:
            return
        orphans = await self.router.tasks.recover_orphans(leases.alive)
        if orphans:
            log.warning("[Runtime] %d runs of a stopped runtime process are now interrupted", len(orphans))
        await self.tools.undo.recover(alive=leases.alive)
        if self.outbox is not None:
            await self.outbox.recover(alive=leases.alive)
        if self.waiting is not None:
            workers = ((w.tenant_id, w.worker_id) for w in self.registry.workers())
            await self.waiting.recover(workers, leases.alive, at_start=False)

    async def reload(self, tenant_id: str, worker_id: str | None = None) -> ReloadOutcome:
        """Reload a tenant, or one worker, from its files (the ops API): what runs from them follows,
        as after the watcher's reloads."""
        if worker_id is None:
            outcome = await asyncio.to_thread(self.registry.reload_tenant, tenant_id)
        else:
            outcome = await asyncio.to_thread(self.registry.reload_worker, tenant_id, worker_id)
        self._reloaded(outcome)
        return outcome

    def _reloaded(self, outcome: ReloadOutcome) -> None:
        """After a reload, schedules, the heartbeat and briefs follow the registry, and MCP servers
        whose configuration changed reconnect. Also after a rejected one: a tenant reload that kept
        one worker's last good version reloaded the others (and otherwise nothing changed)."""
        if self.heartbeat is not None:
            self.heartbeat.sync(self.registry.workers())
        if self.duties is not None:
            self.duties.sync(self.registry.workers())
        if self.briefs is not None:
            self.briefs.sync(self.registry.workers())
        if self.long_connections is not None:
            self.long_connections.sync()
        task = asyncio.get_running_loop().create_task(self._refresh_tools(), name=f"tools:{outcome.target}")
        self._tasks.append(task)
        task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[None]) -> None:
        if task in self._tasks:
            self._tasks.remove(task)

    async def _refresh_tools(self) -> None:
        """MCP servers and sensors follow the reloaded configuration (only changed ones restart)."""
        await self.tools.start(
            (state.tenant, worker) for state in self.registry.tenants() for worker in state.workers.values()
        )
        if self.sensors is not None:
            await self.sensors.sync(self.registry.workers())

    async def _watch(self, watcher: WorkspaceWatcher) -> None:
        try:
            await watcher.run(self._stop)
        except Exception as exc:  # the watcher must never take the server down
            log.exception("hot reload stopped")
            self.components["hot_reload"] = ComponentRuntimeStatus(
                "hot_reload", ComponentStatus.FAILED, f"watcher stopped: {exc}", "watchfiles"
            )

    async def stop(self) -> None:
        if self.long_connections is not None:  # no new events while the channel processor stops
            await stop_long_connections(self.long_connections)
        self._stop.set()
        restore_task_factory(asyncio.get_running_loop())
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        for run in list(self.background):
            with contextlib.suppress(asyncio.CancelledError):
                await run
        if self.sensors is not None:
            await self.sensors.stop()
        if self.heartbeat is not None:
            await self.heartbeat.stop()
        if self.duties is not None:
            await self.duties.stop()
        if self.duty_outcomes is not None:
            await self.duty_outcomes.escalations.stop()
        await self._stop_policy()
        if self.channel_replier is not None:
            await self.channel_replier.aclose()
        if self.bus is not None:
            await self.bus.close()
        if isinstance(self.inbox, RedisInboxStore):
            await self.inbox.aclose()
        await self.tools.stop()
        if self.router is not None and self.router.memory is not None:
            await self.router.memory.learned()  # the last turns' index updates
            self.router.memory.close()  # the memory indexes' SQLite connections
        await self._close_clients()

    async def _close_clients(self) -> None:
        if self.aredis is not None:
            await self.aredis.aclose()
        if self.redis is not None:
            await asyncio.to_thread(self.redis.close)
        if self.files is not None:  # last: every writer has stopped
            await asyncio.to_thread(self.files.close)
            self.files = None

    async def _open_write_journal(self) -> None:
        """Finish the journals of stopped processes (before anything reads what they wrote), then
        open this process's, unless GENWORKER_WRITE_JOURNAL=false (every write fsyncs on its own)."""
        root = self.registry.root
        finished = await asyncio.to_thread(recover_journals, root)
        if finished:
            log.warning("[Runtime] finished %d write-journal segments left by a stopped process", finished)
        if self.settings.flag("GENWORKER_WRITE_JOURNAL", True):
            interval = self.settings.number("GENWORKER_WRITE_JOURNAL_CHECKPOINT_S", 0.5, 0.01, 3600)
            # A lone turn syncs on the loop (nothing else waits for it); concurrent turns, and writers outside
            # any turn (bursts of API or webhook writes), share the sync thread's fdatasyncs.
            inline = self.settings.flag("GENWORKER_WRITE_JOURNAL_INLINE_SYNC", True)
            lone = (lambda: turns_running() == 1) if inline else (lambda: False)
            opened = partial(JournaledFiles, root, interval_s=interval, sync_here=lone)
            self.files = await asyncio.to_thread(opened)

    async def _start_outbox(self, delivery: ChannelDelivery, leases: InstanceLeases) -> None:
        """Proactive sends (send_message / send_email, heartbeat notices to the owner) go out once per
        key and are re-sent on the channels' schedule; what a stopped process left is picked up."""
        policy = redelivery_policy(self.settings.number)
        self.outbox = Outbox(self.registry.root, delivery.send_to, policy, owner=leases.instance_id)
        if self.bus is not None:
            self.outbox.announce = outbox_events(self.bus)
        await self.outbox.start(alive=leases.alive)
        self._tasks.append(asyncio.create_task(_after(self._stop, self.outbox.stop), name="outbox"))
        bindings = delivery.channels.bindings
        self.tools.messaging.outbox = self.outbox
        self.tools.messaging.worker = self.tools.mailbox.worker = self.registry.worker
        self.tools.messaging.bindings = bindings
        if self.duty_outcomes is not None:  # duty results and escalations go out through it too
            await self.duty_outcomes.connect(self.outbox, bindings)
        if self.heartbeat is not None and self.briefs is not None:
            self.heartbeat.runner.notify_owner = OwnerNotices(self.briefs, self.outbox, bindings)

    def _connect_collaboration(self, router: WorkerRouter) -> None:
        """The delegate tools start child runs through the router; a service hands conversations over."""
        limits = DelegationLimits.from_settings(self.settings)
        self.tools.delegation.runner = Delegation(router, self.background, limits)
        if router.service is not None:
            self.tools.escalation.hand_over = HandOffs(router.service).hand_over

    def _connect_briefs(self, briefs: BriefService) -> None:
        """Briefs go out through the channels; their confirmation and suggestion sections read the
        IM commands' backend."""
        if self.channel_replier is not None:
            briefs.sink = ChannelBriefSink(self.channel_replier)
        if self.command_backend is not None:
            briefs.confirmations = self.command_backend.confirmations
            briefs.suggestions = self.command_backend.suggestions
        notifier = self.router.confirmations.notifier if self.router is not None else None
        if isinstance(notifier, InboxConfirmationNotifier):  # confirmation notices: within the budget
            notifier.notify = through_briefs(briefs)

    def _connect_waiting(self, channels: Channels) -> None:
        """A run parked in an IM conversation gets its continuation's answer there (docs/waiting.md)."""
        if self.waiting is None or self.router is None or self.channel_replier is None:
            return
        replies = ChannelReplies(self.channel_replier, channels.ingest.dedupe, channels.processor.origin)
        self.waiting.on_resume = partial(resume_through, self.router, replies=replies)
        self.tools.waits.park = partial(park_run, self.waiting, self.router, address=replies.address)

    async def _stop_policy(self) -> None:
        if self.waiting is not None:
            await self.waiting.stop()
        if self.briefs is not None:
            await self.briefs.stop()

    # -- what the runtime can do ------------------------------------------------

    def default_workers(self) -> dict[str, Worker | None]:
        tenants = (
            [self.settings.default_tenant]
            if self.settings.default_tenant
            else [t.tenant_id for t in self.registry.tenants()]
        )
        return {t: self.registry.default_worker(t) for t in tenants if t}

    def readiness(self) -> tuple[list[Reason], list[Reason]]:
        """(blocking reasons, non-blocking warnings) for the default chat path."""
        blocking: list[Reason] = []
        warnings: list[Reason] = []
        if not self.model.configured:
            code = "model_config_invalid" if self.model.error else "model_not_configured"
            blocking.append(Reason(code, self.model.reason, "llm"))
        workspace = self.components["workspace"]
        if workspace.status == ComponentStatus.FAILED:
            blocking.append(Reason("workspace_failed", workspace.reason, "workspace"))
        defaults = self.default_workers()
        unavailable = [
            Reason("default_worker_unavailable", self._why_no_default(tenant), "workspace")
            for tenant, worker in defaults.items()
            if worker is None
        ]
        if self.settings.default_tenant or not any(defaults.values()):
            blocking.extend(unavailable)
            if not defaults and workspace.status != ComponentStatus.FAILED:
                blocking.append(Reason("no_tenants", "no tenant is loaded", "workspace"))
        else:
            warnings.extend(unavailable)
        return blocking, warnings

    def _why_no_default(self, tenant_id: str) -> str:
        state = self.registry.tenant(tenant_id)
        if state is None:
            return f"tenant {tenant_id!r} is not loaded"
        name = state.tenant.default_worker
        if name is None:
            return f"tenant {tenant_id!r} names no default_worker and has {len(state.workers)} workers"
        if name in state.failures:
            first = state.failures[name].errors[0]
            return f"default worker {tenant_id}/{name} failed to load: {first}"
        return f"default worker {tenant_id}/{name} does not exist"

    def health(self) -> tuple[str, list[Reason]]:
        reasons = []
        if self.settings.governance_required:
            for name in GOVERNANCE_COMPONENTS:
                component = self.components.get(name)
                if component is None or component.status != ComponentStatus.READY:
                    why = component.reason if component else "not built"
                    reasons.append(
                        Reason(
                            "governance_dependency_missing",
                            f"WORKER_GOVERNANCE_REQUIRED=true but {name} is not ready: {why}",
                            name,
                        )
                    )
        return ("degraded" if reasons else "ok"), reasons

    def all_components(self) -> dict[str, ComponentRuntimeStatus]:
        """Start-up components plus live ones (one per MCP server)."""
        live = {
            f"{c.name}@{c.details.get('tenant_id', '')}/{c.details.get('worker_id', '')}": c
            for c in self.tools.statuses()
        }
        return {**self.components, **live}

    def backends(self) -> dict[str, str]:
        return {
            "workspace": "filesystem",
            "shared_state": "redis" if self.redis is not None else "none (single process)",
            "hot_reload": "watchfiles" if self.watcher is not None else "off",
        }

    def debug(self) -> dict[str, Any]:
        blocking, warnings = self.readiness()
        health, health_reasons = self.health()
        return {
            "profile": self.settings.profile,
            "environment": self.settings.environment,
            "default_workers": {t: (f"{t}/{w.worker_id}" if w else None) for t, w in self.default_workers().items()},
            "health": {"status": health, "reasons": [r.as_dict() for r in health_reasons]},
            "readiness": {
                "ready": not blocking,
                "reasons": [r.as_dict() for r in blocking],
                "warnings": [r.as_dict() for r in warnings],
            },
            "components": {name: c.as_dict() for name, c in self.all_components().items()},
            "backends": self.backends(),
            "settings_warnings": list(self.settings.warnings),
            "workspace": self.registry.describe(),
            "sensors": self.sensors.describe() if self.sensors is not None else {},
        }

    def summary_line(self) -> str:
        blocking, _ = self.readiness()
        summary = self.registry.summary()
        parts = [
            f"profile={self.settings.profile}",
            f"env={self.settings.environment}",
            f"workspace={self.registry.root}",
            f"tenants={summary.tenants}",
            f"workers={summary.workers}",
            f"failed_workers={summary.failed_workers}",
            *(f"{name}={c.status.value}" for name, c in self.components.items()),
            f"ready={'yes' if not blocking else 'no (' + ', '.join(r.code for r in blocking) + ')'}",
        ]
        return "[Runtime] " + " ".join(parts)


def build_runtime(settings: Settings) -> Runtime:
    """Build components in dependency order. Blocking: call it from a thread in async code."""
    registry = WorkspaceRegistry.from_settings(settings, cache=True)
    llm = LLMClient(load_model_config(settings))
    runtime = Runtime(
        settings=settings,
        registry=registry,
        model=llm.config.state,
        llm=llm,
        tools=ToolRuntime(
            registry.root, _script_dir(settings), workers=_loaded(registry), undo_max_late_s=undo_max_late_s(settings)
        ),
    )
    steps: list[tuple[str, Callable[[Runtime], ComponentRuntimeStatus]]] = [
        ("workspace", _workspace),
        ("redis", _redis),
        ("llm", _llm),
        ("task_governance", _governance),
        ("tools", _tools),
        ("sandbox", _sandbox),
        ("hot_reload", _hot_reload),
        ("langgraph", _langgraph),
    ]
    for name, build in steps:
        try:
            runtime.components[name] = build(runtime)
        except Exception as exc:  # an optional component must not stop start-up
            log.exception("component %s failed to start", name)
            runtime.components[name] = ComponentRuntimeStatus(
                name, ComponentStatus.FAILED, f"{type(exc).__name__}: {exc}"
            )
    return runtime


def build_router(runtime: Runtime) -> WorkerRouter:
    """The pipeline's parts, each with the backend the profile chose (files, or Redis)."""
    root = runtime.registry.root
    url = runtime.settings.redis_url
    aredis = aioredis.Redis.from_url(url) if runtime.redis is not None and url else None
    runtime.aredis = aredis
    files = runtime.files or DIRECT
    store: SessionStore = RedisSessionStore(aredis) if aredis is not None else FileSessionStore(root, files=files)
    confirmations = ConfirmationStore(root)
    sessions = SessionManager(store)
    tasks = TaskLifecycle(root, owner=runtime.leases.instance_id if runtime.leases is not None else None, files=files)
    return WorkerRouter(
        registry=runtime.registry,
        llm=runtime.llm,
        tools=runtime.tools,
        sessions=sessions,
        queue=ThreadQueue(aredis),
        tasks=tasks,
        governance=TaskGovernanceStage(root, approvals=ApprovalResolver(confirmations), files=files),
        confirmations=confirmations,
        matcher=SkillMatcher(),
        memory=MemoryService(root, MemoryConfig.from_values(runtime.settings.values), llm=runtime.llm, files=files),
        files=files,
        checkpoints=checkpoint_stores(root, runtime.redis),  # LangGraph checkpoints: Redis when shared
        service=ServiceDesk(runtime.registry, sessions, tasks, runtime.tools.messaging),
    )


async def build_autonomy(runtime: Runtime) -> None:
    """The event bus, the inbox (files, or Redis when shared), the heartbeat and the duty scheduler;
    after build_router."""
    assert runtime.router is not None
    root = runtime.registry.root
    url = runtime.settings.redis_url
    if runtime.redis is not None and url:  # each owns its client and closes it at stop
        redis_bus = RedisEventBus(url)
        await redis_bus.start()
        runtime.bus = redis_bus
        runtime.inbox = RedisInboxStore(url, bus=redis_bus)
    else:
        runtime.bus = InProcessEventBus()
        runtime.inbox = FileInboxStore(root, bus=runtime.bus)
    runtime.inbox_aggregate = InboxAggregate(runtime.inbox, bus=runtime.bus)
    runtime.tools.undo.announce = undo_events(runtime.bus)
    if runtime.metrics is None:  # condition triggers read inbox counts and metrics reported over the API
        runtime.metrics = WorkerMetrics(root, runtime.inbox)
    settings = heartbeat_settings(runtime.settings)
    runtime.heartbeat = HeartbeatService.build(root, runtime.router, runtime.inbox_aggregate, settings, bus=runtime.bus)
    runtime.duties = DutyScheduler(
        DutyStore(root), partial(route_through, runtime.router), bus=runtime.bus, metrics=runtime.metrics
    )
    runtime.duty_outcomes = build_duty_outcomes(runtime.router, runtime.registry.worker, runtime.bus)
    runtime.duties.outcomes = runtime.router.duty_outcomes = runtime.duty_outcomes
    # Policy: briefs (delivery: the lead adapts BriefSink to the channels' sender) and WAITING plans.
    policy_of = registry_policy(runtime.registry)
    shared = runtime.redis is not None and url
    waiting_store: WaitingStore = RedisWaitingStore(url) if shared and url else FileWaitingStore(root)
    brief_store: BriefStore = RedisBriefStore(runtime.redis) if shared and runtime.redis else FileBriefStore(root)
    runtime.briefs = BriefService(
        brief_store,
        policy_of=policy_of,
        waiting=waiting_store,
        done=joined(
            done_runs(runtime.router.tasks, root), held_calls(runtime.tools.undo), held_results(runtime.router.tasks)
        ),
    )
    runtime.waiting = WaitingService(
        waiting_store,
        partial(resume_through, runtime.router),
        on_timeout=partial(timeout_to_brief, runtime.briefs),
        on_end=partial(cancel_parked, runtime.router),  # a cancelled or closed plan ends its parked run
        bus=runtime.bus,
        inbox=runtime.inbox,  # a sensed fact whose payload has a match_key wakes its plans
        policy_of=policy_of,
        scan_interval_s=scan_interval(runtime.settings),
        retention_s=runtime.settings.number("GENWORKER_WAITING_RETENTION_DAYS", 30, 1, 3650) * 86_400,
    )
    runtime.tools.waits.park = partial(park_run, runtime.waiting, runtime.router)  # the wait_for_event tool
    build_lifecycle(runtime)


async def _after(event: asyncio.Event, then: Callable[[], Awaitable[None]]) -> None:
    await event.wait()
    await then()


def build_lifecycle(runtime: Runtime) -> None:
    """Goals, suggestions, feedback, confirmation notices and reminders, the IM commands' backend;
    after the inbox and the bus exist."""
    assert runtime.router is not None
    root, router, registry = runtime.registry.root, runtime.router, runtime.registry
    settings = lifecycle_settings(runtime.settings)
    runtime.goals = GoalAggregate(root, bus=runtime.bus)
    runtime.suggestions = SuggestionAggregate(SuggestionStore(root), runtime.goals)
    runtime.feedback = FeedbackStore(root)

    def reports_to(tenant_id: str, worker_id: str) -> str | None:
        worker = registry.worker(tenant_id, worker_id)
        return (worker.persona.identity.reports_to or None) if worker is not None else None

    notifier = InboxConfirmationNotifier(runtime.inbox, runtime.bus, escalate_to=reports_to)
    router.confirmations.notifier = notifier  # its `notify` (briefs' budget + channel) is set at start
    evaluator = (
        GoalEvaluator(runtime.llm, tier=settings.goal_eval_tier, timeout_s=settings.goal_eval_timeout_s)
        if settings.goal_evaluation
        else None
    )
    projector = GoalProgressProjector(runtime.goals, router.tasks, evaluator, bus=runtime.bus, inbox=runtime.inbox)
    router.tasks.on_completed.append(projector.after_run)  # each completed run judged against its goal task
    checker = GoalProgressChecker(
        runtime.goals,
        projector,
        bus=runtime.bus,
        inbox=runtime.inbox,
        threshold=settings.deviation_threshold,
    )
    detectors = SuggestionDetectors(runtime.suggestions.store, router.tasks, runtime.goals)
    runtime.lifecycle = LifecycleJobs(
        registry.workers,
        settings,
        checker=checker,
        reminders=ConfirmationReminders(
            router.confirmations,
            notifier,
            policy_of=confirmation_policy_of(registry_policy(registry)),
            close_run=partial(cancel_waiting_run, router),
        ),
        detect=detectors.run,
    )
    runtime.command_backend = AutonomyCommandBackend(
        router, runtime.suggestions, runtime.feedback, runtime.goals, waiting=runtime.waiting
    )


def _workspace(runtime: Runtime) -> ComponentRuntimeStatus:
    registry = runtime.registry
    if not registry.root.is_dir():
        return ComponentRuntimeStatus(
            "workspace", ComponentStatus.FAILED, f"workspace folder {registry.root} does not exist", "filesystem"
        )
    summary = registry.load_all()
    errors = [i for i in registry.issues() if i.severity == "error"]
    details = {"tenants": summary.tenants, "workers": summary.workers, "failed_workers": summary.failed_workers}
    if summary.tenants == 0:
        reason = str(errors[0]) if errors else "no tenants under tenants/"
        return ComponentRuntimeStatus("workspace", ComponentStatus.FAILED, reason, "filesystem", details)
    if errors:
        return ComponentRuntimeStatus(
            "workspace", ComponentStatus.DEGRADED, f"{len(errors)} errors; first: {errors[0]}", "filesystem", details
        )
    return ComponentRuntimeStatus("workspace", ComponentStatus.READY, "", "filesystem", details)


def _langgraph(runtime: Runtime) -> ComponentRuntimeStatus:
    """The LangGraph engine: without the extra, langgraph skills run their fallback (docs/engines.md)."""
    from genworker.engine.langgraph import langgraph_missing

    missing = langgraph_missing()
    if missing:
        reason = f"{missing}: langgraph skills run their fallback"
        return ComponentRuntimeStatus("langgraph", ComponentStatus.DISABLED, reason)
    backend = "redis" if runtime.redis is not None else "filesystem"
    return ComponentRuntimeStatus("langgraph", ComponentStatus.READY, "", backend, {"checkpoints": backend})


def _redis(runtime: Runtime) -> ComponentRuntimeStatus:
    url = runtime.settings.redis_url
    if not url:
        return ComponentRuntimeStatus(
            "redis", ComponentStatus.DISABLED, "REDIS_URL not set: single-process file backends"
        )
    client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
    try:
        client.ping()
    except redis.RedisError as exc:
        client.close()
        return ComponentRuntimeStatus(
            "redis", ComponentStatus.DEGRADED, f"cannot reach {_safe_url(url)}: {exc}", "redis"
        )
    runtime.redis = client
    return ComponentRuntimeStatus("redis", ComponentStatus.READY, "", "redis", {"url": _safe_url(url)})


def _safe_url(url: str) -> str:
    """The URL without its password."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def _llm(runtime: Runtime) -> ComponentRuntimeStatus:
    model = runtime.model
    if model.configured:
        return ComponentRuntimeStatus("llm", ComponentStatus.READY, "", "litellm", {"source": model.source})
    status = ComponentStatus.FAILED if model.error else ComponentStatus.DISABLED
    return ComponentRuntimeStatus("llm", status, model.reason, "litellm")


def _governance(runtime: Runtime) -> ComponentRuntimeStatus:
    from genworker.worker.governance.decision_table import TABLE_VERSION

    folder = runtime.registry.root / "tenants"
    if not os.access(folder, os.W_OK):
        reason = f"{folder} is not writable: policy snapshots cannot be recorded"
        return ComponentRuntimeStatus("task_governance", ComponentStatus.FAILED, reason, "filesystem")
    return ComponentRuntimeStatus(
        "task_governance", ComponentStatus.READY, "", "filesystem", {"decision_table_version": TABLE_VERSION}
    )


def _loaded(registry: WorkspaceRegistry) -> WorkerLookup:
    def lookup(tenant_id: str, worker_id: str) -> tuple[Tenant, Worker] | None:
        state, worker = registry.tenant(tenant_id), registry.worker(tenant_id, worker_id)
        return (state.tenant, worker) if state is not None and worker is not None else None

    return lookup


def _script_dir(settings: Settings) -> Path | None:
    raw = settings.get("SCRIPT_TOOL_DIR")
    if not raw:
        return None
    path = Path(raw)
    return path if path.is_absolute() else settings.configs_dir.parent / path


def _tools(runtime: Runtime) -> ComponentRuntimeStatus:
    from genworker.tools.pipeline import ToolPipeline

    scripts = runtime.tools.script_tools(ToolPipeline())
    names = sorted({t.spec.name for t in runtime.tools.builtin()} | {t.spec.name for t in scripts})
    details = {
        "tools": names,
        "effect_sidecars": [str(p) for p in runtime.tools.effects.sidecars],
        "script_tool_dir": str(runtime.tools.script_dir or ""),
        "script_tool_issues": list(runtime.tools.script_issues),
    }
    if runtime.tools.script_issues:
        reason = f"{len(runtime.tools.script_issues)} script tools refused; first: {runtime.tools.script_issues[0]}"
        return ComponentRuntimeStatus("tools", ComponentStatus.DEGRADED, reason, "builtin+scripts", details)
    return ComponentRuntimeStatus("tools", ComponentStatus.READY, "", "builtin", details)


def _sandbox(runtime: Runtime) -> ComponentRuntimeStatus:
    from genworker.tools.sandbox import sandbox_status

    status = sandbox_status()
    isolation = str(status.get("isolation", ""))
    if isolation == "bwrap":
        return ComponentRuntimeStatus("sandbox", ComponentStatus.READY, "", isolation, status)
    reason = str(status.get("reason") or f"bubblewrap unavailable; isolation is {isolation}")
    return ComponentRuntimeStatus("sandbox", ComponentStatus.DEGRADED, reason, isolation, status)


def _hot_reload(runtime: Runtime) -> ComponentRuntimeStatus:
    if not runtime.settings.hot_reload:
        return ComponentRuntimeStatus("hot_reload", ComponentStatus.DISABLED, "GENWORKER_HOT_RELOAD=false")
    runtime.watcher = WorkspaceWatcher(runtime.registry, debounce_ms=runtime.settings.hot_reload_debounce_ms)
    return ComponentRuntimeStatus("hot_reload", ComponentStatus.READY, "", "watchfiles")
