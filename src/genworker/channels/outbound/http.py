"""The one HTTP path every vendor call takes: JSON bodies, bounded retries, Retry-After.

429 and 5xx answers and transport errors are retried with exponential backoff (jittered),
waiting what `Retry-After` asks when the vendor says (delta-seconds or an HTTP date); other
4xx answers are returned at once, since repeating a bad request cannot help. A vendor that
asks for a longer wait than `RetryPolicy.max_retry_after` fails the delivery instead of
blocking it, so a fallback channel can take over.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

__all__ = ["DeliveryError", "RetryPolicy", "VendorHttp", "encode_json", "json_object", "retry_after_seconds"]

Sleep = Callable[[float], Awaitable[None]]


class DeliveryError(Exception):
    """A vendor refused or could not be reached; `attempts` counts HTTP requests made."""

    def __init__(self, message: str, *, status: int | None = None, attempts: int = 1) -> None:
        super().__init__(message)
        self.status = status
        self.attempts = attempts


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 20.0
    max_retry_after: float = 60.0

    def backoff(self, attempt: int) -> float:
        """The wait after failed attempt `attempt` (1-based): exponential, half of it jittered."""
        ceiling: float = min(self.max_delay, self.base_delay * 2.0 ** (attempt - 1))
        return ceiling / 2 + random.uniform(0, ceiling / 2)


def encode_json(body: Any) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def json_object(raw: bytes) -> dict[str, Any]:
    """A vendor's JSON answer as a dict; {} when it is not a JSON object."""
    try:
        data = json.loads(raw)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def retry_after_seconds(value: str | None, now: datetime | None = None) -> float | None:
    """`Retry-After` as seconds from now; None when absent or unreadable."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def _retryable(status: int) -> bool:
    return status == 429 or status >= 500


class VendorHttp:
    """Shared by every platform client; owns one connection pool."""

    def __init__(
        self,
        client: httpx.AsyncClient | None = None,
        policy: RetryPolicy | None = None,
        *,
        sleep: Sleep = asyncio.sleep,
        timeout: float = 15.0,
    ) -> None:
        self._client = client or httpx.AsyncClient(timeout=timeout, follow_redirects=False)
        self.policy = policy or RetryPolicy()
        self._sleep = sleep

    async def aclose(self) -> None:
        await self._client.aclose()

    async def request(
        self,
        method: str,
        url: str,
        *,
        platform: str,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[httpx.Response, int]:
        """The first non-retryable answer and the number of attempts it took.

        Raises DeliveryError when every attempt failed with 429/5xx or a transport error.
        """
        content = encode_json(body) if body is not None else None
        sent_headers = {"Accept": "application/json", **(headers or {})}
        if content is not None:
            sent_headers["Content-Type"] = "application/json; charset=utf-8"
        policy = self.policy
        for attempt in range(1, policy.max_attempts + 1):
            try:
                response = await self._client.request(method, url, content=content, params=params, headers=sent_headers)
            except httpx.TransportError as exc:
                reason = f"{platform}: {type(exc).__name__} calling {_where(url)}"
                if attempt == policy.max_attempts:
                    raise DeliveryError(f"{reason} ({attempt} attempts)", attempts=attempt) from None
                await self._sleep(policy.backoff(attempt))
                continue
            if not _retryable(response.status_code):
                return response, attempt
            reason = f"{platform}: HTTP {response.status_code} from {_where(url)}"
            if attempt == policy.max_attempts:
                raise DeliveryError(f"{reason} ({attempt} attempts)", status=response.status_code, attempts=attempt)
            asked = retry_after_seconds(response.headers.get("retry-after"))
            if asked is not None and asked > policy.max_retry_after:
                raise DeliveryError(
                    f"{reason}: Retry-After {asked:.0f}s exceeds {policy.max_retry_after:.0f}s",
                    status=response.status_code,
                    attempts=attempt,
                )
            await self._sleep(asked if asked is not None else policy.backoff(attempt))
        raise AssertionError("unreachable")  # the loop returns or raises


def _where(url: str) -> str:
    """Host and path only: vendors put access tokens in query strings."""
    parsed = httpx.URL(url)
    return f"{parsed.host}{parsed.path}"
