"""PERSONA.md front matter: who a worker is and how it is wired.

The Markdown body is the worker's long-term instructions. Legacy key names are accepted
as aliases: monitor_configs -> sensor_configs, configured_contacts -> contacts,
contacts_config -> contact_settings.

Upstream genworker's spellings and defaults load too (each mapping is a `genworker check
--explain` note, a changed meaning a warning): enum-like values in any case, `channel_type`,
connection modes `websocket` / `socket_mode` / `stream` / `poll`, the same channel type twice,
routing rules with `match_mode` and the routes `heartbeat` / `reactive` / `both`, the
`feishu_folder` sensor, two sensors of one type (the later wins), `require_approval` true by
default, contacts without `person_id`, and upstream's service and heartbeat defaults.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AliasChoices, BeforeValidator, Field, ValidationInfo, field_validator, model_validator

from genworker.workspace.models.base import (
    Duration,
    JsonMap,
    Model,
    StrTuple,
    WorkspaceId,
    check_effect_table,
    freeze,
    lower,
    note,
    relative_path,
    split_csv,
    unique_ids,
)
from genworker.workspace.models.contact import Contact
from genworker.workspace.models.context_space import ContextSpaceOverrides
from genworker.workspace.models.mcp import MCPServerConfig
from genworker.workspace.models.policy import PolicyOverrides

__all__ = [
    "ALIASES",
    "CONNECTION_MODES",
    "LONG_CONNECTION_MODES",
    "SENSOR_TYPES",
    "UPSTREAM_ROUTES",
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
    "knowledge_paths",
    "sensor_type",
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
    name: str = ""  # upstream makes it optional: display_name falls back to the worker id
    worker_id: WorkspaceId
    version: str = "1.0"
    role: str = ""
    department: str = ""
    reports_to: str = ""
    background: str = ""
    personality: Personality = Personality()
    principles: StrTuple = ()

    @property
    def display_name(self) -> str:
        return self.name or self.worker_id


def _policy_mode(value: Any, info: ValidationInfo) -> Any:
    """Upstream lower-cases the mode and reads an unknown one as blacklist (with a warning)."""
    value = lower(value, info)
    if isinstance(value, str) and value not in ("blacklist", "whitelist"):
        note("mode", "warning", f"tool_policy.mode {value!r} is not blacklist or whitelist: read as 'blacklist'")
        return "blacklist"
    return value


class ToolPolicy(Model):
    mode: Annotated[Literal["blacklist", "whitelist"], BeforeValidator(_policy_mode)] = "blacklist"
    denied_tools: StrTuple = ()
    allowed_tools: StrTuple = ()


UPSTREAM_ROUTES = frozenset({"heartbeat", "reactive", "both"})
"""Upstream's routes: heartbeat = the inbox; reactive / both = also the event bus. Here every inbox
item reaches event-triggered duties (`inbox.item_written`), so all three are the heartbeat's default."""
_MATCH_MODES = {"contains": "contains", "regex": "regex", "equals": "exact", "startswith": "prefix"}


class RoutingRule(Model):
    compat_keys: ClassVar[frozenset[str]] = frozenset({"match_mode"})

    field: str = ""  # an empty field never matches
    pattern: str = ""
    match: Literal["exact", "contains", "prefix", "regex"] = "contains"
    route: str = "reactive"  # upstream's default
    ignore_case: bool = False  # regex only; upstream's `match_mode: regex` compares without case

    @model_validator(mode="before")
    @classmethod
    def _upstream_match_mode(cls, data: Any) -> Any:
        if not isinstance(data, Mapping) or "match_mode" not in data:
            return data
        if "match" in data:
            raise ValueError("write either 'match' or upstream's 'match_mode', not both")
        written = data["match_mode"]
        mode = _MATCH_MODES.get(str(written).strip().lower())
        if mode is None:
            raise ValueError(f"match_mode {written!r} must be one of: {', '.join(_MATCH_MODES)}")
        note("match_mode", "mapped", f"match_mode {written!r} -> match {mode!r}")
        out = {k: v for k, v in data.items() if k != "match_mode"}
        return {**out, "match": mode, **({"ignore_case": True} if mode == "regex" else {})}

    @model_validator(mode="after")
    def _regex_compiles(self) -> RoutingRule:
        if self.match == "regex":
            try:
                re.compile(self.pattern, re.IGNORECASE if self.ignore_case else 0)
            except re.error as exc:
                raise ValueError(f"pattern is not a valid regular expression: {exc}") from None
        return self


