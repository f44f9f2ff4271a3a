"""Access tokens cached until shortly before they expire, fetched once however many callers wait.

Feishu's tenant_access_token, WeCom's access_token and DingTalk's app access token all live
about two hours and are rate limited, so each platform client keeps one `TokenCache`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

__all__ = ["TokenCache", "TokenFetch"]

TokenFetch = Callable[[], Awaitable[tuple[str, float]]]  # -> (token, lifetime in seconds)


@dataclass(frozen=True, slots=True)
class _Token:
    value: str
    refresh_at: float  # monotonic


class TokenCache:
    def __init__(
        self, fetch: TokenFetch, *, margin: float = 300.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._fetch = fetch
        self._margin = margin
        self._clock = clock
        self._token: _Token | None = None
        self._lock = asyncio.Lock()
        self.fetches = 0  # token requests made, for status and tests

    def _fresh(self) -> str | None:
        token = self._token
        return token.value if token is not None and self._clock() < token.refresh_at else None

    async def get(self) -> str:
        value = self._fresh()
        if value is not None:
            return value
        async with self._lock:  # single flight: the waiters reuse what the first caller fetched
            value = self._fresh()
            if value is not None:
                return value
            value, lifetime = await self._fetch()
            self.fetches += 1
            usable = max(lifetime - self._margin, lifetime / 2)
            self._token = _Token(value, self._clock() + usable)
            return value

    def invalidate(self, value: str) -> None:
        """Forget `value` (the vendor said it is invalid); a newer token is kept."""
        if self._token is not None and self._token.value == value:
            self._token = None
