"""P6, second half: the HeartbeatRunner over `--items` inbox items with a no-op strategy
(every item dismissed: no model call), against a bare loop over a copy of the same files.

Ours: `HeartbeatRunner.run_once` until the inbox is empty — per batch of `--batch` items: claim
under a lease, AttentionLedger admission (persisted), the strategy, consume each item through
the InboxAggregate, the heartbeat meta update. Bare: read each JSON file, parse, set "state",
serialise, write it back atomically (temp + fsync + rename), fsync the folder once.
Rounds alternate which side goes first; the ratio is median / median.

    .venv/bin/python bench/heartbeat.py [--items 10000] [--batch 20] [--rounds 2]

Results go to bench/results/heartbeat.json; docs/benchmarks.md explains them.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from genworker.autonomy.heartbeat import Dismiss, HeartbeatService, HeartbeatSettings
from genworker.autonomy.inbox import FileInboxStore, InboxAggregate
from genworker.runtime.assembly import build_router
from genworker.runtime.composition import build_runtime
from genworker.settings import load_settings
from inbox import TENANT, WORKER, FsyncCount, bare_drain, items

RESULTS = Path(__file__).resolve().parent / "results" / "heartbeat.json"


class DismissAll:
    def decide_action(self, item: Any, config: Any) -> Dismiss:
        return Dismiss("bench: no-op")


def workspace(root: Path) -> Path:
    files = {
        f"tenants/{TENANT}/TENANT.json": json.dumps({"tenant_id": TENANT, "name": TENANT, "default_worker": WORKER}),
        f"tenants/{TENANT}/workers/{WORKER}/PERSONA.md": (
            f"---\nidentity:\n  name: Alice\n  worker_id: {WORKER}\n  role: assistant\nmode: personal\n---\nHi.\n"
        ),
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


async def one_round(count: int, batch: int, ours_first: bool) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="genworker-bench-heartbeat-") as tmp:
        root = workspace(Path(tmp) / "ws")
        (Path(tmp) / "configs").mkdir()
        settings = load_settings(Path(tmp) / "configs", {"GENWORKER_HOT_RELOAD": "false"}, workspace=root)
        runtime = await asyncio.to_thread(build_runtime, settings)
        router = build_router(runtime)
        store = FileInboxStore(root)
        for value in items(count):
            await store.write(value)
        pending = store.inbox_dir(TENANT, WORKER) / "pending"
        copy = Path(tmp) / "bare"
        await asyncio.to_thread(shutil.copytree, pending, copy)
        hb = HeartbeatSettings(batch_size=batch)
        runner = HeartbeatService.build(root, router, InboxAggregate(store), hb, strategy=DismissAll()).runner
        ours_fsyncs, bare_fsyncs = FsyncCount(), FsyncCount()

        async def ours() -> tuple[float, int]:
            done = 0
            started = time.perf_counter()
            with ours_fsyncs:
                while (report := await runner.run_once(TENANT, WORKER)).claimed:
                    done += report.claimed
            return time.perf_counter() - started, done

        async def bare() -> float:
            with bare_fsyncs:
                return await asyncio.to_thread(bare_drain, copy)

        if ours_first:
            (ours_s, done), bare_s = await ours(), await bare()
        else:
            bare_s = await bare()
            ours_s, done = await ours()
        if done != count:
            raise SystemExit(f"the heartbeat took {done} items, expected {count}")
        return {
            "ours_ms_per_item": ours_s * 1000 / count,
            "bare_ms_per_item": bare_s * 1000 / count,
            "ours_fsyncs_per_item": ours_fsyncs.calls / count,
            "bare_fsyncs_per_item": bare_fsyncs.calls / count,
        }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    rounds = [await one_round(args.items, args.batch, ours_first=i % 2 == 0) for i in range(args.rounds)]
    ours = statistics.median(r["ours_ms_per_item"] for r in rounds)
    bare = statistics.median(r["bare_ms_per_item"] for r in rounds)
    result = {
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {platform.python_version()}",
        "items": args.items,
        "batch": args.batch,
        "rounds": rounds,
        "ours_ms_per_item": round(ours, 3),
        "bare_ms_per_item": round(bare, 3),
        "ratio": round(ours / bare, 2),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"heartbeat, no-op strategy, {args.items} items in batches of {args.batch}:")
    print(f"  ours {ours:.3f} ms/item   bare {bare:.3f} ms/item   ratio {ours / bare:.2f}x")
    first = rounds[0]
    print(f"  fsyncs per item: ours {first['ours_fsyncs_per_item']:.2f}, bare {first['bare_fsyncs_per_item']:.2f}")


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