SENSOR_TYPES = ("webhook", "workspace_file", "git", "email", "feishu_folder")
_SENSOR_ALIASES = {"feishu_doc": "feishu_folder", "feishu_document": "feishu_folder"}


def sensor_type(value: Any) -> str:
    """A `source_type` as written -> the type it means (case, upstream's feishu_doc aliases)."""
    written = str(value or "").strip().lower()
    return _SENSOR_ALIASES.get(written, written)


def _source_type(value: Any, info: ValidationInfo) -> Any:
    value = lower(value, info)
    if value in _SENSOR_ALIASES:
        note("source_type", "mapped", f"{value!r} -> 'feishu_folder' (upstream reads them as one source)")
        return _SENSOR_ALIASES[value]
    if isinstance(value, str) and value not in SENSOR_TYPES:
        known = ", ".join(SENSOR_TYPES)
        note("source_type", "warning", f"unknown source_type {value!r} ({known}): this sensor will not run")
    return value


def _delivery_mode(value: Any, info: ValidationInfo) -> Any:
    value = lower(value, info) or None
    if value is not None:
        note("delivery_mode", "ignored", f"{value!r}: the source type decides how facts arrive (webhook: push)")
    return value


class SensorConfig(Model):
    source_type: Annotated[str, BeforeValidator(_source_type)]  # SENSOR_TYPES; another: loads, never runs
    sensor_id: WorkspaceId | None = None  # defaults to source_type; keys the snapshot file
    poll_interval: Duration | None = None
    delivery_mode: Annotated[str | None, BeforeValidator(_delivery_mode)] = None  # poll | push; "": its own
    filter: JsonMap = Field(default_factory=dict)
    auto_create_goal: bool = False
    require_approval: bool = True  # upstream's default: safer
    cognition_route_override: str | None = None  # set: the route of every fact of this sensor
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


CONNECTION_MODES = ("webhook", "websocket", "socket_mode", "stream", "polling")
LONG_CONNECTION_MODES = frozenset({"websocket", "socket_mode", "stream"})
"""Modes whose platforms push events over a long connection (genworker.channels.longconn opens it
with the vendor's SDK; `genworker check` says when a binding lacks the SDK or its credentials)."""
_MODE_ALIASES = {"socket": "socket_mode", "poll": "polling"}
# callback secrets upstream reads from `features` (PERSONA.md is committed): where they belong
_FEATURE_SECRETS = {
    "encrypt_key": "feishu.encrypt_key",
    "encryptKey": "feishu.encrypt_key",
    "verification_token": "feishu.verification_token",
    "verificationToken": "feishu.verification_token",
    "callback_token": "wecom.token",
    "encoding_aes_key": "wecom.encoding_aes_key",
}
_DM_ID = re.compile(r"^(ou_|on_|D[A-Z0-9]{6,}$)")  # Feishu open ids, Slack DM channels


def _connection_mode(value: Any, info: ValidationInfo) -> Any:
    value = lower(value, info)
    if value in _MODE_ALIASES:
        note("connection_mode", "mapped", f"{value!r} -> {_MODE_ALIASES[value]!r}")
        return _MODE_ALIASES[value]
    return value


def _chat_ids(value: Any) -> Any:
    """Upstream strips every id and drops empty ones (numbers are read as text)."""
    if isinstance(value, list | tuple):
        return tuple(s for s in (str(v).strip() for v in value if v is not None) if s)
    return value


