"""What a started runtime runs: `assemble` builds every service in dependency order, each fully
wired when built, and registers how to stop it on one `AsyncExitStack`.

The stack unwinds in the reverse order of building, so a service stops before what it uses; a
part that fails to build unwinds the stack at once, stopping the parts built before it, and the
error reaches the caller. `Services` is immutable: nothing is "not built yet" on a started runtime.

Variants are chosen by backend here and nowhere else: files, or Redis when the profile shares one.
Three true cycles of the domain are closed in one place, `_close_cycles`, after both ends exist:
the router's delegate/park tools start runs through the router, WAITING plans resume through it,
and the channels' replies use the IM commands' backend, which reads WAITING plans.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Protocol

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
from genworker.autonomy.conflicts.service import ConflictService, build_conflicts, one_card
from genworker.autonomy.duties import DutyScheduler, DutyStore, WorkerMetrics, route_through
from genworker.autonomy.duties.outcomes import DutyOutcomes, build_duty_outcomes
from genworker.autonomy.goals import GoalAggregate, GoalEvaluator, GoalProgressChecker, GoalProgressProjector
from genworker.autonomy.goals.jobs import LifecycleJobs, confirmation_policy_of, lifecycle_settings
from genworker.autonomy.heartbeat import HeartbeatService, OwnerNotices, heartbeat_settings
from genworker.autonomy.inbox import FileInboxStore, InboxAggregate, InboxFacts, InboxStore, RedisInboxStore
from genworker.autonomy.learning import LearningService, build_learning
from genworker.autonomy.sensing import SensorRegistry
from genworker.autonomy.spaces import SpaceService, build_spaces, pending_spaces
from genworker.autonomy.suggestions import FeedbackStore, SuggestionAggregate, SuggestionDetectors, SuggestionStore
from genworker.autonomy.waiting import FileWaitingStore, RedisWaitingStore, WaitingService, WaitingStore
from genworker.autonomy.waiting.replies import ChannelReplies
from genworker.autonomy.waiting.resume import registry_policy, resume_through, scan_interval, timeout_to_brief
from genworker.autonomy.waiting.runs import cancel_parked, park_run
from genworker.bus import EventBus, InProcessEventBus, RedisEventBus
from genworker.channels.email import EmailPolling
from genworker.channels.ingest import Channels, build_channels, redelivery_policy
from genworker.channels.longconn import LongConnections, build_long_connections, stop_long_connections
from genworker.channels.outbound import ChannelDelivery, VendorEndpoints
from genworker.channels.registry import ChannelRegistry
from genworker.cluster.ownership import Ownership, RedisLiveInstances
from genworker.conversation import FileSessionStore, RedisSessionStore, SessionManager, SessionStore, ThreadQueue
from genworker.delivery.outbox import Outbox, outbox_events
from genworker.experiments import ExperimentService
from genworker.llm.bookkeeping import defer_bookkeeping, restore_task_factory, turns_running
from genworker.llm.client import LLMClient
from genworker.memory import MemoryConfig, MemoryService
from genworker.observability.status import ComponentRuntimeStatus
from genworker.runtime.scope import AutonomyScope
from genworker.settings import Settings
from genworker.streaming.trace import RunTraceFiles
from genworker.supervision import Supervision
from genworker.tools.environment import ToolRuntime, undo_events
from genworker.worker.confirmations.reminders import ConfirmationReminders
from genworker.worker.confirmations.resolve import cancel_waiting_run
from genworker.worker.confirmations.store import ConfirmationStore
from genworker.worker.context.tokens import load_tokenizer
from genworker.worker.delegation import Delegation, DelegationLimits
from genworker.worker.engine_runs import checkpoint_stores
from genworker.worker.governance import ApprovalResolver, TaskGovernanceStage
from genworker.worker.handoff import HandOffs
from genworker.worker.lifecycle import TaskLifecycle
from genworker.worker.lifecycle.leases import DEFAULT_TTL, FileInstanceLeases, InstanceLeases, RedisInstanceLeases
from genworker.worker.lifecycle.leases import REDIS_PREFIX as INSTANCE_PREFIX
from genworker.worker.router import WorkerRouter
from genworker.worker.service import ServiceDesk
from genworker.worker.skill_matcher import SkillMatcher
from genworker.workspace.registry import WorkspaceRegistry
from genworker.write_journal import DIRECT, DurableFiles, JournaledFiles, recover_journals

__all__ = ["Loaded", "Services", "assemble", "build_router", "spawn"]

log = logging.getLogger("genworker.runtime")


class Loaded(Protocol):
    """What `build_runtime` loaded, and the runtime's own loops, which the services are built from
    (composition.Runtime)."""

    settings: Settings
    registry: WorkspaceRegistry
    llm: LLMClient
    tools: ToolRuntime
    redis: redis.Redis | None
    components: dict[str, ComponentRuntimeStatus]
    background: set[asyncio.Task[None]]

    async def hold_lease(self, leases: InstanceLeases, router: WorkerRouter, stop: asyncio.Event) -> None: ...

    async def consolidate_memory(self, memory: MemoryService, scope: AutonomyScope, stop: asyncio.Event) -> None: ...

    async def follow_ownership(self, scope: AutonomyScope, interval_s: float, stop: asyncio.Event) -> None: ...

    async def watch_redis(self, url: str, stop: asyncio.Event) -> None: ...


@dataclass(frozen=True, slots=True)
class Services:
    """Every service of a started runtime, each built and wired."""

    leases: InstanceLeases  # this process's lease; runs it owns carry its instance id
    files: DurableFiles  # the write journal run records, sessions and episodes go through (or direct writes)
    aredis: aioredis.Redis | None  # the async client sessions and thread locks share; None: file backends
    router: WorkerRouter
    bus: EventBus
    inbox: InboxStore  # sensors write here
    inbox_aggregate: InboxAggregate  # the only thing that changes item state
    metrics: WorkerMetrics  # what condition triggers read
    heartbeat: HeartbeatService
    duties: DutyScheduler
    duty_outcomes: DutyOutcomes  # a duty run's contract checks, deliveries and escalations
    goals: GoalAggregate
    suggestions: SuggestionAggregate
    feedback: FeedbackStore
    lifecycle: LifecycleJobs  # goal checks, suggestion detection, confirmation reminders
    briefs: BriefService  # interruption budget + scheduled briefs
    waiting: WaitingService  # WAITING plans: event wake-ups + timeout scan
    conflicts: ConflictService  # the Conflict Arbiter: plan-time and commit-time checks, cases
    learning: LearningService  # feedback -> learned policy versions: shadow, applied, rolled back
    spaces: SpaceService  # context spaces: sensed facts gathered before they become tasks (opt-in per worker)
    experiments: ExperimentService  # isolated variants of one question, the best successful one a candidate
    command_backend: AutonomyCommandBackend  # the IM commands' backend
    delivery: ChannelDelivery  # outbound replies and proactive sends
    outbox: Outbox  # proactive sends once per key, re-sent until delivered
    channels: Channels  # the IM webhooks' ingress: journal, processor
    long_connections: LongConnections  # Slack Socket Mode, Feishu/Lark ws, DingTalk Stream
    sensors: SensorRegistry
    scope: AutonomyScope  # the workers whose heartbeat, sensors, duties and briefs run in this process


def spawn(stack: AsyncExitStack, name: str, run: Callable[[asyncio.Event], Awaitable[None]]) -> asyncio.Task[None]:
    """Run `run(stop)` as a task until the stack unwinds to it: then `stop` is set and the task awaited."""
    stop = asyncio.Event()
    task = asyncio.create_task(_coro(run, stop), name=name)

    async def halt() -> None:
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    stack.push_async_callback(halt)
    return task


async def _coro(run: Callable[[asyncio.Event], Awaitable[None]], stop: asyncio.Event) -> None:
    await run(stop)


async def assemble(runtime: Loaded, stack: AsyncExitStack) -> Services:
    """Build, wire and start every service of `runtime` (after `build_runtime`), in dependency order."""
    settings, registry, tools = runtime.settings, runtime.registry, runtime.tools
    root = registry.root
    # File stores run in threads; LiteLLM's callbacks share the default pool, which is only cpu+4
    # wide. A wider pool keeps a run's writes from queueing behind them.
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(max_workers=32, thread_name_prefix="io"))
    defer_bookkeeping(loop)  # LiteLLM's after-call logging waits until the turn has ended
    stack.callback(restore_task_factory, loop)
    tokenizer = asyncio.create_task(asyncio.to_thread(load_tokenizer), name="load-tokenizer")
    stack.push_async_callback(_settled, tokenizer)

    leases = _instance_leases(runtime.redis, root, settings)
    await asyncio.to_thread(leases.renew)
    files = await _open_write_journal(settings, root, stack)
    aredis = _async_redis(runtime.redis, settings.redis_url, stack)
    memory = MemoryService(root, MemoryConfig.from_values(settings.values), llm=runtime.llm, files=files)
    stack.push_async_callback(_close_memory, memory)
    router = build_router(runtime, files=files, owner=leases.instance_id, aredis=aredis, memory=memory)
    recovered = await router.tasks.recover_interrupted(alive=leases.alive)
    if recovered:
        log.warning("[Runtime] %d runs left running by a stopped process are now interrupted", len(recovered))
    spawn(stack, "instance-lease", partial(runtime.hold_lease, leases, router))
    if runtime.redis is not None and settings.redis_url:  # /readiness and new work follow Redis
        spawn(stack, "redis-watch", partial(runtime.watch_redis, settings.redis_url))
    await tools.start((state.tenant, worker) for state in registry.tenants() for worker in state.workers.values())
    stack.push_async_callback(tools.stop)

    bus, inbox = await _bus_and_inbox(settings, runtime.redis, root, stack)
    inbox_aggregate = InboxAggregate(inbox, bus=bus)
    tools.undo.announce = undo_events(bus)
    tools.undo.owner = leases.instance_id  # deferred calls left by a stopped process: run or expire
    await tools.undo.recover(alive=leases.alive)
    conflicts = build_conflicts(root, registry, router, bus, aredis)
    await conflicts.start()
    stack.push_async_callback(conflicts.stop)

    delivery = ChannelDelivery(ChannelRegistry(registry), endpoints=VendorEndpoints.from_settings(settings.get))
    stack.push_async_callback(delivery.aclose)
    outbox = Outbox(root, delivery.send_to, redelivery_policy(settings.number), owner=leases.instance_id)
    outbox.announce = outbox_events(bus)
    bindings = delivery.channels.bindings
    tools.messaging.outbox = outbox
    tools.messaging.worker = tools.mailbox.worker = registry.worker
    tools.messaging.bindings = bindings

    shared_url = settings.redis_url if runtime.redis is not None else None
    waiting_store: WaitingStore = RedisWaitingStore(shared_url) if shared_url else FileWaitingStore(root)
    brief_store: BriefStore = RedisBriefStore(runtime.redis) if runtime.redis is not None else FileBriefStore(root)
    policy_of = registry_policy(registry)
    spaces = build_spaces(root, registry, runtime.llm, router.tasks, runtime.redis)
    briefs = BriefService(
        brief_store,
        sink=ChannelBriefSink(delivery),
        policy_of=policy_of,
        waiting=waiting_store,
        done=joined(
            done_runs(router.tasks, root),
            held_calls(tools.undo),
            held_results(router.tasks),
            conflicts.brief_items(),
            pending_spaces(spaces),
        ),
    )
    briefs.review = conflicts.semantic_review(runtime.llm)  # two exclusive items: one conflict card
    waiting = WaitingService(
        waiting_store,
        partial(resume_through, router),
        on_timeout=partial(timeout_to_brief, briefs),
        on_end=partial(cancel_parked, router),  # a cancelled or closed plan ends its parked run
        bus=bus,
        inbox=inbox,  # a sensed fact whose payload has a match_key wakes its plans
        policy_of=policy_of,
        scan_interval_s=scan_interval(settings),
        retention_s=settings.number("GENWORKER_WAITING_RETENTION_DAYS", 30, 1, 3650) * 86_400,
        owner=leases.instance_id,  # plans it resumes name this instance, for recovery after a crash
    )

    metrics = WorkerMetrics(root, inbox)  # condition triggers read inbox counts and metrics reported over the API
    heartbeat = HeartbeatService.build(root, router, inbox_aggregate, heartbeat_settings(settings), bus=bus)
    heartbeat.runner.notify_owner = OwnerNotices(briefs, outbox, bindings)
    heartbeat.runner.spaces = spaces  # facts of the workers that opted in go through their spaces
    duty_outcomes = build_duty_outcomes(router, registry.worker, bus)
    stack.push_async_callback(duty_outcomes.escalations.stop)
    duties = DutyScheduler(
        DutyStore(root), partial(route_through, router), bus=bus, metrics=metrics, outcomes=duty_outcomes
    )
    router.duty_outcomes = duty_outcomes

    goals = GoalAggregate(root, bus=bus)
    suggestions = SuggestionAggregate(SuggestionStore(root), goals)
    feedback = FeedbackStore(root)
    command_backend = AutonomyCommandBackend(router, suggestions, feedback, goals, waiting=waiting, conflicts=conflicts)
    briefs.confirmations, briefs.suggestions = one_card(command_backend.confirmations), command_backend.suggestions
    # each worker's autonomy runs in one process: here all of them, or in the shared profile those
    # whose claim this process holds (given up after the schedulers below have stopped)
    scope = AutonomyScope(registry, _ownership(aredis, leases))
    await scope.beat()
    stack.push_async_callback(scope.release)
    learning = build_learning(root, registry, router.tasks, suggestions, bus, scope.runs_here)
    router.governance.learned, command_backend.learning = learning.overlay, learning
    briefs.learned = learning.briefs  # the learned interruption budget and priorities
    await learning.start()
    stack.push_async_callback(learning.stop)
    lifecycle = _lifecycle(runtime, router, goals, suggestions, inbox, bus, briefs, scope)

    await outbox.start(alive=leases.alive)  # what a stopped process left is picked up
    stack.push_async_callback(outbox.stop)
    await duty_outcomes.connect(outbox, bindings)  # duty results and escalations go out through it too
    # channels: verified IM webhooks -> dedupe -> durable journal -> processor (genworker.channels)
    channels = await build_channels(
        registry,
        router,
        aredis=aredis,
        replier=delivery,
        inbox=InboxFacts(inbox),  # watched group messages
        commands_backend=command_backend,
        policy=redelivery_policy(settings.number),
        owner=leases.instance_id,  # the messages it accepts are its own; those of dead processes it takes
        alive=leases.alive,
    )
    stack.push_async_callback(channels.stop)
    _close_cycles(runtime, router, waiting, channels, delivery)
    email = EmailPolling(root, channels.registry, channels.ingest.accept)  # IMAP conversation
    spawn(stack, "email-channel", email.run)
    # their events enter the same ingest; stopped first, so no new events while the processor stops
    long_connections = build_long_connections(settings, runtime.components, channels, leases.instance_id, aredis)
    stack.push_async_callback(stop_long_connections, long_connections)

    workers = scope.workers()
    await spaces.start(w.key for w in workers)
    stack.push_async_callback(spaces.stop)
    await heartbeat.start(workers)
    stack.push_async_callback(heartbeat.stop)
    await duties.start(workers)
    stack.push_async_callback(duties.stop)
    await lifecycle.start()
    stack.push_async_callback(lifecycle.stop)
    await briefs.start(workers)
    stack.push_async_callback(briefs.stop)
    # first plans a stopped process left mid-resume or mid-cancel
    everyone = registry.workers()
    await waiting.recover(((w.tenant_id, w.worker_id) for w in everyone), leases.alive)
    await waiting.start(only=scope.runs_here if scope.shared else None)  # the workers whose autonomy runs here
    stack.push_async_callback(waiting.stop)
    if memory.config.enabled:
        spawn(stack, "memory", partial(runtime.consolidate_memory, memory, scope))
    sensors = SensorRegistry(root, inbox, runs_here=scope.runs_here)
    stack.push_async_callback(sensors.stop)
    await sensors.sync(workers)
    if scope.shared:  # workers move here when their owner stops, and away when a process joins
        interval_s = leases.ttl.total_seconds() / 3
        spawn(stack, "worker-ownership", partial(runtime.follow_ownership, scope, interval_s))
    experiments = ExperimentService(router, router.confirmations, owner=leases.instance_id, alive=leases.alive)
    await experiments.recover()  # what a stopped process left running is interrupted
    stack.push_async_callback(experiments.stop)
    await tokenizer  # ready only once the first turn will not load it on the loop
    return Services(
        leases=leases,
        files=files,
        aredis=aredis,
        router=router,
        bus=bus,
        inbox=inbox,
        inbox_aggregate=inbox_aggregate,
        metrics=metrics,
        heartbeat=heartbeat,
        duties=duties,
        duty_outcomes=duty_outcomes,
        goals=goals,
        suggestions=suggestions,
        feedback=feedback,
        lifecycle=lifecycle,
        briefs=briefs,
        waiting=waiting,
        conflicts=conflicts,
        learning=learning,
        spaces=spaces,
        experiments=experiments,
        command_backend=command_backend,
        delivery=delivery,
        outbox=outbox,
        channels=channels,
        long_connections=long_connections,
        sensors=sensors,
        scope=scope,
    )


def build_router(
    runtime: Loaded,
    *,
    files: DurableFiles = DIRECT,
    owner: str | None = None,
    aredis: aioredis.Redis | None = None,
    memory: MemoryService | None = None,
) -> WorkerRouter:
    """The pipeline's parts, each with the backend the profile chose (files, or Redis)."""
    root = runtime.registry.root
    if memory is None:
        memory = MemoryService(root, MemoryConfig.from_values(runtime.settings.values), llm=runtime.llm, files=files)
    store: SessionStore = RedisSessionStore(aredis) if aredis is not None else FileSessionStore(root, files=files)
    confirmations = ConfirmationStore(root)
    sessions = SessionManager(store)
    tasks = TaskLifecycle(root, owner=owner, files=files)
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
        memory=memory,
        files=files,
        checkpoints=checkpoint_stores(root, runtime.redis),  # LangGraph checkpoints: Redis when shared
        service=ServiceDesk(runtime.registry, sessions, tasks, runtime.tools.messaging),
        supervision=Supervision(root, runtime.llm, confirmations),
        traces=RunTraceFiles(root),  # each run's context and AG-UI timeline, for the run view
    )


