"""LangGraph checkpoints in our stores, keyed by the graph's thread (the run that started it).

`StoredCheckpointer` is a LangGraph checkpoint saver over a `CheckpointBackend`: the worker's files
(`FileCheckpoints`, one process) or Redis (`RedisCheckpoints`, the shared profile). Both keep, per
thread: each checkpoint (serialised by LangGraph's own serde), the writes of its tasks, and the
side-effect log of graph tool calls (engine/langgraph/adapter.py).

    tenants/{t}/workers/{w}/runtime/graphs/{thread}/{ns}/{checkpoint_id}.json
                                                    /{ns}/{checkpoint_id}.writes/{task_id}.{idx}.json
                                                    /effects/{key digest}.json
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import shutil
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)

from genworker.fsutil import write_atomic
from genworker.ids import safe_join, validate_id

__all__ = ["CheckpointBackend", "FileCheckpoints", "RedisCheckpoints", "StoredCheckpointer"]

Record = dict[str, Any]


class CheckpointBackend(Protocol):
    """Blocking storage of one worker's graph threads (the saver calls it from a worker thread)."""

    def put(self, thread: str, ns: str, checkpoint_id: str, record: Record) -> None: ...

    def get(self, thread: str, ns: str, checkpoint_id: str | None) -> Record | None:
        """That checkpoint, or the thread's newest one in `ns` when `checkpoint_id` is None."""
        ...

    def ids(self, thread: str) -> list[tuple[str, str]]:
        """(ns, checkpoint id) of every checkpoint of the thread."""
        ...

    def put_write(self, thread: str, ns: str, checkpoint_id: str, key: str, record: Record, *, keep: bool) -> None:
        """Store one task write; `keep`: leave an existing one under the same key as it is."""
        ...

    def writes(self, thread: str, ns: str, checkpoint_id: str) -> list[Record]: ...

    def effect(self, thread: str, key: str) -> Record | None: ...

    def put_effect(self, thread: str, key: str, record: Record) -> None: ...

    def delete(self, thread: str) -> None: ...


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


class FileCheckpoints:
    """A worker's graph threads under its runtime/graphs/ folder; each file is written atomically."""

    def __init__(self, worker_dir: Path) -> None:
        self.root = worker_dir / "runtime" / "graphs"

    def _thread(self, thread: str) -> Path:
        return safe_join(self.root, thread, kind="graph thread")

    def _ns(self, thread: str, ns: str) -> Path:
        return self._thread(thread) / (f"ns-{_digest(ns)}" if ns else "root")

    def put(self, thread: str, ns: str, checkpoint_id: str, record: Record) -> None:
        path = self._ns(thread, ns) / f"{validate_id(checkpoint_id, 'checkpoint id')}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps({**record, "ns": ns}).encode("utf-8"))

    def get(self, thread: str, ns: str, checkpoint_id: str | None) -> Record | None:
        folder = self._ns(thread, ns)
        if checkpoint_id is None:
            found = sorted(folder.glob("*.json")) if folder.is_dir() else []
            if not found:
                return None
            path = found[-1]  # checkpoint ids grow monotonically
        else:
            path = folder / f"{validate_id(checkpoint_id, 'checkpoint id')}.json"
        try:
            record: Record = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        return record

    def ids(self, thread: str) -> list[tuple[str, str]]:
        base = self._thread(thread)
        found: list[tuple[str, str]] = []
        for folder in sorted(base.iterdir()) if base.is_dir() else []:
            if folder.name == "effects" or not folder.is_dir():
                continue
            for path in folder.glob("*.json"):
                record = json.loads(path.read_text(encoding="utf-8"))
                found.append((str(record.get("ns", "")), path.stem))
        return found

    def put_write(self, thread: str, ns: str, checkpoint_id: str, key: str, record: Record, *, keep: bool) -> None:
        folder = self._ns(thread, ns) / f"{validate_id(checkpoint_id, 'checkpoint id')}.writes"
        path = folder / f"{_digest(key)}.json"
        if keep and path.exists():
            return
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(record).encode("utf-8"))

    def writes(self, thread: str, ns: str, checkpoint_id: str) -> list[Record]:
        folder = self._ns(thread, ns) / f"{validate_id(checkpoint_id, 'checkpoint id')}.writes"
        if not folder.is_dir():
            return []
        return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.json"))]

    def effect(self, thread: str, key: str) -> Record | None:
        path = self._thread(thread) / "effects" / f"{_digest(key)}.json"
        try:
            record: Record = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        return record

    def put_effect(self, thread: str, key: str, record: Record) -> None:
        path = self._thread(thread) / "effects" / f"{_digest(key)}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(record).encode("utf-8"))

    def delete(self, thread: str) -> None:
        shutil.rmtree(self._thread(thread), ignore_errors=True)


