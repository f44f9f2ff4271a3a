"""PERSONA.md front matter: who a worker is and how it is wired.

The Markdown body is the worker's long-term instructions. Legacy key names are accepted
as aliases: monitor_configs -> sensor_configs, configured_contacts -> contacts,
contacts_config -> contact_settings.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Literal

from pydantic import AliasChoices, Field, field_validator, model_validator

from genworker.tools.mcp.config import MCPServerConfig
from genworker.workspace.models.base import (
    Duration,
    JsonMap,
    Model,
    StrTuple,
    WorkspaceId,
    check_effect_table,
    relative_path,
    unique_ids,
)
from genworker.workspace.models.contact import Contact
from genworker.workspace.models.policy import PolicyOverrides

__all__ = [
    "ALIASES",
    "Channel",
    "ContactSettings",
    "ContactSync",
    "ContactSyncSource",
    "HeartbeatConfig",
    "Identity",
    "Mount",
    "PersonaSpec",
    "Personality",
    "RoutingRule",
    "SensorConfig",
    "ServiceConfig",
    "ServiceEscalation",
    "ToolPolicy",
    "WorkerMode",
]

ALIASES = {
    "monitor_configs": "sensor_configs",
    "configured_contacts": "contacts",
    "contacts_config": "contact_settings",
}


class WorkerMode(StrEnum):
    PERSONAL = "personal"
    TEAM_MEMBER = "team_member"
    SERVICE = "service"


class Personality(Model):
    traits: StrTuple = ()
    communication_style: str = ""
    decision_style: str = ""


class Identity(Model):
    name: str
    worker_id: WorkspaceId
    version: str = "1.0"
    role: str = ""
    department: str = ""
    reports_to: str = ""
    background: str = ""
    personality: Personality = Personality()
    principles: StrTuple = ()


class ToolPolicy(Model):
    mode: Literal["blacklist", "whitelist"] = "blacklist"
    denied_tools: StrTuple = ()
    allowed_tools: StrTuple = ()


class RoutingRule(Model):
    field: str
    pattern: str
    match: Literal["exact", "contains", "prefix", "regex"] = "contains"
    route: str

    @model_validator(mode="after")
    def _regex_compiles(self) -> RoutingRule:
        if self.match == "regex":
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise ValueError(f"pattern is not a valid regular expression: {exc}") from None
        return self


class SensorConfig(Model):
    source_type: Literal["webhook", "workspace_file", "git", "email"]
    sensor_id: WorkspaceId | None = None  # defaults to source_type; keys the snapshot file
    poll_interval: Duration | None = None
    delivery_mode: str | None = None
    filter: JsonMap = Field(default_factory=dict)
    auto_create_goal: bool = False
    require_approval: bool = False
    cognition_route_override: str | None = None
    routing_rules: tuple[RoutingRule, ...] = ()
    fallback_route: str | None = None

    @property
    def key(self) -> str:
        return self.sensor_id or self.source_type


class Mount(Model):
    mount_id: WorkspaceId
    type: Literal["feishu", "wecom", "dingtalk"]
    source: JsonMap = Field(default_factory=dict)
    mount_path: str = ""
    permissions: tuple[Literal["read", "write"], ...] = ("read",)
    sync_strategy: Literal["on_demand", "proactive"] = "on_demand"
    cache_ttl: float = Field(default=300, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _normalise_path(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("mount_id"), str):
            data = {**data, "mount_path": f"mounts/{data['mount_id']}/"}
        return data


class Channel(Model):
    type: Literal["feishu", "wecom", "dingtalk", "slack", "email"]
    adapter_id: WorkspaceId | None = None  # URL key of the webhook; defaults to the type
    connection_mode: Literal["webhook", "polling", "stream", "socket"] = "webhook"
    chat_ids: StrTuple = ()
    reply_mode: Literal["complete", "streaming", "card_update"] = "complete"
    features: JsonMap = Field(default_factory=dict)


class ContactSyncSource(Model):
    platform: Literal["feishu", "dingtalk", "wecom", "slack"]
    root_department_id: str | None = None
    include_child_departments: bool = True
    include_bots: bool = False
    include_deleted: bool = False
    page_size: int = Field(default=50, ge=1, le=1000)
    max_pages: int = Field(default=20, ge=1)


class ContactSync(Model):
    enabled: bool = False
    interval_minutes: int = Field(default=60, ge=1)
    delete_policy: Literal["never", "mark_stale", "delete"] = "mark_stale"
    sources: tuple[ContactSyncSource, ...] = ()


class ContactSettings(Model):
    workspace_root: str = "contacts"
    discovered_dir: str = "discovered"
    configured_dir: str = "configured"
    index_file: str = "index.jsonl"
    context_limit: int = Field(default=20, ge=0)
    sync: ContactSync = ContactSync()

    @field_validator("workspace_root", "discovered_dir", "configured_dir", "index_file")
    @classmethod
    def _relative(cls, value: str) -> str:
        return relative_path(value)


class ServiceEscalation(Model):
    enabled: bool = False
    target_worker: WorkspaceId | None = None
    triggers: StrTuple = ()


class ServiceConfig(Model):
    knowledge_sources: tuple[JsonMap, ...] = ()
    session_ttl: int = Field(default=1800, ge=1)
    max_concurrent_sessions: int = Field(default=100, ge=1)
    anonymous_allowed: bool = False
    escalation: ServiceEscalation = ServiceEscalation()


class HeartbeatConfig(Model):
    goal_task_actions: StrTuple = ()
    goal_isolated_actions: StrTuple = ()
    goal_isolated_deviation_threshold: float = Field(default=0.3, ge=0.0)


class PersonaSpec(Model):
    identity: Identity
    mode: WorkerMode = WorkerMode.PERSONAL
    tool_policy: ToolPolicy = ToolPolicy()
    skills_dir: str = "skills"
    default_skill: str | None = None
    constraints: StrTuple = ()
    sensor_configs: tuple[SensorConfig, ...] = Field(
        default=(), validation_alias=AliasChoices("sensor_configs", "monitor_configs")
    )
    mounts: tuple[Mount, ...] = ()
    channels: tuple[Channel, ...] = ()
    contacts: tuple[Contact, ...] = Field(default=(), validation_alias=AliasChoices("contacts", "configured_contacts"))
    contact_settings: ContactSettings = Field(
        default=ContactSettings(), validation_alias=AliasChoices("contact_settings", "contacts_config")
    )
    service: ServiceConfig = ServiceConfig()
    heartbeat: HeartbeatConfig = HeartbeatConfig()
    mcp_servers: tuple[MCPServerConfig, ...] = ()
    tool_effect_overrides: JsonMap = Field(default_factory=dict)
    policy: PolicyOverrides = PolicyOverrides()  # over the tenant's policy block

    @field_validator("tool_effect_overrides")
    @classmethod
    def _effect_table(cls, value: Mapping[str, Any]) -> Mapping[str, Any]:
        return check_effect_table(value)

    @model_validator(mode="before")
    @classmethod
    def _one_name_per_field(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for alias, name in ALIASES.items():
                if alias in data and name in data:
                    raise ValueError(f"both {name!r} and its alias {alias!r} are set; keep only {name!r}")
        return data

    @field_validator("skills_dir")
    @classmethod
    def _relative_dir(cls, value: str) -> str:
        return relative_path(value)

    @model_validator(mode="after")
    def _unique_ids(self) -> PersonaSpec:
        unique_ids("mounts", [m.mount_id for m in self.mounts])
        unique_ids("contacts", [c.person_id for c in self.contacts])
        unique_ids("sensor_configs", [s.key for s in self.sensor_configs])
        unique_ids("channels", [c.adapter_id or c.type for c in self.channels])
        return self
