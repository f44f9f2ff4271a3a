"""The patterns the OpenAPI document gives for ids accept exactly what the code's own checks accept."""

from __future__ import annotations

import re

import pytest

from genworker import ids
from genworker.api.params import ID_MAX_LENGTH, ID_SCHEMA_PATTERN, MATCH_KEY_PATTERN, THREAD_ID_PATTERN, path_rule
from genworker.conversation.models import validate_thread_id
from genworker.ids import InvalidIdError, validate_id

SAMPLES = [
    "a", "A", "0", "a.b", "a..b", "a.", "a..", ".a", "-a", "_a", "a-b_c.d", "a/b", "a b", "~", "café", "main",
    "mai", "Main", "mainx", "xmain", "mbin", "maim", "a" * 64, "a" * 65, "a" * 128, "a" * 129, "x.y.z.", "",
    "a\n", "é", "a~b", "1.2.3", "--", "a-", "a_",
]  # fmt: skip


def _matches(pattern: str, value: str) -> bool:
    """As JSON Schema reads a pattern: `$` is the end of the string (Python's also allows a final newline)."""
    return re.search(pattern.removesuffix("$") + r"\Z", value) is not None


def _valid(check: object, value: str) -> bool:
    try:
        check(value)  # type: ignore[operator]
    except (InvalidIdError, ValueError):
        return False
    return True


@pytest.mark.parametrize("value", SAMPLES)
def test_the_id_pattern_is_validate_id(value: str) -> None:
    schema = _matches(ID_SCHEMA_PATTERN, value) and len(value) <= ID_MAX_LENGTH
    assert schema == _valid(validate_id, value)


@pytest.mark.parametrize("value", SAMPLES)
def test_the_thread_id_pattern_is_validate_thread_id(value: str) -> None:
    assert _matches(THREAD_ID_PATTERN, value) == _valid(validate_thread_id, value)


def test_the_match_key_pattern_is_the_one_ids_checks() -> None:
    assert ids._MATCH_KEY.pattern == MATCH_KEY_PATTERN


def test_a_refused_path_parameter_is_told_its_rule() -> None:
    assert (
        path_rule("goal_id")
        == "goal id must be 1-128 letters, digits, '_', '-' or '.', starting with a letter or digit, with no '..'"
    )
    assert path_rule("adapter_id") is not None and "~" in path_rule("adapter_id")  # type: ignore[operator]
    assert path_rule("command") is None
