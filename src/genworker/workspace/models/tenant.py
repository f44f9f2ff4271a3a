"""TENANT.json: the isolation boundary of one organisation."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field, field_validator, model_validator

from genworker.workspace.models.base import JsonMap, Model, SecretMap, StrTuple, WorkspaceId, check_effect_table
from genworker.workspace.models.context_space import ContextSpaceOverrides
from genworker.workspace.models.depth import ExecutionDepths
from genworker.workspace.models.mcp import MCPServerConfig
from genworker.workspace.models.policy import PolicyOverrides
from genworker.workspace.models.steward import ConflictConfig, LearningConfig

__all__ = ["MIN_TRUST_LEVEL", "Tenant", "TenantToolPolicy"]

MIN_TRUST_LEVEL = 2  # running code (bash, execute_code, pre_scripts) is a trust-2 capability


class TenantToolPolicy(Model):
    denied_tools: StrTuple = ()


class Tenant(Model):
    tenant_id: WorkspaceId  # the loader defaults it to the folder name
    name: str = ""  # defaults to tenant_id
    trust_level: int = Field(default=0, ge=0, le=3)  # 0 (BASIC) when absent, as upstream
    tool_policy: TenantToolPolicy = TenantToolPolicy()
    mcp_remote_allowed: bool = False
    default_worker: WorkspaceId | None = None
    mcp_servers: tuple[MCPServerConfig, ...] = ()
    tool_effect_overrides: JsonMap = Field(default_factory=dict)
    credentials: SecretMap = Field(default_factory=dict, repr=False)
    policy: PolicyOverrides = PolicyOverrides()  # Policy Gate / interruption budget / WAITING overrides
    execution_depths: ExecutionDepths = ExecutionDepths()  # what quick / standard / deep buy (tier, rounds, tokens)
    conflict: ConflictConfig = ConflictConfig()  # the Conflict Arbiter (docs/conflicts.md)
    learning: LearningConfig = LearningConfig()  # learning from feedback (docs/learning.md)
    context_spaces: ContextSpaceOverrides = ContextSpaceOverrides()  # Context Spaces (docs/context-spaces.md)

    @model_validator(mode="before")
    @classmethod
    def _name_defaults_to_id(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and not data.get("name") and data.get("tenant_id") is not None:
            return {**data, "name": str(data["tenant_id"])}
        return data

    @field_validator("tool_effect_overrides")
    @classmethod
    def _effect_table(cls, value: Mapping[str, Any]) -> Mapping[str, Any]:
        return check_effect_table(value)
