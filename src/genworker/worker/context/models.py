"""Context values: the window configuration, the segments of an assembled context, and the
`ManagedContext` an engine receives (system prompt, history, task, token stats, compaction log)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, field_validator, model_validator

from genworker.worker.context.tokens import count_tokens, message_tokens

__all__ = [
    "SYSTEM_SEGMENTS",
    "CompactionRecord",
    "CompactionStep",
    "ContextSegment",
    "ContextWindowConfig",
    "ManagedContext",
    "Message",
    "SegmentName",
    "SegmentQuotas",
    "SegmentUsage",
]

Message = Mapping[str, Any]  # one chat message in OpenAI format

_PRIVATE_KEYS = frozenset({"metadata", "thread_id"})  # ours, never sent to a provider


class SegmentName(StrEnum):
    SYSTEM_IDENTITY = "system_identity"
    CONSTRAINTS_RULES = "constraints_rules"
    CONTACTS = "contacts"
    MEMORY = "memory"
    HISTORY = "history"
    TASK = "task"


SYSTEM_SEGMENTS = (
    SegmentName.SYSTEM_IDENTITY,
    SegmentName.CONSTRAINTS_RULES,
    SegmentName.CONTACTS,
    SegmentName.MEMORY,
)

# A float is a fraction of the input budget (0..1), an int a number of tokens.
Quota = Annotated[StrictInt | StrictFloat, Field(ge=0)]


class SegmentQuotas(BaseModel):
    """The most each segment may take. History's quota is a floor: it also gets what the others leave."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    system_identity: Quota = 0.15
    constraints_rules: Quota = 0.10
    contacts: Quota = 0.05
    memory: Quota = 0.10
    history: Quota = 0.45
    task: Quota = 0.15

    @field_validator("*")
    @classmethod
    def _fraction_at_most_one(cls, value: int | float) -> int | float:
        if isinstance(value, float) and value > 1:
            raise ValueError("a fraction must be between 0 and 1; write a whole number for a token count")
        return value


