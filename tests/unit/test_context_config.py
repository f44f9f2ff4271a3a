"""ContextWindowConfig: defaults, quota resolution, validation; token counting and truncation."""

from __future__ import annotations

import socket

import pytest
from pydantic import ValidationError

from genworker.worker.context import ContextWindowConfig, SegmentName, SegmentQuotas, count_tokens
from genworker.worker.context.tokens import message_tokens, truncate_tokens


def test_defaults_are_valid_and_fill_the_input_budget() -> None:
    config = ContextWindowConfig()
    assert config.input_budget == config.total_tokens - config.reserve_for_output
    assert sum(config.quota(n) for n in SegmentName) <= config.input_budget
    assert config.quota(SegmentName.HISTORY) == int(config.input_budget * 0.45)


def test_fractions_and_token_counts_resolve() -> None:
    config = ContextWindowConfig(
        total_tokens=10_000,
        reserve_for_output=2_000,
        quotas=SegmentQuotas(system_identity=500, memory=0.25, history=0.3),
    )
    assert config.quota(SegmentName.SYSTEM_IDENTITY) == 500
    assert config.quota(SegmentName.MEMORY) == 2_000
    assert config.quota(SegmentName.TASK) == 1_200


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"total_tokens": 1000, "reserve_for_output": 1000}, "reserve_for_output must be smaller"),
        ({"quotas": {"history": 0.9}}, "quotas add up to"),
        ({"quotas": {"task": 1.5}}, "a fraction must be between 0 and 1"),
        ({"quotas": {"task": -3}}, "greater than or equal to 0"),
        ({"quotas": {"task": True}}, "task"),
        ({"quotas": {"tasks": 0.1}}, "Extra inputs are not permitted"),
        ({"keep_recent_turns": 1, "summary_keep_turns": 2}, "summary_keep_turns must not exceed"),
        ({"overflow_shrink": 1.0}, "overflow_shrink"),
        ({"contxt": 1}, "Extra inputs are not permitted"),
    ],
)
def test_invalid_configs_name_the_field(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        ContextWindowConfig.model_validate(fields)


def test_config_is_frozen() -> None:
    config = ContextWindowConfig()
    with pytest.raises(ValidationError):
        config.total_tokens = 5  # type: ignore[misc]


def test_count_tokens_matches_litellm_for_plain_messages() -> None:
    import litellm

    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "你好, how are you today?"}]
    assert count_tokens("hello world") == 2
    assert count_tokens("") == 0
    assert count_tokens([]) == 0
    assert count_tokens(messages) == litellm.token_counter(model="gpt-4", messages=messages)


def test_count_tokens_counts_tool_calls_and_parts() -> None:
    bare = message_tokens({"role": "assistant", "content": None})
    call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"city": "Paris"}'}}
    assert message_tokens({"role": "assistant", "content": None, "tool_calls": [call]}) > bare + 5
    parts = [{"type": "text", "text": "hello world"}, {"type": "image_url", "image_url": {"url": "x"}}]
    assert message_tokens({"role": "user", "content": parts}) == message_tokens({"role": "user", "content": ""}) + 87


def test_counting_never_touches_the_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("token counting opened a connection")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    assert count_tokens("a brand new string for the tokenizer " * 3) > 0


@pytest.mark.parametrize("keep", ["head", "middle"])
def test_truncate_keeps_within_the_limit_and_says_so(keep: str) -> None:
    text = "START " + " ".join(f"word{i}" for i in range(2000)) + " END"
    cut = truncate_tokens(text, 100, keep=keep, what="tool output")  # type: ignore[arg-type]
    assert count_tokens(cut) <= 100
    assert cut.startswith("START")
    assert "tokens of tool output trimmed" in cut
    assert cut.endswith("END") == (keep == "middle")
    assert truncate_tokens("short", 100) == "short"
    assert truncate_tokens(text, 0) == ""
