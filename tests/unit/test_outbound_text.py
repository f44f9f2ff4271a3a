"""Splitting replies to a platform's size limit: paragraph, then line, then word boundaries."""

from __future__ import annotations

import pytest

from genworker.channels.outbound.text import chars, split_text, utf8_bytes


def test_a_text_within_the_limit_is_one_piece() -> None:
    assert split_text("  hello world \n", 100) == ["hello world"]
    assert split_text("", 100) == []


def test_cuts_prefer_paragraphs_then_lines_then_spaces() -> None:
    paragraphs = "\n\n".join(["a" * 30, "b" * 30, "c" * 30])
    assert split_text(paragraphs, 70) == ["a" * 30 + "\n\n" + "b" * 30, "c" * 30]
    lines = "\n".join(["x" * 30, "y" * 30, "z" * 30])
    assert split_text(lines, 70) == ["x" * 30 + "\n" + "y" * 30, "z" * 30]
    words = " ".join(["word"] * 30)
    pieces = split_text(words, 50)
    assert all(len(p) <= 50 for p in pieces)
    assert all(not p.startswith(" ") and not p.endswith(" ") for p in pieces)
    assert " ".join(pieces) == words


def test_a_word_longer_than_the_limit_is_cut_without_losing_anything() -> None:
    assert split_text("z" * 25, 10) == ["z" * 10, "z" * 10, "z" * 5]


def test_byte_limits_never_split_a_character() -> None:
    text = "企业微信消息" * 200  # 3 bytes per character
    pieces = split_text(text, 2048, utf8_bytes)
    assert all(utf8_bytes(p) <= 2048 for p in pieces)
    assert "".join(pieces) == text
    assert chars(pieces[0]) == 682


def test_a_non_positive_limit_is_refused() -> None:
    with pytest.raises(ValueError, match="limit"):
        split_text("x", 0)
