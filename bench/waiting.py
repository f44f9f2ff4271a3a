"""WAITING plans: resume latency with 100,000 waiting triggers against 100 (should be flat), and the
timeout scan at 100,000.

For each backend (files; Redis when reachable) two stores are filled: `--small` (100) and
`--large` (100,000) plans, each plan on its own `match_key` (`github:issue:{n}:updated`), spread
over 10 workers. Then, interleaved (small, large, large, small, ...) so that load on the machine
hits both sides alike:

- **lookup:** `store.waiters(key)` for a random parked key: the index alone, read-only;
- **resume:** `store.resume(key)` — the atomic WAITING -> GATED wake-up, including its durable
  write — then, untimed, the plan is parked again so both populations stay constant.

The ratio large / small of the medians is the flatness. Then, on the large store:

- **timeout scan, nothing due:** `expire_due` at a moment no plan is due (the usual 60 s tick);
- **timeout scan, 1% due:** the 1,000 earliest expiries are due at once;
- **bare scan (files):** what an unindexed lookup costs — read and parse every plan file to find
  one key — once, for scale.

Seeding is not what is measured: the file store's durable writes (fsync) are swapped for plain
writes while plans are parked (eight threads), and Redis plans are parked in concurrent batches
of 50. Results go to bench/results/waiting.json; docs/benchmarks.md explains them.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack, contextmanager
from pathlib import Path
from typing import Any

import redis

from genworker.autonomy.waiting import FileWaitingStore, RedisWaitingStore, WaitingPlan, WaitingStore, plan_from_json
from genworker.autonomy.waiting import file_store as file_store_module

RESULTS = Path(__file__).resolve().parent / "results" / "waiting.json"
T0 = dt.datetime(2026, 3, 1, 9, 0, tzinfo=dt.UTC)
TENANT = "acme"


def plan(n: int) -> WaitingPlan:
    return WaitingPlan(
        plan_id=f"p{n}",
        tenant_id=TENANT,
        worker_id=f"w{n % 10}",
        match_key=key(n),
        title=f"issue {n}",
        created_at=T0,
        expires_at=T0 + dt.timedelta(hours=1, seconds=n),  # one per second from 10:00
        resume={"text": f"continue issue {n}"},
    )


def key(n: int) -> str:
    return f"github:issue:{n}:updated"


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_ms": statistics.median(ordered) * 1000,
        "p90_ms": ordered[max(0, int(0.9 * len(ordered)) - 1)] * 1000,
        "max_ms": ordered[-1] * 1000,
        "n": len(ordered),
    }


async def timed(call: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = await call()
    return time.perf_counter() - start, result


# -- seeding ----------------------------------------------------------------------------------


@contextmanager
def fast_writes() -> Iterator[None]:
    real_write, real_fsync = file_store_module.write_atomic, file_store_module.fsync_dir

    def plain(path: Path, data: bytes, *, mode: int | None = None) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    file_store_module.write_atomic = plain  # type: ignore[assignment]
    file_store_module.fsync_dir = lambda folder: None  # type: ignore[assignment]
    try:
        yield
    finally:
        file_store_module.write_atomic = real_write
        file_store_module.fsync_dir = real_fsync


def seed_files(root: Path, count: int) -> tuple[FileWaitingStore, float]:
    store = FileWaitingStore(root)

    def one(n: int) -> None:  # what add_sync writes (markers, then the plan), without its lock
        store._index_plan(plan(n))
        store._write(store._plan_path(TENANT, f"w{n % 10}", f"p{n}"), plan(n))

    start = time.perf_counter()
    with fast_writes(), ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(count), chunksize=256))
    return store, time.perf_counter() - start


async def seed_redis(url: str, count: int) -> tuple[RedisWaitingStore, float]:
    store = RedisWaitingStore(url, prefix=f"bench-{uuid.uuid4().hex[:8]}")
    start = time.perf_counter()
    for first in range(0, count, 50):  # the client's connection pool bounds concurrency
        await asyncio.gather(*(store.add(plan(n)) for n in range(first, min(first + 50, count))))
    return store, time.perf_counter() - start


# -- measurements -----------------------------------------------------------------------------


async def interleaved(
    stores: dict[str, tuple[WaitingStore, int]], samples: int, rng: random.Random
) -> dict[str, dict[str, Any]]:
    lookups: dict[str, list[float]] = {name: [] for name in stores}
    resumes: dict[str, list[float]] = {name: [] for name in stores}
    order = list(stores)
    for i in range(samples):
        for name in order if i % 2 == 0 else reversed(order):
            store, count = stores[name]
            n = rng.randrange(count)
            seconds, found = await timed(lambda store=store, n=n: store.waiters(TENANT, key(n)))
            assert [p.plan_id for p in found] == [f"p{n}"], found
            lookups[name].append(seconds)
            seconds, woken = await timed(lambda store=store, n=n, i=i: store.resume(TENANT, key(n), f"e{i}", T0))
            assert [p.plan_id for p in woken] == [f"p{n}"], woken
            resumes[name].append(seconds)
            p = woken[0]
            await store.transition(TENANT, p.worker_id, p.plan_id, "gated", "waiting", now=T0)  # park it again
    return {name: {"lookup": summary(lookups[name]), "resume": summary(resumes[name])} for name in stores}


async def scans(store: WaitingStore, count: int) -> dict[str, Any]:
    idle = []
    for _ in range(5):
        seconds, nothing = await timed(lambda: store.expire_due(T0 + dt.timedelta(minutes=30)))
        assert nothing == []
        idle.append(seconds)
    due_at = T0 + dt.timedelta(hours=1, seconds=count // 100 - 1)
    busy, expired = await timed(lambda: store.expire_due(due_at, limit=count))
    return {
        "nothing_due": summary(idle),
        "one_percent_due_ms": busy * 1000,
        "expired": len(expired),
        "per_expired_ms": busy * 1000 / max(len(expired), 1),
    }


def bare_scan(root: Path, match_key: str) -> float:
    start = time.perf_counter()
    found = []
    for path in (root / "tenants" / TENANT / "workers").glob("*/runtime/waiting/*.json"):
        p = plan_from_json(path.read_bytes(), path.as_posix())
        if p.match_key == match_key and p.state == "waiting":
            found.append(p)
    assert len(found) == 1
    return time.perf_counter() - start


def flatness(rows: dict[str, dict[str, Any]]) -> dict[str, float]:
    return {what: rows["large"][what]["median_ms"] / rows["small"][what]["median_ms"] for what in ("lookup", "resume")}


async def run_files(args: argparse.Namespace, rng: random.Random) -> dict[str, Any]:
    roots = {name: Path(tempfile.mkdtemp(prefix=f"bench-waiting-{name}-")) for name in ("small", "large")}
    try:
        small, small_s = seed_files(roots["small"], args.small)
        large, large_s = seed_files(roots["large"], args.large)
        rows = await interleaved({"small": (small, args.small), "large": (large, args.large)}, args.samples, rng)
        rows["small"]["plans"], rows["small"]["seed_s"] = args.small, small_s
        rows["large"]["plans"], rows["large"]["seed_s"] = args.large, large_s
        rows["large"]["bare_scan_ms"] = bare_scan(roots["large"], key(rng.randrange(args.large))) * 1000
        rows["large"]["scan"] = await scans(large, args.large)
        return {**rows, "flatness": flatness(rows)}
    finally:
        for root in roots.values():
            shutil.rmtree(root, ignore_errors=True)


async def run_redis(url: str, args: argparse.Namespace, rng: random.Random) -> dict[str, Any]:
    async with AsyncExitStack() as stack:
        small, small_s = await seed_redis(url, args.small)
        stack.push_async_callback(drop, url, small)
        large, large_s = await seed_redis(url, args.large)
        stack.push_async_callback(drop, url, large)
        rows = await interleaved({"small": (small, args.small), "large": (large, args.large)}, args.samples, rng)
        rows["small"]["plans"], rows["small"]["seed_s"] = args.small, small_s
        rows["large"]["plans"], rows["large"]["seed_s"] = args.large, large_s
        rows["large"]["scan"] = await scans(large, args.large)
        return {**rows, "flatness": flatness(rows)}


async def drop(url: str, store: RedisWaitingStore) -> None:
    prefix = store._prefix
    await store.aclose()
    client = redis.Redis.from_url(url)
    try:
        for name in client.scan_iter(f"{prefix}:*", count=5000):
            client.delete(name)
    finally:
        client.close()


def redis_url(url: str) -> str | None:
    client = redis.Redis.from_url(url, socket_connect_timeout=1)
    try:
        client.ping()
        return url
    except redis.RedisError:
        return None
    finally:
        client.close()


async def main(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(7)
    out: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).date().isoformat(),
        "machine": f"{platform.machine()} {platform.system()}, python {sys.version.split()[0]}",
        "samples": args.samples,
        "files": await run_files(args, rng),
    }
    url = redis_url(args.redis)
    if url is not None:
        out["redis"] = await run_redis(url, args, rng)
    return out


def report(out: dict[str, Any]) -> None:
    for backend in ("files", "redis"):
        if backend not in out:
            print(f"{backend}: skipped (not reachable)")
            continue
        data = out[backend]
        for size in ("small", "large"):
            row = data[size]
            print(
                f"{backend:5} {row['plans']:>7} plans: lookup median {row['lookup']['median_ms']:.3f} ms; "
                f"resume median {row['resume']['median_ms']:.3f} ms, p90 {row['resume']['p90_ms']:.3f} ms "
                f"(seeded in {row['seed_s']:.0f} s)"
            )
        flat = data["flatness"]
        print(f"{backend:5} large / small: lookup {flat['lookup']:.2f}x, resume {flat['resume']:.2f}x")
        scan = data["large"]["scan"]
        print(
            f"{backend:5} scan of {data['large']['plans']}: nothing due {scan['nothing_due']['median_ms']:.2f} ms; "
            f"1% due {scan['one_percent_due_ms']:.0f} ms for {scan['expired']} plans "
            f"({scan['per_expired_ms']:.3f} ms each)"
        )
        if "bare_scan_ms" in data["large"]:
            print(f"{backend:5} bare scan of {data['large']['plans']} files: {data['large']['bare_scan_ms']:.0f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", type=int, default=100)
    parser.add_argument("--large", type=int, default=100_000)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/15")
    parser.add_argument("--out", type=Path, default=RESULTS)
    arguments = parser.parse_args()
    results = asyncio.run(main(arguments))
    report(results)
    arguments.out.parent.mkdir(parents=True, exist_ok=True)
    arguments.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
