"""The dashboard shortens text at a word boundary, never mid-word."""

from genworker.dashboard.text import clip


def test_clip_cuts_at_a_word_boundary_with_an_ellipsis() -> None:
    assert clip("short", 10) == "short"
    assert clip("Answer questions about Acme's own policies", 20) == "Answer questions…"
    assert len(clip("word " * 100, 200)) <= 200
    assert clip("x" * 50, 10) == "x" * 9 + "…"  # one word longer than the limit: cut where it must be
