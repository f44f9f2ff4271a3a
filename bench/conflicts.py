"""Cost of the Conflict Arbiter's commit-time check (issue #32): one tool call that declares the
resource it changes (tool_effects.yml), through the real ToolPipeline, run

- bare: the same pipeline without the commit check (the floor);
- file: with the commit check on the file ledger (flock per key; the single-host default);
- file+5: the same, while five other live plans (declared, serialized behind this one) claim the key,
  so each commit also checks five claims' plans;
- redis: with the commit check on the Redis ledger (the shared profile), on a redis-server of this
  run's own (skipped without redis-server);
- and, for reading the file figures, one durable `write_atomic` of a ledger-sized file (fsync of the
  file and its folder), the floor of any check that records a commit on disk.

Each call commits a change of one key by one plan (its run), so every check takes the key's lock, reads
the ledger's state and the plan's cases, runs the change, and records the new version and claim.
Same process, rounds rotate the variants; the figures are medians per call and ratios to the bare
pipeline measured in the same rounds. Writes bench/results/conflicts.json."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from cluster import own_redis  # bench/cluster.py: a redis-server of this run's own
from genworker.autonomy.conflicts import (
    CommitCheck,
    ConflictArbiter,
    ConflictStore,
    EffectRecord,
    FileLedger,
    RedisLedger,
    ResourceLedger,
)
from genworker.fsutil import write_atomic
from genworker.tools.base import Effect, ToolCall
from genworker.tools.context import ToolScope
from genworker.tools.effects import EffectResolver
from genworker.tools.outcomes import ToolCompleted
from genworker.tools.pipeline import ToolPipeline
from genworker.tools.tool import function_tool
from genworker.workspace.models.steward import ConflictConfig
from measure import write_results

RESULTS = Path(__file__).resolve().parent / "results" / "conflicts.json"
EFFECTS = (
    'issue_set_status:\n  resource: {key: "github:issue:{number}", operation: "set_status:{status}", '
    "version_result: version}\n"
)
_version = 0


@function_tool(effect=Effect.WRITE)
async def issue_set_status(ctx: Any, number: int, status: str) -> dict[str, Any]:
    """Set an issue's status.

    Args:
        number: The issue.
        status: open or closed.
    """
    global _version
    _version += 1
    return {"number": number, "status": status, "version": f"v{_version}"}


class Variant:
    def __init__(self, root: Path, ledger: ResourceLedger | None, number: int) -> None:
        self.root, self.number = root, number
        resolver = EffectResolver(root)
        checks: tuple[Any, ...] = ()
        self.arbiter: ConflictArbiter | None = None
        if ledger is not None:
            self.arbiter = ConflictArbiter(ConflictStore(root), ledger, lambda t: ConflictConfig())
            checks = (CommitCheck(self.arbiter, resolver),)
        self.pipeline = ToolPipeline([issue_set_status], effects=resolver, middlewares=checks)
        self.scope = ToolScope("acme", "alice", f"run-{number}", root / "tenants/acme/workers/alice", trust_level=2)

    async def others(self, count: int) -> None:
        """`count` declared plans on the key, serialized behind this variant's plan."""
        assert self.arbiter is not None
        key = f"github:issue:{self.number}"
        mine = EffectRecord(self.scope.run_id, "acme", "alice", key, "set_status:closed")
        await self.arbiter.plan("acme", "alice", self.scope.run_id, [mine])
        for i in range(count):
            other = EffectRecord(f"other-{self.number}-{i}", "acme", "alice", key, "set_status:open")
            await self.arbiter.plan("acme", "alice", other.plan_id, [other], run_bound=False)

    async def call(self, i: int) -> None:
        status = "closed" if i % 2 else "open"
        call = ToolCall(f"c{i}", "issue_set_status", {"number": self.number, "status": status})
        outcome = await self.pipeline.execute(self.scope, call)
        assert isinstance(outcome, ToolCompleted) and not outcome.result.is_error, outcome


class DurableWrite:
    """The reference: one durable write of a file the size of a key's ledger file."""

    def __init__(self, root: Path) -> None:
        self.path = root / "durable.json"

    async def call(self, i: int) -> None:
        await asyncio.to_thread(write_atomic_json, self.path, {"version": f"v{i}", "claims": {"run": EFFECTS}})


def write_atomic_json(path: Path, data: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(data, indent=1).encode("utf-8"))


async def _redis(url: str) -> aioredis.Redis:
    client = aioredis.Redis.from_url(url)
    deadline = time.monotonic() + 10
    while True:
        with contextlib.suppress(OSError, aioredis.ConnectionError):
            if await client.ping():
                return client
        if time.monotonic() > deadline:
            raise RuntimeError(f"redis-server at {url} did not answer")
        await asyncio.sleep(0.05)  # polling another process


async def measure(calls: int, rounds: int, redis_url: str | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "tenants/acme/workers/alice").mkdir(parents=True)
        (root / "tenants/acme/tool_effects.yml").write_text(EFFECTS, encoding="utf-8")
        variants: dict[str, Variant | DurableWrite] = {
            "bare": Variant(root, None, 1),
            "file": Variant(root, FileLedger(root), 2),
            "file+5": Variant(root, FileLedger(root), 3),
        }
        client = await _redis(redis_url) if redis_url else None
        if client is not None:
            variants["redis"] = Variant(root, RedisLedger(client, prefix="bench:conflicts:"), 4)
        variants["durable_write"] = DurableWrite(root)
        crowded = variants["file+5"]
        assert isinstance(crowded, Variant)
        await crowded.others(5)
        for variant in variants.values():  # warm-up
            for i in range(20):
                await variant.call(i)
        samples: dict[str, list[float]] = {name: [] for name in variants}
        names = list(variants)
        for round_no in range(rounds):
            order = names[round_no % len(names) :] + names[: round_no % len(names)]
            for name in order:
                started = time.perf_counter()
                for i in range(calls):
                    await variants[name].call(i)
                samples[name].append((time.perf_counter() - started) / calls * 1000)
        if client is not None:
            await client.aclose()
    medians = {name: statistics.median(s) for name, s in samples.items()}
    return {
        "calls_per_round": calls,
        "rounds": rounds,
        "samples_ms": samples,
        "median_ms": medians,
        "ratio_to_bare": {name: medians[name] / medians["bare"] for name in medians},
        "extra_ms": {name: medians[name] - medians["bare"] for name in medians},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=200, help="calls per variant per timed round")
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        redis_url: str | None = None
        if shutil.which("redis-server") is not None:
            redis_url = stack.enter_context(own_redis(Path(tmp)))
        else:
            print("bench/conflicts.py: no redis-server: the redis variant is skipped")
        result: Callable[[], Any] = lambda: measure(args.calls, args.rounds, redis_url)  # noqa: E731
        figures = asyncio.run(result())
    figures["bench_wall_s"] = time.perf_counter() - started
    print(f"Commit-time conflict check per tool call, {args.rounds} rounds x {args.calls} calls")
    for name, ms in figures["median_ms"].items():
        ratio, extra = figures["ratio_to_bare"][name], figures["extra_ms"][name]
        print(f"  {name:<13} {ms:8.3f} ms  {ratio:7.2f}x bare  +{extra:.3f} ms")
    write_results(RESULTS, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
