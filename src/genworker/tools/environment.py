"""Per-worker tool environments: one ToolPipeline per worker (builtin tools + that worker's
MCP servers), the scope a run may use, and their statuses for the debug endpoint.

Every pipeline has the step journal, the undo window and the commit check as its extra middlewares;
the undo window holds calls only in runs whose scope carries `undo_window_s`, and releases them here,
through the same pipeline, once their window ends. The commit check (`commits`) is the Conflict
Arbiter's, set by the composition root: right before a call changes a declared resource."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import SecretStr

from genworker.bus import EventBus, new_event
from genworker.observability.status import ComponentRuntimeStatus
from genworker.settings import Settings
from genworker.tools.audit import WorkerAuditSink
from genworker.tools.base import ToolCall
from genworker.tools.builtin import builtin_tools
from genworker.tools.builtin.bash import bash_execute_tool
from genworker.tools.builtin.delegation import DelegationSlot, delegation_tools
from genworker.tools.builtin.escalation import EscalationSlot, escalation_tools, unavailable_tools
from genworker.tools.builtin.execute_code import execute_code_tool
from genworker.tools.builtin.mailbox import MailboxSlot, mailbox_tools
from genworker.tools.builtin.messaging import MessagingSlot, messaging_tools
from genworker.tools.builtin.waiting import WaitSlot, wait_for_event_tool
from genworker.tools.context import Posture, ToolScope
from genworker.tools.effects import EffectResolver
from genworker.tools.journal import Journaling, StepJournal
from genworker.tools.middlewares.slot import MiddlewareSlot
from genworker.tools.middlewares.undo_window import DEFAULT_MAX_LATE_S, DeferredCall, UndoWindow
from genworker.tools.outcomes import ToolFailed, ToolOutcome
from genworker.tools.pipeline import ToolPipeline
from genworker.tools.script_tools import scan_script_tools
from genworker.tools.tool import Tool
from genworker.workspace.models import Tenant
from genworker.workspace.models.effects import EffectTable
from genworker.workspace.models.mcp import MCPServerConfig
from genworker.workspace.models.skill import named_tools
from genworker.workspace.snapshot import Worker

__all__ = ["ToolRuntime", "WorkerLookup", "WorkerTools", "undo_events"]

log = logging.getLogger("genworker.tools")

WorkerLookup = Callable[[str, str], tuple[Tenant, Worker] | None]  # (tenant_id, worker_id) -> loaded, or None


def undo_events(bus: EventBus) -> Callable[[DeferredCall], Awaitable[None]]:
    """The undo window's announcer: `undo.{state}` (undone, executed, failed, expired, outcome_unknown)."""

    async def announce(record: DeferredCall) -> None:
        payload = {k: record.as_json()[k] for k in ("undo_id", "run_id", "tool", "decided_by", "outcome")}
        event = new_event(
            f"undo.{record.state}",
            source="undo_window",
            tenant_id=record.tenant_id,
            worker_id=record.worker_id,
            payload=payload,
        )
        await bus.publish(event)

    return announce


@dataclass
class WorkerTools:
    pipeline: ToolPipeline
    mcp_configs: tuple[MCPServerConfig, ...] = ()
    mcp: object | None = None  # MCPManager, imported lazily (the SDK is heavy)
    effect_tables: dict[int, tuple[EffectTable, EffectTable]] = field(default_factory=dict)
    missing: dict[str, tuple[str, ...]] = field(default_factory=dict)  # as last reported (ToolRuntime.start)


