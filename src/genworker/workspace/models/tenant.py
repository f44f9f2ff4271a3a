"""TENANT.json: the isolation boundary of one organisation."""

from __future__ import annotations

from pydantic import Field

from genworker.workspace.models.base import Model, SecretMap, StrTuple, WorkspaceId

__all__ = ["Tenant", "TenantToolPolicy"]


class TenantToolPolicy(Model):
    denied_tools: StrTuple = ()


class Tenant(Model):
    tenant_id: WorkspaceId
    name: str = ""
    trust_level: int = Field(default=1, ge=0, le=3)
    tool_policy: TenantToolPolicy = TenantToolPolicy()
    mcp_remote_allowed: bool = False
    default_worker: WorkspaceId | None = None
    credentials: SecretMap = Field(default_factory=dict, repr=False)
