"""The composition root: `build_runtime` loads what the runtime is made of (settings, workspace,
model, tools) and reports each component's status; `Runtime.start` builds the services it runs
(runtime/assembly.py) on one `AsyncExitStack`, which `Runtime.stop` unwinds.

An optional component that fails to load is reported `degraded` or `failed` with its reason; it
never stops the runtime from starting. A service that fails to start does: the ones built before
it are stopped and the error is raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import redis

from genworker.llm.client import LLMClient
from genworker.llm.config_source import ModelConfigState, load_model_config
from genworker.memory import MemoryService
from genworker.memory.consolidation import consolidate_workspace
from genworker.observability.status import ComponentRuntimeStatus, ComponentStatus, Reason
from genworker.runtime.assembly import Services, assemble, spawn
from genworker.runtime.redis_health import REDIS_UNAVAILABLE, RedisWatch, client_for, ping, safe_url
from genworker.runtime.scope import AutonomyScope
from genworker.settings import Settings
from genworker.tools.environment import ToolRuntime, WorkerLookup, undo_max_late_s
from genworker.worker.lifecycle.leases import InstanceLeases
from genworker.worker.router import WorkerRouter
from genworker.workspace.models import Tenant
from genworker.workspace.registry import ReloadOutcome, WorkspaceRegistry
from genworker.workspace.snapshot import Worker
from genworker.workspace.watcher import WorkspaceWatcher

__all__ = ["GOVERNANCE_COMPONENTS", "Runtime", "RuntimeNotStarted", "build_runtime"]

log = logging.getLogger("genworker.runtime")

GOVERNANCE_COMPONENTS = ("task_governance",)
SHUTTING_DOWN = Reason("shutting_down", "the process is shutting down: it takes no new work", "runtime")
MODEL_ON_FIRST_USE = Reason(
    "model_loads_on_first_use",
    "GENWORKER_LLM_LOAD=first_use: the model layer (LiteLLM) loads with the first model call",
    "llm",
)


class RuntimeNotStarted(RuntimeError):
    """A started runtime's services were asked for before `start` or after `stop`."""


