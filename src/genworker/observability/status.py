"""ComponentStatus: one vocabulary for what each component is doing and why."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

__all__ = ["ComponentRuntimeStatus", "ComponentStatus", "Reason"]


class ComponentStatus(StrEnum):
    DISABLED = "disabled"
    READY = "ready"
    DEGRADED = "degraded"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class ComponentRuntimeStatus:
    name: str
    status: ComponentStatus
    reason: str = ""
    backend: str = ""
    details: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": self.status.value,
            "reason": self.reason,
            "backend": self.backend,
            **({"details": dict(self.details)} if self.details else {}),
        }


@dataclass(frozen=True, slots=True)
class Reason:
    """Why the runtime is not (fully) able to serve: a stable code and a human message."""

    code: str
    message: str
    component: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message, "component": self.component}
