"""Retry-After parsing and the backoff schedule."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

from genworker.channels.outbound.http import RetryPolicy, encode_json, retry_after_seconds


def test_retry_after_in_seconds() -> None:
    assert retry_after_seconds("3") == 3.0
    assert retry_after_seconds(" 0 ") == 0.0
    assert retry_after_seconds("-5") == 0.0


def test_retry_after_as_an_http_date() -> None:
    now = datetime(2026, 1, 5, 12, 0, 0, tzinfo=UTC)
    later = format_datetime(now + timedelta(seconds=7), usegmt=True)
    assert retry_after_seconds(later, now) == 7.0
    earlier = format_datetime(now - timedelta(seconds=30), usegmt=True)
    assert retry_after_seconds(earlier, now) == 0.0


def test_unreadable_or_missing_retry_after_is_none() -> None:
    assert retry_after_seconds(None) is None
    assert retry_after_seconds("") is None
    assert retry_after_seconds("soon") is None


def test_backoff_grows_and_is_capped() -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=4.0)
    for attempt, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (6, 4.0)]:
        delay = policy.backoff(attempt)
        assert ceiling / 2 <= delay <= ceiling


def test_bodies_are_json_encoded_not_concatenated() -> None:
    text = 'quote " backslash \\ newline \n 中文 </script>'
    assert (
        encode_json({"text": text}) == ('{"text":' + '"quote \\" backslash \\\\ newline \\n 中文 </script>"}').encode()
    )