class ContextWindowConfig(BaseModel):
    """Context budget, per-segment quotas and compaction thresholds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    total_tokens: int = Field(default=32_000, gt=0)  # the model's context window as we budget it
    reserve_for_output: int = Field(default=4_000, ge=0)
    quotas: SegmentQuotas = SegmentQuotas()
    # step (a): tool outputs longer than this are cut to this size (head and tail kept)
    tool_output_max_tokens: int = Field(default=1_000, gt=0)
    # step (b): pruning never drops the most recent turns
    keep_recent_turns: int = Field(default=4, ge=1)
    # step (c): turns kept word for word next to the summary; everything older is summarised
    summary_keep_turns: int = Field(default=1, ge=0)
    summary_max_tokens: int = Field(default=500, gt=0)
    summary_input_max_tokens: int = Field(default=8_000, gt=0)  # transcript sent to the summariser
    # reactive recovery after a provider overflow: shrink to this fraction of the failed context
    overflow_shrink: float = Field(default=0.5, gt=0, lt=1)
    overflow_tool_output_max_tokens: int = Field(default=200, gt=0)

    @model_validator(mode="after")
    def _budget_holds(self) -> ContextWindowConfig:
        if self.reserve_for_output >= self.total_tokens:
            raise ValueError("reserve_for_output must be smaller than total_tokens")
        if self.summary_keep_turns > self.keep_recent_turns:
            raise ValueError("summary_keep_turns must not exceed keep_recent_turns")
        allotted = sum(self.quota(name) for name in SegmentName)
        if allotted > self.input_budget:
            raise ValueError(
                f"quotas add up to {allotted} tokens, more than the input budget of {self.input_budget} "
                f"(total_tokens - reserve_for_output)"
            )
        return self

    @property
    def input_budget(self) -> int:
        return self.total_tokens - self.reserve_for_output

    def quota(self, name: SegmentName) -> int:
        value: int | float = getattr(self.quotas, name.value)
        return int(self.input_budget * value) if isinstance(value, float) else value


@dataclass(frozen=True, slots=True)
class ContextSegment:
    name: SegmentName
    text: str
    quota: int
    items: int = 0  # rules, contacts or memories included
    omitted: int = 0  # items left out by the quota or a limit
    truncated: bool = False  # the text was cut to fit the quota

    @property
    def tokens(self) -> int:
        return count_tokens(self.text)


@dataclass(frozen=True, slots=True)
class SegmentUsage:
    tokens: int
    quota: int  # for history: its quota plus what the other segments left unused


class CompactionStep(StrEnum):
    TRIM_TOOL_OUTPUTS = "trim_tool_outputs"
    PRUNE_HISTORY = "prune_history"
    SUMMARIZE_HISTORY = "summarize_history"
    OVERFLOW_RECOVERY = "overflow_recovery"


@dataclass(frozen=True, slots=True)
class CompactionRecord:
    step: CompactionStep
    tokens_before: int
    tokens_after: int
    detail: str = ""


_EMPTY: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class ManagedContext:
    """An assembled context: system segments in order, the thread's history, and the task."""

    segments: tuple[ContextSegment, ...]  # system_identity, constraints_rules, contacts, memory, task
    history: tuple[Message, ...]
    config: ContextWindowConfig
    thread_id: str | None = None
    summary: str | None = None  # set when older history was replaced by a summary note
    compaction: tuple[CompactionRecord, ...] = ()
    provenance: Mapping[str, str] = field(default_factory=lambda: _EMPTY)  # told the model: `origin`
    # history_tokens, counted once: compaction asks for it several times per turn, and a long thread's
    # history is thousands of messages (`replace()` starts a new context without it)
    _history_tokens: int | None = field(default=None, init=False, repr=False, compare=False)

    def segment(self, name: SegmentName) -> ContextSegment:
        for segment in self.segments:
            if segment.name == name:
                return segment
        raise KeyError(name)

    @property
    def origin(self) -> str:
        """Where the task came from, last in the system prompt (it changes with every run); a few
        short lines, outside the quotas."""
        if not self.provenance:
            return ""
        return "\n".join(("## This task", *(f"- {k}: {v}" for k, v in self.provenance.items())))

    @property
    def system_prompt(self) -> str:
        parts = [s.text for s in self.segments if s.name in SYSTEM_SEGMENTS and s.text]
        return "\n\n".join((*parts, self.origin) if self.provenance else parts)

    @property
    def task(self) -> str:
        return self.segment(SegmentName.TASK).text

    @property
    def steps(self) -> tuple[CompactionStep, ...]:
        return tuple(dict.fromkeys(r.step for r in self.compaction))

    @property
    def budget(self) -> int:
        return self.config.input_budget

    def messages(self) -> tuple[Message, ...]:
        """What the model receives: system prompt, history (runtime keys removed), the task."""
        head: list[Message] = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        history = [{k: v for k, v in m.items() if k not in _PRIVATE_KEYS} for m in self.history]
        return (*head, *history, {"role": "user", "content": self.task})

    @property
    def total_tokens(self) -> int:
        """`count_tokens(self.messages())` without copying the history: the keys `messages()` drops
        are not counted, and compaction asks several times per turn (a long thread's history is
        thousands of messages)."""
        system = self.system_prompt
        fixed = [{"role": "system", "content": system}] if system else []
        return count_tokens((*fixed, {"role": "user", "content": self.task})) + self.history_tokens

    @property
    def history_tokens(self) -> int:
        if self._history_tokens is None:
            object.__setattr__(self, "_history_tokens", sum(message_tokens(m) for m in self.history))
        assert self._history_tokens is not None
        return self._history_tokens

    @property
    def fits(self) -> bool:
        return self.total_tokens <= self.budget

    @property
    def history_allowance(self) -> int:
        """History's share: the budget minus everything else (so unused quotas are lent to it)."""
        return self.budget - (self.total_tokens - self.history_tokens)

    @property
    def stats(self) -> Mapping[SegmentName, SegmentUsage]:
        usage = {s.name: SegmentUsage(s.tokens, s.quota) for s in self.segments}
        usage[SegmentName.HISTORY] = SegmentUsage(self.history_tokens, self.history_allowance)
        return MappingProxyType({name: usage[name] for name in SegmentName if name in usage})