@dataclass
class Runtime:
    """What `build_runtime` loads (settings, workspace, model, tools) and, once `start` has run,
    the services it runs (`services`), stopped in reverse order by `stop`."""

    settings: Settings
    registry: WorkspaceRegistry
    llm: LLMClient
    tools: ToolRuntime
    components: dict[str, ComponentRuntimeStatus] = field(default_factory=dict)
    redis: redis.Redis | None = None  # the shared profile's client; None: single-process file backends
    watcher: WorkspaceWatcher | None = None  # None: GENWORKER_HOT_RELOAD=false
    memory_consolidations: int = 0  # passes of the memory consolidation job so far
    background: set[asyncio.Task[None]] = field(default_factory=set)  # runs started over the API
    draining: bool = False  # shutting down (`drain`): no new work, /readiness 503
    redis_watch: RedisWatch | None = None  # the shared profile's: whether Redis answers now
    _services: Services | None = None
    _stack: AsyncExitStack = field(default_factory=AsyncExitStack)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)  # reloads' tool refreshes

    @property
    def model(self) -> ModelConfigState:
        """The model configuration's state (a list LiteLLM refuses on first use turns it to an error)."""
        return self.llm.config.state

    @property
    def services(self) -> Services:
        """The started runtime's services; `RuntimeNotStarted` before `start` or after `stop`."""
        if self._services is None:
            raise RuntimeNotStarted("the runtime has not started (or has stopped)")
        return self._services

    # -- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        """Build and start every service (runtime/assembly.py); a part that fails stops the ones
        built before it, and the error is raised. The shared profile does not start without Redis
        (`genworker run` waits for it first): never on the single-process file backends."""
        if self.settings.profile == "shared" and self.redis is None:
            why = self.components["redis"].reason
            raise RuntimeError(f"the shared profile needs Redis and {why}: not starting on single-process backends")
        stack = self._stack
        try:
            services = await assemble(self, stack)
            if self.watcher is not None:
                self.watcher.on_reload = self._reloaded
                spawn(stack, "hot-reload", partial(self._watch, self.watcher))
        except BaseException:
            await self._unwind()
            raise
        self._services = services

    async def stop(self) -> None:
        """Stop every service, the last built first; runs whose client went away end first."""
        for run in list(self.background):
            with contextlib.suppress(asyncio.CancelledError):
                await run
        await self._unwind()

    async def drain(self, grace_s: float) -> None:
        """Shutting down (SIGTERM; the server has stopped taking connections): /readiness says so,
        what another process can do is handed over at once, the runs going on finish for up to
        `grace_s`, then the rest are cancelled (their streams end with a `shutting_down` error, their
        records `interrupted`: api/runs.py). `stop` follows."""
        self.draining = True
        services = self._services
        if services is None:
            return
        await self._hand_over(services)
        await self._finish_runs(grace_s)

    async def _hand_over(self, services: Services) -> None:
        """This process's schedules stop and its worker claims go (the next owners take them at their
        next beat), so do its IM long connections, and it leaves the live set that ownership hashes
        over; its lease still protects its runs until they have ended."""
        services.heartbeat.sync([])
        services.duties.sync([])
        services.briefs.sync([])
        steps: list[tuple[str, Callable[[], Awaitable[None]]]] = [
            ("sensors", partial(services.sensors.sync, [])),
            ("worker claims", services.scope.release),
            ("long connections", services.long_connections.stop),
            ("instance lease", partial(asyncio.to_thread, services.leases.drain)),
        ]
        for name, step in steps:
            try:
                await step()
            except Exception:  # Redis may be down: what is not released expires within the lease ttl
                log.exception("[Runtime] shutting down: handing over the %s failed", name)

    async def _finish_runs(self, grace_s: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        if self.background:
            log.info("[Runtime] shutting down: %d runs going on, waiting up to %.0f s", len(self.background), grace_s)
        while (going := [t for t in self.background if not t.done()]) and loop.time() < deadline:
            await asyncio.wait(going, timeout=deadline - loop.time())  # a run may start another (delegation)
        if going:
            log.warning("[Runtime] shutting down: %d runs still going after %.0f s interrupted", len(going), grace_s)
            for task in going:
                task.cancel()
            await asyncio.gather(*going, return_exceptions=True)

    async def _unwind(self) -> None:
        self._services = None
        try:
            await self._stack.aclose()
        finally:
            for task in list(self._tasks):
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            if self.redis is not None:
                await asyncio.to_thread(self.redis.close)

    async def consolidate_memory(self, memory: MemoryService, scope: AutonomyScope, stop: asyncio.Event) -> None:
        """Fold old episodes into summaries (originals archived) every `consolidate_every_s`, so each
        worker's active memory stays bounded; the first pass runs one interval after start. Only the
        workers whose autonomy runs in this process (`scope`): two processes never fold one's."""
        config = memory.config
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), config.consolidate_every_s)
            if stop.is_set():
                return
            older = timedelta(days=config.consolidate_after_days)
            try:
                reports = await asyncio.to_thread(
                    consolidate_workspace, self.registry.root, older_than=older, only=scope.runs_here
                )
            except Exception:  # housekeeping never takes the runtime down; next pass tries again
                log.exception("[Memory] consolidation failed")
                continue
            folded = sum(r.archived for r in reports.values())
            if folded:
                log.info("[Memory] consolidated %d old episodes across %d workers", folded, len(reports))
            self.memory_consolidations += 1

    async def hold_lease(self, leases: InstanceLeases, router: WorkerRouter, stop: asyncio.Event) -> None:
        """Renew this instance's lease (3 times per ttl) and, once per ttl, take over what processes
        that stopped renewing theirs left; release it when stopped, so the next process need not wait.
        After renewals failed (Redis was away), no sweep for a ttl: every live process renews first."""
        interval = leases.ttl.total_seconds() / 3
        beat = 0
        renewing = 0  # beats since the last failed renewal
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)
            if stop.is_set():
                break
            beat += 1
            try:
                await asyncio.to_thread(leases.renew)
                renewing += 1
                if beat % 3 == 0 and renewing >= 3 and self._services is not None:
                    await self.sweep_stopped_instances(leases)
            except Exception:  # Redis or the disk hiccuped: try again next beat
                renewing = 0
                log.exception("[Runtime] instance lease renewal failed")
        with contextlib.suppress(Exception):
            await asyncio.to_thread(leases.release)

    async def watch_redis(self, url: str, stop: asyncio.Event) -> None:
        """Shared profile: while Redis does not answer, /readiness says so and new work is refused."""
        self.redis_watch = RedisWatch(url)
        await self.redis_watch.run(stop)

    async def sweep_stopped_instances(self, leases: InstanceLeases) -> None:
        """Take over what processes that stopped renewing their lease left: their runs become
        `interrupted`, then the IM messages they had accepted are answered here, their deferred
        calls are run or expired, their WAITING resumes restarted."""
        services = self.services
        orphans = await services.router.tasks.recover_orphans(leases.alive)
        if orphans:
            log.warning("[Runtime] %d runs of a stopped runtime process are now interrupted", len(orphans))
        await services.channels.processor.take_over(leases.alive)
        await self.tools.undo.recover(alive=leases.alive)
        await services.outbox.recover(alive=leases.alive)
        workers = ((w.tenant_id, w.worker_id) for w in self.registry.workers())
        await services.waiting.recover(workers, leases.alive, at_start=False)

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
        services = self._services
        if services is None or self.draining:  # racing start-up or shutdown: start() reads the registry anyway
            return
        self._follow(services)
        services.long_connections.sync()
        task = asyncio.get_running_loop().create_task(self._refresh_tools(services), name=f"tools:{outcome.target}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _follow(self, services: Services) -> None:
        """Schedules, the heartbeat and briefs follow the workers whose autonomy runs here."""
        workers = services.scope.workers()
        services.heartbeat.sync(workers)
        services.duties.sync(workers)
        services.briefs.sync(workers)

    async def _refresh_tools(self, services: Services) -> None:
        """MCP servers and sensors follow the reloaded configuration (only changed ones restart)."""
        await self.tools.start(
            (state.tenant, worker) for state in self.registry.tenants() for worker in state.workers.values()
        )
        await services.sensors.sync(services.scope.workers())

    async def follow_ownership(self, scope: AutonomyScope, interval_s: float, stop: asyncio.Event) -> None:
        """Shared profile: every `interval_s`, refresh which workers' autonomy runs here, and move
        their heartbeat, sensors, duty schedules and briefs when that changed (a process stopped,
        died or joined). A failed beat is retried at the next one."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval_s)
            if stop.is_set():
                return
            if not self.draining:  # a draining process has given its workers up
                await self.beat_ownership(scope)

    async def beat_ownership(self, scope: AutonomyScope) -> None:
        """One ownership beat (the loop's step; tests call it to move workers without waiting)."""
        try:
            if await scope.beat() and self._services is not None:
                self._follow(self._services)
                await self._services.sensors.sync(scope.workers())
                self._services.waiting.rescan()  # the timeouts of workers taken over are due now
        except Exception:  # Redis hiccuped: the next beat tries again
            log.exception("[Runtime] worker ownership beat failed")

    async def _watch(self, watcher: WorkspaceWatcher, stop: asyncio.Event) -> None:
        try:
            await watcher.run(stop)
        except Exception as exc:  # the watcher must never take the server down
            log.exception("hot reload stopped")
            self.components["hot_reload"] = ComponentRuntimeStatus(
                "hot_reload", ComponentStatus.FAILED, f"watcher stopped: {exc}", "watchfiles"
            )

    # -- what the runtime can do ------------------------------------------------

    def default_workers(self) -> dict[str, Worker | None]:
        tenants = (
            [self.settings.default_tenant]
            if self.settings.default_tenant
            else [t.tenant_id for t in self.registry.tenants()]
        )
        return {t: self.registry.default_worker(t) for t in tenants if t}

    def refusal(self) -> Reason | None:
        """Why this process takes no new work now (a request that would start some gets 503 with
        it: api/app.py), or None: in the shared profile, Redis does not answer."""
        down = self.redis_watch.down if self.redis_watch is not None else None
        return Reason(REDIS_UNAVAILABLE, down, "redis") if down is not None else None

    def readiness(self) -> tuple[list[Reason], list[Reason]]:
        """(blocking reasons, non-blocking warnings) for the default chat path."""
        refused = self.refusal()
        blocking: list[Reason] = [r for r in (SHUTTING_DOWN if self.draining else None, refused) if r is not None]
        warnings: list[Reason] = []
        if not self.llm.configured:
            code = "model_config_invalid" if self.model.error else "model_not_configured"
            blocking.append(Reason(code, self.model.reason, "llm"))
        elif not self.llm.loaded:
            warnings.append(MODEL_ON_FIRST_USE)
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
            "sensors": self._services.sensors.describe() if self._services is not None else {},
            "autonomy_scope": self._services.scope.describe() if self._services is not None else {},
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
    client = client_for(url)
    why = ping(client, url)
    if why is not None:
        client.close()
        return ComponentRuntimeStatus("redis", ComponentStatus.DEGRADED, why, "redis")
    runtime.redis = client
    return ComponentRuntimeStatus("redis", ComponentStatus.READY, "", "redis", {"url": safe_url(url)})


def _llm(runtime: Runtime) -> ComponentRuntimeStatus:
    model = runtime.model
    if model.configured:
        details = {"source": model.source, "load": "first_use" if runtime.llm.config.load_on_first_use else "start"}
        return ComponentRuntimeStatus("llm", ComponentStatus.READY, "", "litellm", details)
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