def _close_cycles(
    runtime: Loaded, router: WorkerRouter, waiting: WaitingService, channels: Channels, delivery: ChannelDelivery
) -> None:
    """The domain's cycles, closed once both ends exist: tools that start runs through the router
    (delegation, hand-over, parking a run on a WAITING plan), and WAITING resumes answered in the
    IM conversation that parked them (docs/waiting.md)."""
    tools = runtime.tools
    tools.delegation.runner = Delegation(router, runtime.background, DelegationLimits.from_settings(runtime.settings))
    if router.service is not None:
        tools.escalation.hand_over = HandOffs(router.service).hand_over
    replies = ChannelReplies(delivery, channels.ingest.dedupe, channels.processor.origin)
    waiting.on_resume = partial(resume_through, router, replies=replies)
    tools.waits.park = partial(park_run, waiting, router, address=replies.address)


def _lifecycle(
    runtime: Loaded,
    router: WorkerRouter,
    goals: GoalAggregate,
    suggestions: SuggestionAggregate,
    inbox: InboxStore,
    bus: EventBus,
    briefs: BriefService,
    scope: AutonomyScope,
) -> LifecycleJobs:
    """Goal progress (each completed run judged against its goal task), suggestion detection, and
    confirmation notices within the briefs' interruption budget, with their reminders."""
    registry = runtime.registry
    settings = lifecycle_settings(runtime.settings)

    def reports_to(tenant_id: str, worker_id: str) -> str | None:
        worker = registry.worker(tenant_id, worker_id)
        return (worker.persona.identity.reports_to or None) if worker is not None else None

    notifier = InboxConfirmationNotifier(inbox, bus, notify=through_briefs(briefs), escalate_to=reports_to)
    router.confirmations.notifier = notifier
    evaluator = (
        GoalEvaluator(runtime.llm, tier=settings.goal_eval_tier, timeout_s=settings.goal_eval_timeout_s)
        if settings.goal_evaluation
        else None
    )
    projector = GoalProgressProjector(goals, router.tasks, evaluator, bus=bus, inbox=inbox)
    router.tasks.on_completed.append(projector.after_run)
    checker = GoalProgressChecker(goals, projector, bus=bus, inbox=inbox, threshold=settings.deviation_threshold)
    return LifecycleJobs(
        scope.workers,  # goal checks and reminders for the workers whose autonomy runs here
        settings,
        checker=checker,
        reminders=ConfirmationReminders(
            router.confirmations,
            notifier,
            policy_of=confirmation_policy_of(registry_policy(registry)),
            close_run=partial(cancel_waiting_run, router),
        ),
        detect=SuggestionDetectors(suggestions.store, router.tasks, goals).run,
    )


