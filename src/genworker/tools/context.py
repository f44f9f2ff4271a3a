"""ToolScope (what one run may use) and ToolContext (one call inside it).

Middlewares pass on a new context (`dataclasses.replace`); they never mutate shared state.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from genworker.tools.base import ToolCall, ToolSpec
from genworker.workspace.models.effects import EffectTable

__all__ = ["Caller", "Posture", "ToolContext", "ToolScope"]

Caller = Literal["llm", "workflow", "script", "rpc", "system"]
Posture = Literal["normal", "proposal_only", "degraded", "gated_execute"]


@dataclass(frozen=True, slots=True)
class ToolScope:
    tenant_id: str
    worker_id: str
    run_id: str
    worker_dir: Path  # the only folder file tools may touch
    trust_level: int = 1
    posture: Posture = "normal"
    tenant_denied_tools: frozenset[str] = frozenset()
    worker_denied_tools: frozenset[str] = frozenset()
    worker_allowed_tools: frozenset[str] | None = None  # whitelist mode when not None
    approved_call_ids: frozenset[str] = frozenset()
    default_timeout_s: float = 60.0
    secrets: tuple[str, ...] = field(default=(), repr=False)  # values redacted from results
    worker_effect_overrides: EffectTable | None = None  # PERSONA.md tool_effect_overrides
    tenant_effect_overrides: EffectTable | None = None  # TENANT.json tool_effect_overrides
    undo_window_s: float | None = None  # set: external/delegate calls are held this long (undo window)
    skill_id: str | None = None  # the skill the run uses (explicit or matched)
    conversational: bool = False  # a routed turn whose thread session keeps the request (wait_for_event)
    # Awaited before every tool call: a routed run's record is on disk before any tool can act, while
    # the engine's first model call need not wait for that sync.
    recorded: Callable[[], Awaitable[None]] | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class ToolContext:
    scope: ToolScope
    call: ToolCall
    spec: ToolSpec
    caller: Caller = "llm"
    timeout_s: float = 60.0
