"""Execution depth: how much effort a duty run gets (quick / standard / deep).

A duty names its depth in `execution_policy` (default and per trigger); a tenant says what each
depth buys in TENANT.json `execution_depths`: the model tier, the most ReAct rounds and the
token budget of one run. Work bound to no duty (chat, say) runs at `standard`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, model_validator

from genworker.workspace.models.base import Model

__all__ = ["DEFAULT_DEPTH", "DEPTHS", "DepthBudget", "ExecutionDepth", "ExecutionDepths", "ModelTier"]

ExecutionDepth = Literal["quick", "standard", "deep"]
DEPTHS: tuple[ExecutionDepth, ...] = ("quick", "standard", "deep")
DEFAULT_DEPTH: ExecutionDepth = "standard"
ModelTier = Literal["fast", "standard", "strong", "reasoning"]


class DepthBudget(Model):
    tier: ModelTier
    max_rounds: int = Field(ge=1)  # caps the skill's own max_turns
    token_budget: int = Field(ge=1)  # prompt + completion tokens of the run's model calls


_DEFAULTS: Mapping[ExecutionDepth, Mapping[str, Any]] = {
    "quick": {"tier": "fast", "max_rounds": 4, "token_budget": 40_000},
    "standard": {"tier": "standard", "max_rounds": 10, "token_budget": 200_000},
    "deep": {"tier": "strong", "max_rounds": 20, "token_budget": 600_000},
}


class ExecutionDepths(Model):
    """TENANT.json `execution_depths`; a depth or field left out keeps its default."""

    quick: DepthBudget = DepthBudget.model_validate(_DEFAULTS["quick"])
    standard: DepthBudget = DepthBudget.model_validate(_DEFAULTS["standard"])
    deep: DepthBudget = DepthBudget.model_validate(_DEFAULTS["deep"])

    @model_validator(mode="before")
    @classmethod
    def _fill_defaults(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        filled = dict(data)
        for depth, defaults in _DEFAULTS.items():
            given = data.get(depth)
            if isinstance(given, Mapping):
                filled[depth] = {**defaults, **given}
        return filled

    def budget(self, depth: ExecutionDepth) -> DepthBudget:
        budget: DepthBudget = getattr(self, depth)
        return budget