async def _bus_and_inbox(
    settings: Settings, client: redis.Redis | None, root: Path, stack: AsyncExitStack
) -> tuple[EventBus, InboxStore]:
    """The event bus and the inbox: Redis when the profile shares one, else in-process and files."""
    url = settings.redis_url
    if client is not None and url:  # each owns its client and closes it at stop
        redis_bus = RedisEventBus(url)
        await redis_bus.start()
        stack.push_async_callback(redis_bus.close)
        inbox = RedisInboxStore(url, bus=redis_bus)
        stack.push_async_callback(inbox.aclose)
        return redis_bus, inbox
    bus = InProcessEventBus()
    stack.push_async_callback(bus.close)
    return bus, FileInboxStore(root, bus=bus)


def _ownership(aredis: aioredis.Redis | None, leases: InstanceLeases) -> Ownership | None:
    """In the shared profile, worker ownership over the live instance leases; None in one process."""
    if aredis is None:
        return None
    return Ownership(aredis, leases.instance_id, RedisLiveInstances(aredis, INSTANCE_PREFIX), ttl=leases.ttl)


def _instance_leases(client: redis.Redis | None, root: Path, settings: Settings) -> InstanceLeases:
    """This process's lease; its ttl bounds how long a dead process's runs and workers wait for the others."""
    ttl = timedelta(seconds=settings.number("GENWORKER_INSTANCE_LEASE_TTL_S", DEFAULT_TTL.total_seconds(), 3, 3600))
    return RedisInstanceLeases(client, ttl=ttl) if client is not None else FileInstanceLeases(root, ttl=ttl)


