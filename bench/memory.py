"""Memory: recall latency over the embedded index at 10,000 and 100,000 episodes against a bare
SQLite FTS5 query on the same text, and episode write throughput with indexing against file-only.

Recall: `MemoryIndex.search` (OR-query of the terms, scope filter join, BM25 with decay re-ranking
and hit building) and the whole `MemoryService.recall` (orchestrator, both providers, layering)
against `SELECT rowid FROM t WHERE t MATCH ? ORDER BY rank LIMIT 10` on a plain FTS5 table holding
the same bodies. Writes: `OwnerMemory.write` (atomic file, then the index) against
`EpisodeStore.write` (atomic file only). Rounds alternate; the ratio is median / median.

Results go to bench/results/memory.json; docs/benchmarks.md explains them.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import platform
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from genworker.memory import MemoryBinding, MemoryQuery, MemoryService
from genworker.memory.episodes import EpisodeStore
from genworker.memory.index import SearchFilters, fts_query
from genworker.memory.models import Episode, Provenance, Scope, ScopeKind

RESULTS = Path(__file__).resolve().parent / "results" / "memory.json"
T0 = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
WORDS = [f"w{n}" for n in range(5_000)]  # a Zipf-ish vocabulary: a few common terms, many rare ones
QUERIES = ["w3 w120 w4000", "w17 w999", "w1 w2 w3000 w4500", "w250 w2500", "w42 w4242 w7"]


def episodes(count: int, seed: int = 1) -> Iterator[Episode]:
    rng = random.Random(seed)
    weights = [1 / (n + 1) for n in range(len(WORDS))]
    for n in range(count):
        body = " ".join(rng.choices(WORDS, weights, k=40))
        yield Episode.model_construct(
            schema_version=1, episode_id=f"ep_20250101000000_{n:08x}", tenant_id="acme", worker_id="alice",
            scope="worker:alice", kind="episode", title=body[:40], created_at=T0 + dt.timedelta(minutes=n),
            source="run", provenance=Provenance(goal_id=f"g{n % 10}"), weight=1.0, reinforced_at=None,
            recall_count=0, consolidated_from=(), body=body,
        )  # fmt: skip


def timed(fn: Callable[[], Any], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def recall_at(size: int, rounds: int, root: Path) -> dict[str, Any]:
    (root / "tenants/acme/workers/alice").mkdir(parents=True)
    service = MemoryService(root)
    owner = service.worker("acme", "alice")
    data = list(episodes(size))
    started = time.perf_counter()
    owner.index.add(data)
    build_s = time.perf_counter() - started
    owner._synced = True  # the episodes live only in the index here: no file sync in the timing

    bare = sqlite3.connect(root / "bare.sqlite3")
    bare.execute("CREATE VIRTUAL TABLE t USING fts5(body)")
    bare.executemany("INSERT INTO t (rowid, body) VALUES (?, ?)", ((i, e.body) for i, e in enumerate(data)))
    bare.commit()

    scopes = (Scope(ScopeKind.WORKER, "alice"),)
    binding = MemoryBinding("acme", "alice", run_id="r")
    loop = asyncio.new_event_loop()

    def ours() -> None:
        for q in QUERIES:
            owner.index.search(q, SearchFilters(scopes), 10)

    def filtered() -> None:
        for q in QUERIES:
            owner.index.search(q, SearchFilters(scopes, goal_id="g3"), 10)

    def service_recall() -> None:
        for q in QUERIES:
            loop.run_until_complete(service.recall(MemoryQuery(q, binding)))

    def baseline() -> None:
        for q in QUERIES:
            bare.execute("SELECT rowid FROM t WHERE t MATCH ? ORDER BY rank LIMIT 10", (fts_query(q),)).fetchall()

    medians: dict[str, list[float]] = {"bare": [], "index": [], "index_goal_filter": [], "service": []}
    for r in range(rounds):
        pairs = [("bare", baseline), ("index", ours), ("index_goal_filter", filtered), ("service", service_recall)]
        for name, fn in pairs if r % 2 == 0 else reversed(pairs):
            medians[name].append(timed(fn, 3) / len(QUERIES))
    loop.close()
    bare.close()
    service.close()
    ms = {k: statistics.median(v) * 1000 for k, v in medians.items()}
    return {
        "episodes": size,
        "index_build_s": round(build_s, 2),
        "ms_per_query": {k: round(v, 3) for k, v in ms.items()},
        "ratio_index_vs_bare": round(ms["index"] / ms["bare"], 2),
        "ratio_service_vs_bare": round(ms["service"] / ms["bare"], 2),
    }


def writes(count: int, rounds: int, root: Path) -> dict[str, Any]:
    (root / "tenants/acme/workers/alice").mkdir(parents=True)
    service = MemoryService(root)
    owner = service.worker("acme", "alice")
    files_only = EpisodeStore(root / "files_only")
    batches = [list(episodes(count, seed=r)) for r in range(rounds)]
    results: dict[str, list[float]] = {"file_only": [], "file_and_index": []}
    for r, batch in enumerate(batches):
        fresh = [e.model_copy(update={"episode_id": f"ep_20250101000000_{r:04x}{i:04x}"}) for i, e in enumerate(batch)]
        sides = [("file_only", files_only.write), ("file_and_index", owner.write)]
        for name, write in sides if r % 2 == 0 else reversed(sides):
            start = time.perf_counter()
            for e in fresh:
                write(e)
            results[name].append(count / (time.perf_counter() - start))
    service.close()
    per_s = {k: statistics.median(v) for k, v in results.items()}
    return {
        "episodes_per_round": count,
        "episodes_per_s": {k: round(v, 1) for k, v in per_s.items()},
        "ratio_indexed_vs_file_only": round(per_s["file_only"] / per_s["file_and_index"], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--writes", type=int, default=200)
    args = parser.parse_args()
    report: dict[str, Any] = {
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
        "sqlite": sqlite3.sqlite_version,
        "machine": platform.machine(),
        "recall": [],
    }
    for size in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            row = recall_at(size, args.rounds, Path(tmp))
        report["recall"].append(row)
        print(f"recall @ {size:>7}: {row['ms_per_query']}  index/bare x{row['ratio_index_vs_bare']}")
    with tempfile.TemporaryDirectory() as tmp:
        report["writes"] = writes(args.writes, args.rounds, Path(tmp))
    print(f"writes: {report['writes']['episodes_per_s']}  x{report['writes']['ratio_indexed_vs_file_only']}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
