"""Vendor credentials for tests and benches: random per process, so the repository holds nothing
that looks like a real secret and no two runs share one."""

from __future__ import annotations

from secrets import token_hex

__all__ = ["DINGTALK_APP_SECRET", "SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET"]

SLACK_SIGNING_SECRET = token_hex(16)
SLACK_BOT_TOKEN = "xoxb-" + token_hex(12)
DINGTALK_APP_SECRET = token_hex(16)