class Channel(Model):
    type: Annotated[Literal["feishu", "wecom", "dingtalk", "slack", "email"], BeforeValidator(lower)] = Field(
        validation_alias=AliasChoices("type", "channel_type")
    )
    adapter_id: WorkspaceId | None = None  # URL key of the webhook; defaults to the type
    connection_mode: Annotated[Literal[CONNECTION_MODES], BeforeValidator(_connection_mode)] = "webhook"  # type: ignore[valid-type]
    chat_ids: Annotated[StrTuple, BeforeValidator(_chat_ids)] = ()
    reply_mode: Annotated[Literal["complete", "streaming", "card_update"], BeforeValidator(lower)] = "complete"
    features: JsonMap = Field(default_factory=dict)

    @field_validator("features", mode="before")
    @classmethod
    def _features(cls, value: Any) -> Any:
        """Callback secrets are refused here (they belong in CHANNEL_CREDENTIALS.json, which is not
        committed): warned about and dropped. `folders` may be one comma-separated string."""
        if not isinstance(value, Mapping):
            return value
        out = dict(value)
        for key, target in _FEATURE_SECRETS.items():
            if key in out:
                del out[key]
                note(
                    f"features.{key}",
                    "warning",
                    f"a secret in PERSONA.md (committed to git) is not used: move it to CHANNEL_CREDENTIALS.json "
                    f"as {target}",
                )
        if isinstance(out.get("folders"), str):
            out["folders"] = list(split_csv(out["folders"]))
        return out

    # Field validators, not a model "after" validator: notes must be made inside the model's validation.
    @field_validator("chat_ids")
    @classmethod
    def _upstream_chat_ids(cls, value: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        kind = info.data.get("type")
        if not value and kind not in (None, "slack"):
            what = "reads all mail of its folders" if kind == "email" else "serves every group chat"
            note("chat_ids", "warning", f"empty: upstream never starts such a channel; here it {what}")
        dms = [c for c in value if _DM_ID.match(c)]
        if dms:
            note(
                "chat_ids",
                "warning",
                f"{dms} look like direct-message ids: here chat_ids only limit group chats (DMs always reach "
                "the worker); upstream also filters DMs with them",
            )
        return value


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
    context_limit: int = Field(default=8, ge=0)  # upstream's default
    sync: ContactSync = ContactSync()

    @field_validator("workspace_root", mode="before")
    @classmethod
    def _upstream_root(cls, value: Any) -> Any:
        if value == "workspace":  # upstream's default, which it ignores: contacts live in contacts/
            note("workspace_root", "mapped", "'workspace' (upstream's default, unused there) -> 'contacts'")
            return "contacts"
        return value

    @field_validator("workspace_root", "discovered_dir", "configured_dir", "index_file")
    @classmethod
    def _relative(cls, value: str) -> str:
        return relative_path(value)


def _no_worker(value: Any) -> Any:
    return None if value == "" else value


class ServiceEscalation(Model):
    enabled: bool = False
    target_worker: Annotated[WorkspaceId | None, BeforeValidator(_no_worker)] = None  # "": none (upstream)
    triggers: StrTuple = ()
    contact: str | None = None  # ours: who a hand-off to a person goes to (a contact or bound chat; default: owner)


def _knowledge_sources(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return [{"value": v} if isinstance(v, str) else v for v in value]
    return value


_KNOWLEDGE_TYPES = frozenset({"file", "folder", "directory", "dir", "docs", "path", "local"})


def knowledge_paths(source: Mapping[str, Any]) -> tuple[str, ...]:
    """The files or folders in the worker folder a knowledge source names (`path`, `paths` or
    `value`); () when it names nothing this runtime can search (a URL such as wiki://..., another type)."""
    kind = source.get("type", source.get("kind"))
    if kind is not None and str(kind).lower() not in _KNOWLEDGE_TYPES:
        return ()
    named = [source.get("path"), source.get("value"), *(source.get("paths") or ())]
    found: list[str] = []
    for path in named:
        if isinstance(path, str) and "://" not in path:
            try:
                found.append(relative_path(path.strip()))
            except ValueError:
                continue
    return tuple(found)


class ServiceConfig(Model):
    knowledge_sources: Annotated[tuple[JsonMap, ...], BeforeValidator(_knowledge_sources)] = ()  # "x" -> {value: x}
    session_ttl: int = Field(default=1800, ge=1)
    max_concurrent_sessions: int = Field(default=50, ge=1)  # upstream's default
    anonymous_allowed: bool = False  # upstream defaults to true: kept off (a service must opt in)
    escalation: ServiceEscalation = ServiceEscalation()
    busy_message: str | None = Field(default=None, min_length=1)  # ours: the answer while the service is full

    @field_validator("knowledge_sources")
    @classmethod
    def _searchable(cls, value: tuple[Mapping[str, Any], ...]) -> tuple[Mapping[str, Any], ...]:
        for n, source in enumerate(value):
            if not knowledge_paths(source):
                note(
                    f"knowledge_sources.{n}",
                    "ignored",
                    "names no file or folder inside the worker folder (a path, paths or a plain relative path): "
                    "not searched",
                )
        return value


def _actions(default: tuple[str, ...]) -> Any:
    """Upstream lower-cases the actions and uses its own set when the list is empty."""

    def parse(value: Any) -> Any:
        if isinstance(value, str):
            value = [value]
        if isinstance(value, list | tuple):
            actions = tuple(str(v).strip().lower() for v in value if str(v).strip())
            return actions or default
        return value

    return BeforeValidator(parse)


class HeartbeatConfig(Model):
    goal_task_actions: Annotated[StrTuple, _actions(("escalate", "recover", "investigate"))] = ()
    goal_isolated_actions: Annotated[StrTuple, _actions(("replan", "deep_review"))] = ()
    goal_isolated_deviation_threshold: float = Field(default=0.9, ge=0.0)  # upstream's default


def _freeze(value: Any) -> Any:
    return freeze(value) if isinstance(value, list | tuple) else value


class PersonaSpec(Model):
    identity: Identity
    mode: Annotated[WorkerMode, BeforeValidator(lower)] = WorkerMode.PERSONAL
    tool_policy: ToolPolicy = ToolPolicy()
    skills_dir: str = "skills"
    default_skill: str | None = None
    constraints: StrTuple = ()
    triggers: Annotated[tuple[Any, ...], BeforeValidator(_freeze)] = ()  # upstream parses them, never uses them
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
    context_spaces: ContextSpaceOverrides = ContextSpaceOverrides()  # over the tenant's (docs/context-spaces.md)

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

    @field_validator("triggers")
    @classmethod
    def _unused(cls, value: tuple[Any, ...]) -> tuple[Any, ...]:
        if value:
            note("triggers", "ignored", "upstream keeps it but never uses it; duties have their own triggers")
        return value

    @field_validator("contacts", mode="before")
    @classmethod
    def _configured_ids(cls, value: Any) -> Any:
        """A contact without `person_id` is `configured-{n}` (1-based), as upstream names it."""
        if not isinstance(value, list | tuple):
            return value
        out = []
        for n, item in enumerate(value, 1):
            if isinstance(item, Mapping) and item.get("person_id") in (None, ""):
                note(f"contacts.{n - 1}", "mapped", f"no person_id -> 'configured-{n}'")
                item = {**item, "person_id": f"configured-{n}"}
            out.append(item)
        return out

    @field_validator("sensor_configs")
    @classmethod
    def _later_sensor_wins(cls, value: tuple[SensorConfig, ...]) -> tuple[SensorConfig, ...]:
        """Two sensors of one type without a sensor_id: the later replaces the earlier (upstream)."""
        last = {c.source_type: i for i, c in enumerate(value) if c.sensor_id is None}
        kept = []
        for i, config in enumerate(value):
            if config.sensor_id is None and last[config.source_type] != i:
                note(
                    "sensor_configs",
                    "warning",
                    f"entry {i + 1} is replaced by a later {config.source_type!r} sensor (as upstream does); "
                    "give each a sensor_id to keep both",
                )
                continue
            kept.append(config)
        return tuple(kept)

    @field_validator("channels")
    @classmethod
    def _channel_keys(cls, value: tuple[Channel, ...]) -> tuple[Channel, ...]:
        """The same platform twice (upstream groups them): the 2nd, 3rd ... entry without an
        adapter_id is keyed `{type}-2`, `{type}-3` ... (its webhook URL says so)."""
        seen: dict[str, int] = {}
        out: list[Channel] = []
        for channel in value:
            if channel.adapter_id is None:
                seen[channel.type] = seen.get(channel.type, 0) + 1
                if seen[channel.type] > 1:
                    key = f"{channel.type}-{seen[channel.type]}"
                    note(
                        f"channels.{len(out)}",
                        "mapped",
                        f"{channel.type} again, without adapter_id -> adapter_id {key!r}",
                    )
                    channel = channel.model_copy(update={"adapter_id": key})
            out.append(channel)
        return tuple(out)

    @model_validator(mode="after")
    def _unique_ids(self) -> PersonaSpec:
        unique_ids("mounts", [m.mount_id for m in self.mounts])
        unique_ids("contacts", [c.person_id for c in self.contacts])
        unique_ids("sensor_configs", [s.key for s in self.sensor_configs])
        unique_ids("channels", [c.adapter_id or c.type for c in self.channels])
        return self
