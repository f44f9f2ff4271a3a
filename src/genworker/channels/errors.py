"""Channel errors: a refused inbound request names the check that failed."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = [
    "ChannelConfigError",
    "ChannelError",
    "VerificationError",
    "check_window",
    "header",
    "json_object",
    "malformed",
    "missing_header",
]


class ChannelError(Exception):
    """An inbound request we answer with `status` and a stable error `code`; nothing is processed.

    `check` names the failed check for the log line and the metrics (e.g. "signature", "timestamp").
    """

    def __init__(self, status: int, code: str, message: str, check: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.check = check


class VerificationError(ChannelError):
    """The request is not provably from the platform (401) or is for the wrong tenant / app (403)."""

    def __init__(self, check: str, message: str, *, status: int = 401, code: str = "signature_invalid") -> None:
        super().__init__(status, code, message, check)


class ChannelConfigError(ChannelError):
    """The binding lacks what verification needs (a secret, a token): 503, the operator must act."""

    def __init__(self, message: str, check: str = "credentials") -> None:
        super().__init__(503, "channel_misconfigured", message, check)


def missing_header(name: str) -> VerificationError:
    return VerificationError("missing_header", f"the {name} header is missing", code="missing_header")


def malformed(check: str, message: str) -> ChannelError:
    return ChannelError(400, "malformed_body", message, check)


def header(headers: Mapping[str, str], name: str) -> str:
    """The header's value (names are lower-cased by the route); a missing or empty one is a 401."""
    value = headers.get(name.lower(), "")
    if not value:
        raise missing_header(name)
    return value


def json_object(body: bytes, what: str = "body") -> dict[str, Any]:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise malformed("json", f"the {what} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise malformed("json", f"the {what} must be a JSON object")
    return data


def check_window(timestamp: str, now_s: float, window_s: float, name: str) -> None:
    """`timestamp` (Unix seconds) within `window_s` of now; 401 `stale_timestamp` otherwise."""
    if not timestamp.isdigit():
        raise VerificationError("timestamp", f"{name} is not a Unix timestamp", code="stale_timestamp")
    if abs(now_s - int(timestamp)) > window_s:
        raise VerificationError("timestamp", f"{name} is more than {window_s:.0f} s off", code="stale_timestamp")
