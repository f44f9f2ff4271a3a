"""The dashboard aggregator: every block's service called concurrently, each under its own timeout.

A block that raises, times out or whose service is not part of this runtime is reported with a
status and a reason; the other blocks and the page are unaffected.

    {"worker_id": ..., "generated_at": ..., "blocks": {name: {"status": "ok", "data": ...}
                                                            | {"status": "unavailable", "reason": ...}
                                                            | {"status": "error", "reason": ...}
                                                            | {"status": "timeout", "reason": ...}}}
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from genworker.auth import Principal
from genworker.runtime.composition import Runtime, RuntimeNotStarted
from genworker.workspace.snapshot import Worker

__all__ = ["Block", "BlockContext", "BlockUnavailable", "DashboardAggregator"]

log = logging.getLogger("genworker.dashboard")

DEFAULT_TIMEOUT_S = 5.0


class BlockUnavailable(Exception):
    """The block's service is not part of this runtime (not configured, or not built yet)."""


@dataclass
class BlockContext:
    """What a block may read: the runtime, the caller and the worker; shared loads run once."""

    runtime: Runtime
    principal: Principal
    worker: Worker
    now: datetime = field(default_factory=lambda: datetime.now(UTC))
    _shared: dict[str, asyncio.Task[Any]] = field(default_factory=dict)

    @property
    def tenant_id(self) -> str:
        return self.worker.tenant_id

    @property
    def worker_id(self) -> str:
        return self.worker.worker_id

    async def shared(self, name: str, load: Callable[[], Awaitable[Any]]) -> Any:
        """`load()` once per request, however many blocks await it (a failure fails each of them)."""
        task = self._shared.get(name)
        if task is None:

            async def run() -> Any:
                return await load()

            task = self._shared[name] = asyncio.ensure_future(run())
        return await asyncio.shield(task)

    def close(self) -> None:
        for task in self._shared.values():
            if not task.done():
                task.cancel()
            elif not task.cancelled():
                task.exception()  # retrieved: a failed shared load is reported by its blocks


Fetch = Callable[[BlockContext], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Block:
    name: str
    fetch: Fetch
    timeout_s: float | None = None  # None: the aggregator's default


class DashboardAggregator:
    def __init__(self, blocks: Sequence[Block], *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        names = [b.name for b in blocks]
        if len(set(names)) != len(names):
            raise ValueError(f"block names must be unique: {names}")
        self.blocks = tuple(blocks)
        self.timeout_s = timeout_s

    def replace(self, name: str, fetch: Fetch) -> DashboardAggregator:
        """A copy with block `name` served by `fetch` (wiring a service that appeared later)."""
        if name not in {b.name for b in self.blocks}:
            raise KeyError(f"no dashboard block {name!r}")
        blocks = [Block(b.name, fetch, b.timeout_s) if b.name == name else b for b in self.blocks]
        return DashboardAggregator(blocks, timeout_s=self.timeout_s)

    async def collect(self, ctx: BlockContext) -> dict[str, Any]:
        try:
            results = await asyncio.gather(*(self._one(block, ctx) for block in self.blocks))
        finally:
            ctx.close()
        return {
            "tenant_id": ctx.tenant_id,
            "worker_id": ctx.worker_id,
            "generated_at": ctx.now.isoformat(),
            "blocks": dict(zip((b.name for b in self.blocks), results, strict=True)),
        }

    async def _one(self, block: Block, ctx: BlockContext) -> dict[str, Any]:
        timeout = block.timeout_s if block.timeout_s is not None else self.timeout_s
        started = time.perf_counter()
        try:
            async with asyncio.timeout(timeout):
                data = await block.fetch(ctx)
        except (BlockUnavailable, RuntimeNotStarted) as exc:  # not started: stopping, or started by a test
            return {"status": "unavailable", "reason": str(exc)}
        except TimeoutError:
            log.warning("[Dashboard] block %s of %s/%s timed out", block.name, ctx.tenant_id, ctx.worker_id)
            return {"status": "timeout", "reason": f"no answer within {timeout:g} s"}
        except Exception as exc:
            log.warning(
                "[Dashboard] block %s of %s/%s failed: %s", block.name, ctx.tenant_id, ctx.worker_id, exc, exc_info=True
            )
            return {"status": "error", "reason": f"{type(exc).__name__}: {_relative(str(exc), ctx)}"}
        return {"status": "ok", "data": data, "ms": round((time.perf_counter() - started) * 1000, 1)}


def _relative(message: str, ctx: BlockContext) -> str:
    """Paths in a block's error relative to the workspace: the page shows them to tenants."""
    return message.replace(f"{ctx.runtime.registry.root}/", "")
