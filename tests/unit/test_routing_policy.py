from __future__ import annotations

import pytest

from genworker.llm.intent import LLMCallIntent, Purpose, Tier
from genworker.llm.routing_policy import FALLBACK_CHAIN, TableRoutingPolicy


@pytest.mark.parametrize(
    ("intent", "tier"),
    [
        (LLMCallIntent(Purpose.CHAT), Tier.STANDARD),
        (LLMCallIntent(Purpose.SUMMARIZE), Tier.FAST),
        (LLMCallIntent(Purpose.SUMMARIZE, requires_tools=True), Tier.STANDARD),
        (LLMCallIntent(Purpose.CLASSIFY, long_context=True), Tier.STANDARD),
        (LLMCallIntent(Purpose.PLAN), Tier.STRONG),
        (LLMCallIntent(Purpose.REASON), Tier.REASONING),
        (LLMCallIntent(Purpose.CHAT, requires_reasoning=True), Tier.REASONING),
    ],
)
def test_table(intent: LLMCallIntent, tier: Tier) -> None:
    assert TableRoutingPolicy().tier_for(intent) == tier


def test_fallback_chain_order() -> None:
    assert FALLBACK_CHAIN == (Tier.REASONING, Tier.STRONG, Tier.STANDARD, Tier.FAST)
    assert TableRoutingPolicy().chain_from(Tier.STRONG) == (Tier.STRONG, Tier.STANDARD, Tier.FAST)