class ToolRuntime:
    def __init__(
        self,
        workspace_root: Path,
        script_dir: Path | None = None,
        *,
        workers: WorkerLookup | None = None,
        undo_max_late_s: float = DEFAULT_MAX_LATE_S,
    ) -> None:
        self.root = workspace_root
        self.script_dir = script_dir
        self.script_issues: tuple[str, ...] = ()
        self.effects = EffectResolver(workspace_root)
        self.audit = WorkerAuditSink(workspace_root)
        self.journal = StepJournal(workspace_root)  # side-effecting calls, for crash recovery
        self.undo = UndoWindow(workspace_root, release=self.release, max_late_s=undo_max_late_s)
        self.workers = workers  # how a released call finds its tenant and worker
        self.waits = WaitSlot()  # wait_for_event parks runs here; the composition fills it
        self.messaging = MessagingSlot()  # send_message / send_email send through the outbox set here
        self.mailbox = MailboxSlot()  # email_search / email_list_folders find the worker's account here
        self.delegation = DelegationSlot()  # delegate_to_worker / spawn_* start child runs through it
        self.escalation = EscalationSlot()  # escalate_conversation hands a service conversation over
        self.commits = MiddlewareSlot()  # the Conflict Arbiter's commit-time check (autonomy/conflicts)
        self._workers: dict[tuple[str, str], WorkerTools] = {}

    def worker_dir(self, worker: Worker) -> Path:
        return self.root / "tenants" / worker.tenant_id / "workers" / worker.worker_id

    def builtin(self) -> list[Tool]:
        """The builtin tools every worker's pipeline has (execute_code unbound: names only)."""
        return [
            *builtin_tools(),
            bash_execute_tool(),
            execute_code_tool(ToolPipeline),
            wait_for_event_tool(self.waits),
            *messaging_tools(self.messaging),
            *mailbox_tools(self.mailbox),
            *delegation_tools(self.delegation),
            *escalation_tools(self.escalation),
        ]

    def pipeline_for(self, worker: Worker) -> ToolPipeline:
        return self._tools(worker).pipeline

    def _tools(self, worker: Worker) -> WorkerTools:
        tools = self._workers.get(worker.key)
        if tools is None:
            pipeline = ToolPipeline(
                builtin_tools(),
                effects=self.effects,
                audit=self.audit,
                middlewares=(Journaling(self.journal), self.undo, self.commits),
            )
            pipeline.register(bash_execute_tool())
            pipeline.register(wait_for_event_tool(self.waits))
            for tool in (
                *messaging_tools(self.messaging),
                *mailbox_tools(self.mailbox),
                *delegation_tools(self.delegation),
                *escalation_tools(self.escalation),
            ):
                pipeline.register(tool)
            pipeline.register(execute_code_tool(lambda: pipeline))  # its tool calls come back through here
            for script in self.script_tools(pipeline):
                pipeline.register(script)
            tools = self._workers[worker.key] = WorkerTools(pipeline)
        return tools

    def script_tools(self, pipeline: ToolPipeline) -> list[Tool]:
        if self.script_dir is None:
            return []
        scan = scan_script_tools(self.script_dir, executor=lambda: pipeline)
        self.script_issues = tuple(str(i) for i in scan.issues)
        return list(scan.tools)

    def mcp_configs(self, tenant: Tenant, worker: Worker) -> tuple[MCPServerConfig, ...]:
        """Tenant servers, then the worker's (a worker entry replaces a tenant one of the same name);
        a relative cwd is relative to the folder that declared it."""
        merged: dict[str, MCPServerConfig] = {}
        sources = (
            (tenant.mcp_servers, self.root / "tenants" / tenant.tenant_id),
            (worker.persona.mcp_servers, self.worker_dir(worker)),
        )
        for configs, base in sources:
            for config in configs:
                if config.cwd and not Path(config.cwd).is_absolute():
                    config = config.model_copy(update={"cwd": str(base / config.cwd)})
                merged[config.name] = config
        return tuple(merged.values())

    async def start_worker(self, tenant: Tenant, worker: Worker) -> None:
        """(Re)connect the worker's MCP servers when their configuration changed."""
        tools = self._tools(worker)
        configs = self.mcp_configs(tenant, worker)
        if configs == tools.mcp_configs and (tools.mcp is not None or not configs):
            return
        await self._stop_mcp(tools)
        tools.mcp_configs = configs
        if not configs:
            return
        from genworker.tools.mcp.manager import MCPManager

        manager = MCPManager(tools.pipeline)
        tools.mcp = manager
        await manager.start(
            configs, tenant_id=tenant.tenant_id, worker_id=worker.worker_id, remote_allowed=tenant.mcp_remote_allowed
        )

    async def start(self, workers: Iterable[tuple[Tenant, Worker]]) -> None:
        for tenant, worker in workers:
            try:
                await self.start_worker(tenant, worker)
            except Exception:  # one worker's MCP trouble never stops start-up
                log.exception("MCP servers of %s/%s failed to start", worker.tenant_id, worker.worker_id)
            self._report_missing(worker)

    def missing_tools(self, worker: Worker) -> dict[str, tuple[str, ...]]:
        """Skill name -> the tools it names that nothing gives this worker: not builtin, not a
        script, not from its MCP servers as they are now."""
        have = set(self.pipeline_for(worker).names())
        found = {}
        for skill in worker.skills.values():
            missing = tuple(t for t in named_tools(skill.spec) if t not in have)
            if missing:
                found[skill.name] = missing
        return found

    def _report_missing(self, worker: Worker) -> None:
        """A WARNING when what is missing changed since the last start-up or reload. An MCP server that
        connects later is not looked at again until the next reload."""
        tools = self._tools(worker)
        missing = self.missing_tools(worker)
        if missing == tools.missing:
            return
        tools.missing = missing
        if missing:
            named = "; ".join(f"{skill}: {', '.join(names)}" for skill, names in sorted(missing.items()))
            log.warning(
                "%s/%s: skills name tools this worker does not have (%s): their runs cannot use them, and "
                "a workflow step calling one fails, until a builtin, script or MCP tool of that name exists",
                worker.tenant_id,
                worker.worker_id,
                named,
            )

    async def _stop_mcp(self, tools: WorkerTools) -> None:
        if tools.mcp is not None:
            await tools.mcp.stop()  # type: ignore[attr-defined]
            tools.mcp = None

    async def stop(self) -> None:
        await self.undo.close()
        for tools in self._workers.values():
            await self._stop_mcp(tools)

    async def release(self, record: DeferredCall) -> ToolOutcome:
        """Run a deferred call whose undo window ended, through its worker's pipeline as it is now
        (policy, trust and posture checked again), in the run it came from."""
        found = self.workers(record.tenant_id, record.worker_id) if self.workers is not None else None
        if found is None:
            return ToolFailed("error", f"worker {record.tenant_id}/{record.worker_id} is not loaded")
        tenant, worker = found
        scope = self.scope(tenant, worker, record.run_id, posture=record.posture)
        call = ToolCall(record.call_id, record.tool, record.arguments)
        return await self.pipeline_for(worker).execute(scope, call, "system")

    def statuses(self) -> list[ComponentRuntimeStatus]:
        found: list[ComponentRuntimeStatus] = []
        for tools in self._workers.values():
            if tools.mcp is not None:
                found.extend(tools.mcp.statuses())  # type: ignore[attr-defined]
        return found

    def scope(
        self,
        tenant: Tenant,
        worker: Worker,
        run_id: str,
        *,
        posture: Posture = "normal",
        approved_call_ids: frozenset[str] = frozenset(),
        undo_window_s: float | None = None,
        skill_id: str | None = None,
        conversational: bool = False,
        recorded: Callable[[], Awaitable[None]] | None = None,
    ) -> ToolScope:
        policy = worker.persona.tool_policy
        worker_table, tenant_table = self._effect_tables(tenant, worker)
        return ToolScope(
            tenant_id=tenant.tenant_id,
            worker_id=worker.worker_id,
            run_id=run_id,
            worker_dir=self.worker_dir(worker),
            trust_level=tenant.trust_level,
            posture=posture,
            tenant_denied_tools=frozenset(tenant.tool_policy.denied_tools),
            worker_denied_tools=frozenset(policy.denied_tools) | unavailable_tools(worker),
            worker_allowed_tools=frozenset(policy.allowed_tools) if policy.mode == "whitelist" else None,
            approved_call_ids=approved_call_ids,
            secrets=_secrets(worker),
            worker_effect_overrides=worker_table,
            tenant_effect_overrides=tenant_table,
            undo_window_s=undo_window_s,
            skill_id=skill_id,
            conversational=conversational,
            recorded=recorded,
        )

    def _effect_tables(self, tenant: Tenant, worker: Worker) -> tuple[EffectTable, EffectTable]:
        tools = self._tools(worker)
        key = hash((worker.version, id(tenant)))
        cached = tools.effect_tables.get(key)
        if cached is None:
            persona = f"tenants/{worker.tenant_id}/workers/{worker.worker_id}/PERSONA.md"
            cached = (
                EffectTable.from_mapping(dict(worker.persona.tool_effect_overrides), persona, "tool_effect_overrides"),
                EffectTable.from_mapping(
                    dict(tenant.tool_effect_overrides),
                    f"tenants/{tenant.tenant_id}/TENANT.json",
                    "tool_effect_overrides",
                ),
            )
            tools.effect_tables = {key: cached}
        return cached


def _secrets(worker: Worker) -> tuple[str, ...]:
    """Every credential value of the worker, so tool results never echo one."""
    creds = worker.credentials
    if creds is None:
        return ()
    found: list[str] = []
    for platform in creds.platforms():
        section = getattr(creds, platform)
        for name in type(section).model_fields:
            value = getattr(section, name)
            if isinstance(value, SecretStr) and value.get_secret_value():
                found.append(value.get_secret_value())
    return tuple(found)


def undo_max_late_s(settings: Settings) -> float:
    """`GENWORKER_UNDO_MAX_LATE_S`: how late after its window a held call found at start-up may still
    run; a later one expires and is reported instead (a person may no longer expect it)."""
    return settings.number("GENWORKER_UNDO_MAX_LATE_S", DEFAULT_MAX_LATE_S, 0.0, 30 * 86_400.0)
