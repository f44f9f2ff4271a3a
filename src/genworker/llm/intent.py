"""LLMCallIntent: what a call site wants from a model, in business terms, not model names."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["LLMCallIntent", "Purpose", "Tier"]


class Tier(StrEnum):
    FAST = "fast"
    STANDARD = "standard"
    STRONG = "strong"
    REASONING = "reasoning"


class Purpose(StrEnum):
    CHAT = "chat"  # a conversational turn
    TASK = "task"  # an autonomous task turn (ReAct)
    WORKFLOW_STEP = "workflow_step"  # an llm step of a deterministic workflow
    CONDITION = "condition"  # a yes/no judgement inside a workflow
    SUMMARIZE = "summarize"  # history compaction, briefs
    EXTRACT = "extract"  # structured extraction (preferences, decisions)
    CLASSIFY = "classify"  # routing, triage
    PLAN = "plan"  # decomposing a goal into steps
    REASON = "reason"  # hard multi-step reasoning


@dataclass(frozen=True, slots=True)
class LLMCallIntent:
    purpose: Purpose
    requires_tools: bool = False
    requires_reasoning: bool = False
    long_context: bool = False
    tier: Tier | None = None  # chosen by the caller (a run's execution depth): wins over the table
