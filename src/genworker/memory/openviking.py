"""OpenVikingProvider: an optional remote index behind the same `MemoryProvider` interface.

It queries an OpenViking server's `POST /api/v1/search/find` once per bound scope, each limited to
that scope's URI prefix, `viking://resources/genworker/{tenant}/{worker}/{kind}/{id}/` (tenant
scope: `viking://resources/genworker/{tenant}/_tenant/`). A hit is attributed only to the scope
whose prefix it was asked under and whose URI it really starts with. Nothing here is required: the
local index works alone, and the orchestrator's timeout and fault isolation apply to this provider too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import httpx

from genworker.memory.models import MemoryBinding, MemoryHit, MemoryQuery, Scope, ScopeKind

__all__ = ["OpenVikingProvider", "scope_uri"]


def scope_uri(binding: MemoryBinding, scope: Scope) -> str:
    base = f"viking://resources/genworker/{binding.tenant_id}"
    if scope.kind == ScopeKind.TENANT:
        return f"{base}/_tenant/"
    return f"{base}/{binding.worker_id}/{scope.kind.value}/{scope.id}/"


class OpenVikingProvider:
    name = "openviking"

    def __init__(self, base_url: str, api_key: str | None = None, *, client: httpx.AsyncClient | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = {"X-API-Key": api_key} if api_key else {}
        self._client = client

    async def recall(self, query: MemoryQuery) -> Sequence[MemoryHit]:
        client = self._client or httpx.AsyncClient()
        try:
            batches = await asyncio.gather(*(self._find(client, query, scope) for scope in query.binding.scopes()))
        finally:
            if self._client is None:
                await client.aclose()
        return [hit for batch in batches for hit in batch]

    async def _find(self, client: httpx.AsyncClient, query: MemoryQuery, scope: Scope) -> list[MemoryHit]:
        prefix = scope_uri(query.binding, scope)
        body: dict[str, Any] = {"query": query.text, "target_uri": prefix, "limit": query.limit}
        if query.since is not None:
            body["since"] = query.since.isoformat()
        if query.until is not None:
            body["until"] = query.until.isoformat()
        response = await client.post(f"{self.base_url}/api/v1/search/find", json=body, headers=self.headers)
        response.raise_for_status()
        payload = response.json()
        if payload.get("status") != "ok" or not isinstance(payload.get("result"), dict):
            raise ValueError(f"OpenViking find answered {str(payload)[:200]!r}")
        result = payload["result"]
        hits = []
        for item in (*result.get("memories", ()), *result.get("resources", ())):
            uri = str(item.get("uri", ""))
            if not uri.startswith(prefix):  # a server must not widen the scope it was asked for
                continue
            hits.append(
                MemoryHit(
                    episode_id=uri,
                    scope=scope,
                    kind="episode",
                    title="",
                    text=str(item.get("abstract") or item.get("overview") or ""),
                    score=float(item.get("score") or 0.0),
                    created_at=datetime.now(UTC),
                    provider=self.name,
                )
            )
        return hits
