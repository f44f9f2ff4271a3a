"""What never becomes memory: secrets are masked, hidden reasoning removed, error text refused."""

from __future__ import annotations

import pytest

from genworker.memory import channel_of
from genworker.memory.redaction import looks_like_error, redact_for_memory


@pytest.mark.parametrize(
    "secret_text",
    [
        "password: hunter22",
        "api_key=abcd1234efgh",
        "token = 'zzzz-9999-yyyy'",
        "Authorization: Bearer abcdefghijklmnop",
        "key sk-abcdefghijklmnopqrstuv",
        "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlMTIz",
    ],
)
def test_common_secret_shapes_are_masked(secret_text: str) -> None:
    redacted = redact_for_memory(f"Deployed. {secret_text} then done.")
    assert "[REDACTED]" in redacted
    assert redacted.startswith("Deployed.") and redacted.endswith("then done.")
    for part in ("hunter22", "abcd1234efgh", "zzzz-9999-yyyy", "abcdefghijklmnop", "c2lnbmF0dXJlMTIz"):
        assert part not in redacted


def test_known_secret_values_are_masked_anywhere() -> None:
    assert redact_for_memory("the code is Open-Sesame-7", ("Open-Sesame-7",)) == "the code is [REDACTED]"


def test_hidden_reasoning_is_removed() -> None:
    assert redact_for_memory("<think>the user seems angry</think>Here is the report.") == "Here is the report."


@pytest.mark.parametrize(
    "text",
    [
        "Traceback (most recent call last):\n  File x",
        "Error: upstream 502",
        "litellm.RateLimitError: quota",
        "every model in the fallback chain failed: fast: timeout",
    ],
)
def test_error_text_is_recognised(text: str) -> None:
    assert looks_like_error(text)


def test_ordinary_text_is_not_an_error() -> None:
    assert not looks_like_error("I fixed the error in the invoice total.")


def test_the_channel_of_a_run_is_its_platform_for_im_messages() -> None:
    assert channel_of("chat", "slack:U123") == "slack"
    assert channel_of("chat", "key_abc") == "chat"
    assert channel_of("duty", "feishu:x") == "duty"
    assert channel_of("chat", None) == "chat"
