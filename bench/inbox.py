"""P6, first half: the inbox's per-item cost against a bare loop over the same data.

Files: `--items` pending items are written by `FileInboxStore.write` (timed against a bare
atomic write of the same JSON). A copy of the pending folder is then drained by a bare loop —
read the JSON, parse, set "state", serialise, write it back atomically (temp + fsync + rename) —
and the original by `InboxAggregate.claim` (batches of `--batch`) + `consume`, with a no-op
handler, until the inbox is empty. Redis (if reachable): the same drain against a bare loop of
HGET + HSET per item. Rounds alternate which side goes first; the ratio is median / median.

Results go to bench/results/inbox.json; docs/benchmarks.md explains them.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import redis
from redis.asyncio import Redis

from genworker.autonomy.inbox import FileInboxStore, InboxAggregate, InboxState, RedisInboxStore, new_item
from genworker.autonomy.inbox.codec import encode_item

RESULTS = Path(__file__).resolve().parent / "results" / "inbox.json"
TENANT, WORKER = "acme", "alice"


def items(count: int) -> list[Any]:
    payload = {"repo": "acme/site", "sha": "0" * 40, "files": ["src/app.py", "README.md"], "message": "x" * 200}
    return [new_item(TENANT, WORKER, "git", "repo-1", "git.commit", {**payload, "n": n}) for n in range(count)]


def atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    Path(tmp).replace(path)


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- files ------------------------------------------------------------------------------


class FsyncCount:
    """Counts os.fsync calls (the file store and the bare loop both call it through `os`)."""

    def __init__(self) -> None:
        self.calls = 0
        self._real = os.fsync

    def __enter__(self) -> FsyncCount:
        os.fsync = self._counted
        return self

    def __exit__(self, *exc: object) -> None:
        os.fsync = self._real

    def _counted(self, fd: Any) -> None:
        self.calls += 1
        self._real(fd)


def bare_write(folder: Path, values: list[Any]) -> float:
    folder.mkdir(parents=True)
    started = time.perf_counter()
    for value in values:
        atomic_write(folder / f"{value.item_id}.json", encode_item(value, indent=2))
        fsync_dir(folder)
    return time.perf_counter() - started


def bare_drain(folder: Path) -> float:
    started = time.perf_counter()
    for path in sorted(folder.iterdir()):
        doc = json.loads(path.read_bytes())
        doc["state"] = "consumed"
        atomic_write(path, json.dumps(doc, indent=2).encode())
    fsync_dir(folder)
    return time.perf_counter() - started


async def our_write(store: FileInboxStore | RedisInboxStore, values: list[Any]) -> float:
    started = time.perf_counter()
    for value in values:
        await store.write(value)
    return time.perf_counter() - started


async def our_drain(inbox: InboxAggregate, batch: int) -> tuple[float, int]:
    async def handle(_: Any) -> None:
        return None

    done = 0
    started = time.perf_counter()
    while claimed := await inbox.claim(TENANT, WORKER, "bench", limit=batch, lease_s=600):
        for item in claimed:
            await handle(item)
            await inbox.consume(item, "bench")
            done += 1
    return time.perf_counter() - started, done


async def file_round(count: int, batch: int, ours_first: bool) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="genworker-bench-inbox-") as tmp:
        root = Path(tmp)
        store = FileInboxStore(root / "ws")
        values = items(count)
        write_ours = await our_write(store, values)
        write_bare = await asyncio.to_thread(bare_write, root / "bare-write", values)
        pending = store.inbox_dir(TENANT, WORKER) / "pending"
        copy = root / "bare-drain"
        await asyncio.to_thread(shutil.copytree, pending, copy)
        inbox = InboxAggregate(store)
        ours_fsyncs, bare_fsyncs = FsyncCount(), FsyncCount()

        async def ours() -> tuple[float, int]:
            with ours_fsyncs:
                return await our_drain(inbox, batch)

        async def bare() -> float:
            with bare_fsyncs:
                return await asyncio.to_thread(bare_drain, copy)

        if ours_first:
            drain_ours, done = await ours()
            drain_bare = await bare()
        else:
            drain_bare = await bare()
            drain_ours, done = await ours()
        assert done == count, (done, count)
        assert (await store.counts(TENANT, WORKER))[InboxState.CONSUMED] == count
    return {
        "write_ours": write_ours,
        "write_bare": write_bare,
        "drain_ours": drain_ours,
        "drain_bare": drain_bare,
        "fsyncs_ours": ours_fsyncs.calls,
        "fsyncs_bare": bare_fsyncs.calls,
    }


# -- Redis ------------------------------------------------------------------------------


async def redis_bare_drain(client: Redis, prefix: str, values: list[Any]) -> float:
    for value in values:
        await client.hset(f"{prefix}:bare:{value.item_id}", mapping={"doc": encode_item(value), "state": "pending"})
    started = time.perf_counter()
    for value in values:
        key = f"{prefix}:bare:{value.item_id}"
        doc = await client.hget(key, "doc")
        assert doc is not None
        json.loads(doc)
        await client.hset(key, "state", "consumed")
    return time.perf_counter() - started


async def redis_round(url: str, count: int, batch: int, ours_first: bool) -> dict[str, float]:
    client = Redis.from_url(url)
    prefix = f"bench-inbox-{uuid.uuid4().hex}"
    try:
        store = RedisInboxStore(client, prefix=prefix)
        values = items(count)
        write_ours = await our_write(store, values)
        inbox = InboxAggregate(store)
        if ours_first:
            drain_ours, done = await our_drain(inbox, batch)
            drain_bare = await redis_bare_drain(client, prefix, values)
        else:
            drain_bare = await redis_bare_drain(client, prefix, values)
            drain_ours, done = await our_drain(inbox, batch)
        assert done == count, (done, count)
    finally:
        keys = [k async for k in client.scan_iter(match=f"{prefix}:*", count=1000)]
        for start in range(0, len(keys), 1000):
            await client.delete(*keys[start : start + 1000])
        await client.aclose()
    return {"write_ours": write_ours, "drain_ours": drain_ours, "drain_bare": drain_bare}


def redis_reachable(url: str) -> bool:
    client = redis.Redis.from_url(url, socket_connect_timeout=1)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


# -- report -----------------------------------------------------------------------------


async def rounds(
    run: Callable[[bool], Awaitable[dict[str, float]]], repeats: int, label: str
) -> list[dict[str, float]]:
    samples = []
    for n in range(repeats):
        print(f"{label} round {n + 1}/{repeats} ...", flush=True)
        samples.append(await run(n % 2 == 0))
    return samples


def per_item_us(samples: list[dict[str, float]], key: str, count: int) -> float:
    return statistics.median(s[key] for s in samples) / count * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=10, help="claim limit")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--redis", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15"))
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    count, batch = args.items, args.batch
    files = asyncio.run(rounds(lambda first: file_round(count, batch, first), args.repeats, "files"))
    rows: list[tuple[str, float, float]] = [
        (
            "files: write (sensor path)",
            per_item_us(files, "write_ours", count),
            per_item_us(files, "write_bare", count),
        ),
        ("files: claim + consume", per_item_us(files, "drain_ours", count), per_item_us(files, "drain_bare", count)),
    ]
    samples: dict[str, Any] = {"files": files}
    if redis_reachable(args.redis):
        redis_samples = asyncio.run(
            rounds(lambda first: redis_round(args.redis, count, batch, first), args.repeats, "redis")
        )
        samples["redis"] = redis_samples
        rows.append(
            (
                "redis: claim + consume",
                per_item_us(redis_samples, "drain_ours", count),
                per_item_us(redis_samples, "drain_bare", count),
            )
        )
    else:
        print(f"Redis not reachable at {args.redis}: skipped", flush=True)

    fsyncs = {side: files[0][f"fsyncs_{side}"] / count for side in ("ours", "bare")}
    print(f"\n{count:,} items, claim batches of {batch}, median of {args.repeats} rounds\n")
    print(f"{'measurement':<30} {'ours µs/item':>13} {'bare µs/item':>13} {'ratio':>7}")
    for name, ours, bare in rows:
        print(f"{name:<30} {ours:>13.0f} {bare:>13.0f} {ours / bare:>6.2f}x")
    print(f"\nfsyncs per item drained (files and folders): ours {fsyncs['ours']:.1f}, bare {fsyncs['bare']:.1f}")

    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "when": dt.datetime.now(dt.UTC).isoformat(),
        "machine": {"python": sys.version.split()[0], "platform": platform.platform(), "cpus": os.cpu_count()},
        "items": count,
        "batch": batch,
        "repeats": args.repeats,
        "rows": [{"name": n, "ours_us": o, "bare_us": b, "ratio": o / b} for n, o, b in rows],
        "fsyncs_per_item": fsyncs,
        "samples_s": samples,
    }
    args.out.write_text(json.dumps(report, indent=2), encoding="utf-8")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
