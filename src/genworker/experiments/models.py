"""An experiment as asked for (`ExperimentSpec`: one question, its variants, one evaluation protocol,
the skill or duty a winner becomes a candidate of) and as stored (`Experiment`: state, each variant's
run and evaluation, the winner, the candidate). Pydantic: both cross the HTTP edge and the disk."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Strict

__all__ = [
    "SCHEMA_VERSION",
    "Check",
    "Evaluation",
    "Experiment",
    "ExperimentSpec",
    "ExperimentState",
    "LimitCheck",
    "Protocol",
    "Target",
    "TextCheck",
    "Variant",
    "VariantResult",
]

SCHEMA_VERSION: Literal[1] = 1
ID_PATTERN = r"^[A-Za-z0-9](?:\.?[A-Za-z0-9_-])*\.?$"
Id = Annotated[str, Field(min_length=1, max_length=64, pattern=ID_PATTERN)]
TierName = Literal["fast", "standard", "strong", "reasoning"]
ToolPattern = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_*?.\[\]-]+$")]
ExperimentState = Literal["awaiting_review", "rejected", "running", "succeeded", "failed", "interrupted"]
CHEAP_TIERS: frozenset[str | None] = frozenset({None, "fast", "standard"})
CHEAP_VARIANTS = 3


def _json_integer(value: Any) -> Any:
    """An integer as JSON Schema has it: 3 or 3.0, never a bool or a string."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("must be an integer")
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Variant(_Strict):
    """One way to try the question: a skill, a model tier, added instructions, a tool set."""

    skill: Id | None = None  # None: the skill the question matches
    tier: TierName | None = None  # None: the tier the run's depth gives
    instructions: str = Field(default="", max_length=8000)
    tools: list[ToolPattern] | None = Field(default=None, max_length=100)  # None: the worker's tools


class _Check(_Strict):
    required: bool = True  # the required checks decide success; all of them count in the score
    weight: float = Field(default=1.0, ge=0, le=100, allow_inf_nan=False)


class TextCheck(_Check):
    """The answer contains (or not) a text, or matches a Python regular expression."""

    kind: Literal["contains", "not_contains", "regex"]
    value: str = Field(min_length=1, max_length=2000)


class LimitCheck(_Check):
    """At most `value` characters of answer, tool calls, or model tokens."""

    kind: Literal["max_chars", "max_tool_calls", "max_tokens"]
    value: Annotated[int, Field(ge=0, le=1_000_000_000), Strict(False), BeforeValidator(_json_integer)]


Check = Annotated[TextCheck | LimitCheck, Field(discriminator="kind")]


class Protocol(_Strict):
    """The one evaluation every variant gets. A protocol a model wrote (`origin: model`) waits for a
    person's review unless `auto_accept` is set and the experiment is cheap (read-only it always is)."""

    checks: list[Check] = Field(default_factory=list, max_length=50)
    origin: Literal["person", "model"] = "person"
    auto_accept: bool = False


class Target(_Strict):
    """What the winner becomes a candidate version of: a skill's SKILL.md or a duty's file."""

    kind: Literal["skill", "duty"]
    id: Id


def _names_by_pattern(schema: dict[str, Any]) -> None:
    """A dict keyed by ids as JSON Schema says it strictly: every key matches (pydantic's
    patternProperties would let any other key through, with any value)."""
    ((pattern, value),) = schema.pop("patternProperties").items()
    schema["additionalProperties"] = value
    schema["propertyNames"] = {**schema.get("propertyNames", {}), "pattern": pattern}


class ExperimentSpec(_Strict):
    question: str = Field(min_length=1, max_length=20000)
    variants: dict[Id, Variant] = Field(min_length=2, max_length=8, json_schema_extra=_names_by_pattern)  # by name
    protocol: Protocol = Field(default_factory=Protocol)
    target: Target | None = None
    max_parallel: Annotated[int, Field(ge=1, le=8), Strict(False), BeforeValidator(_json_integer)] = 2  # at once

    @property
    def cheap(self) -> bool:
        return len(self.variants) <= CHEAP_VARIANTS and all(v.tier in CHEAP_TIERS for v in self.variants.values())

    @property
    def needs_review(self) -> bool:
        return self.protocol.origin == "model" and not (self.protocol.auto_accept and self.cheap)


class Evaluation(_Strict):
    """A variant's run measured by the protocol (and what the supervisor said about it)."""

    success: bool
    score: float  # passed checks' weight / all checks' weight (1.0 without checks)
    checks: list[dict[str, Any]] = Field(default_factory=list)  # {kind, value, required, passed}
    metrics: dict[str, float] = Field(default_factory=dict)  # output_chars, tool_calls, tokens, run_ms
    supervisor: list[dict[str, Any]] = Field(default_factory=list)  # its decisions: action, check, reason, cites
    reason: str = ""  # why it did not succeed


class VariantResult(_Strict):
    name: str
    run_id: str | None = None
    run_state: str | None = None  # the run's own state (completed, failed, budget_exceeded ...)
    output: str = ""
    error: str | None = None
    evaluation: Evaluation | None = None


class Experiment(_Strict):
    schema_version: Literal[1] = SCHEMA_VERSION
    experiment_id: str
    tenant_id: str
    worker_id: str
    spec: ExperimentSpec
    state: ExperimentState
    created_at: datetime
    created_by: str
    updated_at: datetime
    owner: str | None = None  # the runtime instance running it
    review_confirmation_id: str | None = None
    variants: list[VariantResult] = Field(default_factory=list)
    winner: str | None = None  # a variant that succeeded, never one that failed
    candidate: dict[str, Any] | None = None  # {target, path, base_sha256}: a file beside production, never it
    reason: str = ""  # why it failed or was interrupted
