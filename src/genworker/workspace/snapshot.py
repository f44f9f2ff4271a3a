"""What a loaded workspace looks like in memory: immutable values, swapped whole on reload."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from genworker.workspace.errors import Issue
from genworker.workspace.models import (
    ChannelCredentials,
    Contact,
    DutySpec,
    Goal,
    PersonaSpec,
    Rule,
    SkillLevel,
    SkillSpec,
    Tenant,
)

__all__ = ["Skill", "TenantState", "Worker", "WorkerFailure", "frozen_map"]

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def frozen_map(items: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(items))


@dataclass(frozen=True, slots=True)
class Skill:
    spec: SkillSpec
    level: SkillLevel
    file: str  # workspace-relative (or product-relative) path of SKILL.md
    instructions: str
    blocks: Mapping[str, str]

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(frozen=True, slots=True)
class Worker:
    tenant_id: str
    worker_id: str
    persona: PersonaSpec
    instructions: str
    duties: Mapping[str, DutySpec]
    goals: Mapping[str, Goal]
    skills: Mapping[str, Skill]
    rules: tuple[Rule, ...]
    contacts: Mapping[str, Contact]
    credentials: ChannelCredentials | None = field(repr=False)
    files: Mapping[str, str]  # object key ("duty:x", "goal:y", ...) -> workspace-relative file
    warnings: tuple[Issue, ...] = ()
    version: int = 0
    notes: tuple[Issue, ...] = ()  # how upstream spellings were read (`genworker check --explain`)

    @property
    def key(self) -> tuple[str, str]:
        return (self.tenant_id, self.worker_id)


@dataclass(frozen=True, slots=True)
class WorkerFailure:
    tenant_id: str
    worker_id: str
    errors: tuple[Issue, ...]
    version: int = 0
    notes: tuple[Issue, ...] = ()


@dataclass(frozen=True, slots=True)
class TenantState:
    tenant: Tenant
    skills: Mapping[str, Skill] = field(default_factory=lambda: _EMPTY)  # the tenant's own
    workers: Mapping[str, Worker] = field(default_factory=lambda: _EMPTY)
    failures: Mapping[str, WorkerFailure] = field(default_factory=lambda: _EMPTY)
    issues: tuple[Issue, ...] = ()  # problems of TENANT.json and tenant skills
    notes: tuple[Issue, ...] = ()

    @property
    def tenant_id(self) -> str:
        return self.tenant.tenant_id