def _async_redis(client: redis.Redis | None, url: str | None, stack: AsyncExitStack) -> aioredis.Redis | None:
    if client is None or not url:
        return None
    aredis = aioredis.Redis.from_url(url)
    stack.push_async_callback(aredis.aclose)
    return aredis


async def _open_write_journal(settings: Settings, root: Path, stack: AsyncExitStack) -> DurableFiles:
    """Finish the journals of stopped processes (before anything reads what they wrote), then open
    this process's, unless GENWORKER_WRITE_JOURNAL=false (every write fsyncs on its own)."""
    finished = await asyncio.to_thread(recover_journals, root)
    if finished:
        log.warning("[Runtime] finished %d write-journal segments left by a stopped process", finished)
    if not settings.flag("GENWORKER_WRITE_JOURNAL", True):
        return DIRECT
    interval = settings.number("GENWORKER_WRITE_JOURNAL_CHECKPOINT_S", 0.5, 0.01, 3600)
    # A lone turn syncs on the loop (nothing else waits for it); concurrent turns, and writers outside
    # any turn (bursts of API or webhook writes), share the sync thread's fdatasyncs.
    inline = settings.flag("GENWORKER_WRITE_JOURNAL_INLINE_SYNC", True)
    lone = (lambda: turns_running() == 1) if inline else (lambda: False)
    journal = await asyncio.to_thread(partial(JournaledFiles, root, interval_s=interval, sync_here=lone))
    stack.push_async_callback(asyncio.to_thread, journal.close)  # unwound last of the writers
    return journal


async def _close_memory(memory: MemoryService) -> None:
    await memory.learned()  # the last turns' index updates
    memory.close()  # the memory indexes' SQLite connections


async def _settled(task: asyncio.Task[None]) -> None:
    """A start-up task the stack may unwind past before it ended: wait for it, whatever it did."""
    with contextlib.suppress(BaseException):
        await task