class RedisCheckpoints:
    """The same in Redis (a synchronous client): per thread one hash of checkpoints, one of writes per
    checkpoint and one of side effects, under `genworker:graph:{tenant}:{worker}:{thread}`."""

    def __init__(self, client: Any, tenant_id: str, worker_id: str) -> None:
        self.client = client
        self.prefix = f"genworker:graph:{validate_id(tenant_id, 'tenant id')}:{validate_id(worker_id, 'worker id')}"

    def _key(self, thread: str, *parts: str) -> str:
        return ":".join((self.prefix, validate_id(thread, "graph thread"), *parts))

    def put(self, thread: str, ns: str, checkpoint_id: str, record: Record) -> None:
        self.client.hset(self._key(thread, "checkpoints"), f"{ns}\x00{checkpoint_id}", json.dumps({**record, "ns": ns}))

    def get(self, thread: str, ns: str, checkpoint_id: str | None) -> Record | None:
        key = self._key(thread, "checkpoints")
        if checkpoint_id is None:
            ids = sorted(i for n, i in self.ids(thread) if n == ns)
            if not ids:
                return None
            checkpoint_id = ids[-1]
        raw = self.client.hget(key, f"{ns}\x00{checkpoint_id}")
        return None if raw is None else dict(json.loads(raw))

    def ids(self, thread: str) -> list[tuple[str, str]]:
        found: list[tuple[str, str]] = []
        for field in self.client.hkeys(self._key(thread, "checkpoints")):
            ns, _, checkpoint_id = (field.decode("utf-8") if isinstance(field, bytes) else field).partition("\x00")
            found.append((ns, checkpoint_id))
        return found

    def put_write(self, thread: str, ns: str, checkpoint_id: str, key: str, record: Record, *, keep: bool) -> None:
        name = self._key(thread, "writes", _digest(f"{ns}\x00{checkpoint_id}"))
        (self.client.hsetnx if keep else self.client.hset)(name, key, json.dumps(record))

    def writes(self, thread: str, ns: str, checkpoint_id: str) -> list[Record]:
        name = self._key(thread, "writes", _digest(f"{ns}\x00{checkpoint_id}"))
        return [dict(json.loads(v)) for v in self.client.hvals(name)]

    def effect(self, thread: str, key: str) -> Record | None:
        raw = self.client.hget(self._key(thread, "effects"), key)
        return None if raw is None else dict(json.loads(raw))

    def put_effect(self, thread: str, key: str, record: Record) -> None:
        self.client.hset(self._key(thread, "effects"), key, json.dumps(record))

    def delete(self, thread: str) -> None:
        keys = list(self.client.scan_iter(match=self._key(thread, "*")))
        if keys:
            self.client.delete(*keys)


def _typed(value: tuple[str, bytes]) -> list[str]:
    return [value[0], base64.b64encode(value[1]).decode("ascii")]


def _untyped(value: Sequence[str]) -> tuple[str, bytes]:
    return value[0], base64.b64decode(value[1])


class StoredCheckpointer(BaseCheckpointSaver[str]):
    """A LangGraph checkpoint saver over a CheckpointBackend (async calls run it in a worker thread)."""

    def __init__(self, backend: CheckpointBackend) -> None:
        super().__init__()
        self.backend = backend

    # -- reads -------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        conf = config["configurable"]
        thread, ns = str(conf["thread_id"]), str(conf.get("checkpoint_ns", ""))
        record = self.backend.get(thread, ns, get_checkpoint_id(config))
        return None if record is None else self._tuple(thread, ns, record)

    def _tuple(self, thread: str, ns: str, record: Record) -> CheckpointTuple:
        checkpoint_id = str(record["id"])
        writes = sorted(
            self.backend.writes(thread, ns, checkpoint_id),
            key=lambda w: writes_sort_key(w.get("task_path", ""), w["task_id"], int(w["idx"])),
        )
        parent = record.get("parent")
        return CheckpointTuple(
            config={"configurable": {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}},
            checkpoint=self.serde.loads_typed(_untyped(record["checkpoint"])),
            metadata=self.serde.loads_typed(_untyped(record["metadata"])),
            parent_config=(
                {"configurable": {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": parent}}
                if parent
                else None
            ),
            pending_writes=[(w["task_id"], w["channel"], self.serde.loads_typed(_untyped(w["value"]))) for w in writes],
        )

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        if config is None:
            return  # threads are listed per worker, by thread id only
        conf = config["configurable"]
        thread, wanted_ns = str(conf["thread_id"]), conf.get("checkpoint_ns")
        only, before_id = get_checkpoint_id(config), get_checkpoint_id(before) if before else None
        for ns, checkpoint_id in sorted(self.backend.ids(thread), key=lambda x: x[1], reverse=True):
            if (wanted_ns is not None and ns != wanted_ns) or (only and checkpoint_id != only):
                continue
            if before_id and checkpoint_id >= before_id:
                continue
            record = self.backend.get(thread, ns, checkpoint_id)
            if record is None:
                continue
            found = self._tuple(thread, ns, record)
            if filter and not all(found.metadata.get(k) == v for k, v in filter.items()):
                continue
            if limit is not None:
                if limit <= 0:
                    return
                limit -= 1
            yield found

    # -- writes ------------------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        conf = config["configurable"]
        thread, ns = str(conf["thread_id"]), str(conf.get("checkpoint_ns", ""))
        record = {
            "id": checkpoint["id"],
            "parent": conf.get("checkpoint_id"),
            "checkpoint": _typed(self.serde.dumps_typed(checkpoint)),
            "metadata": _typed(self.serde.dumps_typed(get_checkpoint_metadata(config, metadata))),
        }
        self.backend.put(thread, ns, checkpoint["id"], record)
        return {"configurable": {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}}

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        conf = config["configurable"]
        thread, ns, checkpoint_id = str(conf["thread_id"]), str(conf.get("checkpoint_ns", "")), conf["checkpoint_id"]
        for idx, (channel, value) in enumerate(writes):
            index = WRITES_IDX_MAP.get(channel, idx)
            record = {
                "task_id": task_id,
                "idx": index,
                "channel": channel,
                "value": _typed(self.serde.dumps_typed(value)),
                "task_path": task_path,
            }
            self.backend.put_write(thread, ns, checkpoint_id, f"{task_id}\x00{index}", record, keep=index >= 0)

    def delete_thread(self, thread_id: str) -> None:
        self.backend.delete(thread_id)

    # -- async: the same, in a worker thread ---------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        found = await asyncio.to_thread(lambda: list(self.list(config, filter=filter, before=before, limit=limit)))
        for item in found:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)
