"""TableRoutingPolicy: purpose + flags -> tier. One table, read top to bottom."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from genworker.llm.intent import LLMCallIntent, Purpose, Tier

__all__ = ["DEFAULT_TABLE", "FALLBACK_CHAIN", "TableRoutingPolicy"]

DEFAULT_TABLE: Mapping[Purpose, Tier] = MappingProxyType(
    {
        Purpose.CHAT: Tier.STANDARD,
        Purpose.TASK: Tier.STANDARD,
        Purpose.WORKFLOW_STEP: Tier.STANDARD,
        Purpose.CONDITION: Tier.FAST,
        Purpose.SUMMARIZE: Tier.FAST,
        Purpose.EXTRACT: Tier.FAST,
        Purpose.CLASSIFY: Tier.FAST,
        Purpose.PLAN: Tier.STRONG,
        Purpose.REASON: Tier.REASONING,
    }
)

FALLBACK_CHAIN: tuple[Tier, ...] = (Tier.REASONING, Tier.STRONG, Tier.STANDARD, Tier.FAST)


@dataclass(frozen=True, slots=True)
class TableRoutingPolicy:
    table: Mapping[Purpose, Tier] = field(default_factory=lambda: DEFAULT_TABLE)

    def tier_for(self, intent: LLMCallIntent) -> Tier:
        if intent.tier is not None:
            return intent.tier
        if intent.requires_reasoning:
            return Tier.REASONING
        tier = self.table.get(intent.purpose, Tier.STANDARD)
        if intent.requires_tools and tier == Tier.FAST:
            return Tier.STANDARD  # small models are unreliable at tool calling
        if intent.long_context and tier == Tier.FAST:
            return Tier.STANDARD
        return tier

    def chain_from(self, tier: Tier) -> tuple[Tier, ...]:
        """The tier and everything after it in the fallback chain."""
        return FALLBACK_CHAIN[FALLBACK_CHAIN.index(tier) :]
