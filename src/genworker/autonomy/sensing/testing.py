"""Test support for sensors: MemoryInboxWriter, a TEST DOUBLE of our own InboxWriter interface;
StatusLog, to wait for sensor statuses; and `write_worker`, which writes and loads a real worker
with given sensor_configs.

MemoryInboxWriter keeps items in memory (nothing survives the process), honours dedupe keys like
the real stores, lets a test wait for items instead of sleeping, and can be told to fail writes.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from genworker.autonomy.inbox import InboxItem
from genworker.autonomy.sensing.runner import SensorStatus
from genworker.workspace.registry import WorkspaceRegistry
from genworker.workspace.snapshot import Worker

__all__ = ["MemoryInboxWriter", "StatusLog", "write_worker"]


class MemoryInboxWriter:
    def __init__(self) -> None:
        self.items: list[InboxItem] = []
        self.dropped: list[InboxItem] = []  # duplicates refused by dedupe key
        self.fail_next = 0  # the next N writes raise OSError (a store that is down)
        self.fail_on: Callable[[InboxItem], bool] | None = None  # writes of matching items raise OSError
        self._keys: set[str] = set()
        self._changed = asyncio.Condition()

    async def write(self, item: InboxItem) -> bool:
        if self.fail_next > 0 or (self.fail_on is not None and self.fail_on(item)):
            self.fail_next = max(0, self.fail_next - 1)
            raise OSError("inbox store unavailable (test double)")
        async with self._changed:
            if item.dedupe_key is not None and item.dedupe_key in self._keys:
                self.dropped.append(item)
                return False
            if item.dedupe_key is not None:
                self._keys.add(item.dedupe_key)
            self.items.append(item)
            self._changed.notify_all()
            return True

    def get(self, item_id: str) -> InboxItem | None:
        return next((i for i in self.items if i.item_id == item_id), None)

    def of_type(self, event_type: str) -> list[InboxItem]:
        return [i for i in self.items if i.event_type == event_type]

    async def wait_for(self, predicate: Callable[[list[InboxItem]], bool], within_s: float = 10.0) -> list[InboxItem]:
        """Wait until `predicate(items)` holds; TimeoutError otherwise."""

        async def until() -> list[InboxItem]:
            async with self._changed:
                await self._changed.wait_for(lambda: predicate(self.items))
                return list(self.items)

        return await asyncio.wait_for(until(), within_s)


class StatusLog:
    """An `on_status` callback that records every status; tests wait on it instead of sleeping."""

    def __init__(self) -> None:
        self.seen: list[SensorStatus] = []
        self._changed = asyncio.Event()

    def __call__(self, status: SensorStatus) -> None:
        self.seen.append(status)
        self._changed.set()

    async def wait_for(self, predicate: Callable[[SensorStatus], bool], within_s: float = 10.0) -> SensorStatus:
        async def first() -> SensorStatus:
            while True:
                for status in self.seen:
                    if predicate(status):
                        return status
                self._changed.clear()
                await self._changed.wait()

        return await asyncio.wait_for(first(), within_s)


def write_worker(
    root: Path,
    sensors: Sequence[Mapping[str, Any]],
    *,
    credentials: Mapping[str, Any] | None = None,
    tenant_id: str = "acme",
    worker_id: str = "w",
) -> Worker:
    """Write a tenant and a worker with `sensors` as its sensor_configs under `root`; load it for real."""
    tenant = root / "tenants" / tenant_id
    folder = tenant / "workers" / worker_id
    folder.mkdir(parents=True, exist_ok=True)
    tenant_file = {"tenant_id": tenant_id, "name": tenant_id, "trust_level": 2}
    (tenant / "TENANT.json").write_text(json.dumps(tenant_file), encoding="utf-8")
    front = {"identity": {"name": worker_id.title(), "worker_id": worker_id}, "sensor_configs": list(sensors)}
    (folder / "PERSONA.md").write_text(f"---\n{json.dumps(front, indent=1)}\n---\nBe helpful.\n", encoding="utf-8")
    if credentials is not None:
        (folder / "CHANNEL_CREDENTIALS.json").write_text(json.dumps(credentials), encoding="utf-8")
    registry = WorkspaceRegistry(root, product_skills=None)
    registry.load_all()
    worker = registry.worker(tenant_id, worker_id)
    if worker is None:
        raise AssertionError(f"worker did not load: {registry.issues()}")
    return worker
