"""Context spaces: what routing one fact costs with 10,000 stored spaces, without the model's time,
against a bare FTS5 lookup on the same index; and how well the scripted stream lands.

Cost (`--spaces`, `--facts`, `--rounds`): `--spaces` unrelated spaces are written to a worker's store
and index (`genworker.testing.fact_stream.seed_spaces`), then facts about ten topics are routed.
Per fact, medians over rounds that alternate which side goes first:

- **bare**: one `spaces_fts MATCH ? ORDER BY bm25 LIMIT 50` with the same query text, on its own
  connection to the same index file — the least a retrieval over the store can do;
- **decision**: `ContextSpaceRouter.workbench` — anchors, the three retrieval lists (≤ 50), profiles
  and ranking to ≤ 12 — what happens before the model would be asked; no write;
- **absorb**: `SpaceService.absorb` end to end with a chooser that answers at once (no model):
  the decision, the event log append (fdatasync), the space file (atomic, fsynced) and the index
  update; also with the fsyncs off, to show what the disk costs.

Quality: the 200-fact scripted stream of the tests (`scripted_stream`, 60 crowd spaces) routed with
the stream's oracle answering in process: B-cubed precision and recall against its labels, before and
after a person re-files the pending NEW spaces; how many facts needed the model.

Results go to bench/results/spaces.json; docs/benchmarks.md explains them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from genworker.autonomy.inbox import InboxItem
from genworker.autonomy.spaces import (
    Candidate,
    Choice,
    ContextEvent,
    ContextSpaceRouter,
    SpaceService,
    SpaceSettings,
    event_from_item,
)
from genworker.autonomy.spaces.chooser import question
from genworker.autonomy.spaces.index import IndexedSpace
from genworker.autonomy.spaces.retrieval import match_text
from genworker.memory.index import fts_query
from genworker.testing.fact_stream import Oracle, bcubed, scripted_stream, seed_spaces

RESULTS = Path(__file__).resolve().parent / "results" / "spaces.json"
TENANT, WORKER = "acme", "alice"
START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
SETTINGS = SpaceSettings(enabled=True)


class FirstChooser:
    """Answers at once: the best-ranked space shown, sure of it (no model time)."""

    async def choose(self, event: ContextEvent, shown: Sequence[IndexedSpace], now: datetime) -> Choice:
        return Choice(shown[0].space_id, 0.9, "the best-ranked space")


class OracleChooser:
    """The stream's oracle, asked in process with the router's own question and schema."""

    def __init__(self, oracle: Oracle) -> None:
        self.oracle = oracle

    async def choose(self, event: ContextEvent, shown: Sequence[IndexedSpace], now: datetime) -> Choice:
        from genworker.autonomy.spaces.chooser import _tool

        ids = [s.space_id for s in shown]
        body = {"messages": [{}, {"content": question(event, shown, now)}], "tools": [_tool(ids)]}
        reply = self.oracle(body)
        if not reply.tool_calls:  # prose: asked again by the real chooser, then unusable
            self.oracle(body)
            return Choice(None, 0.0, "no usable answer", usable=False, attempts=2)
        answer = reply.tool_calls[0].arguments
        choice = None if answer["choice"] == "NEW" else answer["choice"]
        return Choice(choice, answer["confidence"], answer["reason"])


def facts(seed: int, count: int) -> list[InboxItem]:
    """`count` facts about the stream's topics (a new seed: new texts and new items)."""
    stream = scripted_stream(seed, start=START)
    picked = [f.item for f in stream.facts if f.at >= stream.jump]
    random.Random(seed).shuffle(picked)
    return picked[:count]


def bare_lookup(path: Path, texts: Sequence[str]) -> float:
    conn = sqlite3.connect(path)
    try:
        started = time.perf_counter()
        for text in texts:
            conn.execute(
                "SELECT rowid FROM spaces_fts WHERE spaces_fts MATCH ? ORDER BY bm25(spaces_fts) LIMIT 50",
                (fts_query(text),),
            ).fetchall()
        return (time.perf_counter() - started) / len(texts)
    finally:
        conn.close()


def decisions(service: SpaceService, events: Sequence[ContextEvent], now: datetime) -> float:
    router, index = service.router, service.index(TENANT, WORKER)
    started = time.perf_counter()
    for event in events:
        router.workbench(index, event, SETTINGS, now)
    return (time.perf_counter() - started) / len(events)


async def absorbs(service: SpaceService, items: Sequence[InboxItem]) -> float:
    started = time.perf_counter()
    for item in items:
        await service.absorb(item)
    return (time.perf_counter() - started) / len(items)


def crowd(root: Path, spaces: int, now: datetime, *, durable: bool) -> SpaceService:
    service = SpaceService(
        root, ContextSpaceRouter(FirstChooser()), lambda t, w: SETTINGS, clock=lambda: now, durable=durable
    )
    started = time.perf_counter()
    seed_spaces(service, spaces, now, pinned_every=0)
    print(f"  {spaces:,} spaces written in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return service


async def cost(args: argparse.Namespace) -> dict[str, Any]:
    now = START + timedelta(days=40)
    samples: dict[str, list[float]] = {"bare": [], "decision": [], "absorb": [], "absorb_nofsync": []}
    with tempfile.TemporaryDirectory(prefix="bench-spaces-") as tmp:
        durable = crowd(Path(tmp) / "durable", args.spaces, now, durable=True)
        quick = crowd(Path(tmp) / "nofsync", args.spaces, now, durable=False)
        index_file = durable.store.index_path(TENANT, WORKER)
        for round_ in range(args.rounds):
            items = facts(100 + round_, args.facts)
            events = [event_from_item(i, now) for i in items]
            texts = [match_text(e) for e in events]
            sides = ["bare", "decision"] if round_ % 2 == 0 else ["decision", "bare"]
            for side in sides:
                if side == "bare":
                    samples["bare"].append(bare_lookup(index_file, texts))
                else:
                    samples["decision"].append(decisions(durable, events, now))
            samples["absorb"].append(await absorbs(durable, items))
            samples["absorb_nofsync"].append(await absorbs(quick, facts(200 + round_, args.facts)))
        counts = durable.counts(TENANT, WORKER)
        await durable.stop()
        await quick.stop()
    medians = {k: statistics.median(v) for k, v in samples.items()}
    return {"samples": samples, "medians": medians, "counts": counts}


async def quality() -> dict[str, Any]:
    stream = scripted_stream(start=START)
    oracle = Oracle(stream)
    now = [START]
    with tempfile.TemporaryDirectory(prefix="bench-spaces-stream-") as tmp:
        service = SpaceService(
            Path(tmp), ContextSpaceRouter(OracleChooser(oracle)), lambda t, w: SETTINGS,
            clock=lambda: now[0], durable=False,
        )  # fmt: skip
        landed: dict[int, str] = {}
        seeded = False
        for fact in stream.facts:
            if fact.at >= stream.jump and not seeded:
                seed_spaces(service, 60, stream.jump)
                seeded = True
            now[0] = fact.at
            absorbed = await service.absorb(fact.item)
            landed[fact.n] = absorbed.space.space_id if isinstance(absorbed, Candidate) else absorbed.space_id
            oracle.learned(landed[fact.n], fact.label)
        before = bcubed((f.label, landed[f.n]) for f in stream.facts)
        home = {
            label: Counter(landed[f.n] for f in stream.facts if f.label == label).most_common(1)[0][0]
            for label in {f.label for f in stream.facts}
        }
        for space_id, label in {landed[f.n]: f.label for f in stream.facts if f.ambiguous or f.garbled}.items():
            if home[label] != space_id:
                await service.refile(TENANT, WORKER, space_id, home[label])
                landed.update({f.n: home[label] for f in stream.facts if landed[f.n] == space_id})
        after = bcubed((f.label, landed[f.n]) for f in stream.facts)
        await service.stop()
    return {
        "facts": len(stream.facts),
        "sources": sorted(stream.sources),
        "asked_model": sum(oracle.asked.values()),
        "max_shown": max(oracle.shown),
        "bcubed_before_review": before,
        "bcubed_after_review": after,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spaces", type=int, default=10_000)
    parser.add_argument("--facts", type=int, default=150, help="facts routed per round and side")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    measured = asyncio.run(cost(args))
    stream = asyncio.run(quality())
    m = measured["medians"]
    print(f"\ncontext spaces: routing one fact with {args.spaces:,} stored spaces (no model time), median per fact")
    print(f"{'':34}{'time':>10}{'× bare FTS':>12}")
    for key, label in (
        ("bare", "bare FTS5 lookup (top 50)"),
        ("decision", "decision (anchors, ≤50, rank ≤12)"),
        ("absorb", "absorb, durable"),
        ("absorb_nofsync", "absorb, fsyncs off"),
    ):
        print(f"{label:34}{m[key] * 1000:>8.2f} ms{m[key] / m['bare']:>11.1f}×")
    b, a = stream["bcubed_before_review"], stream["bcubed_after_review"]
    print(
        f"\nscripted stream: {stream['facts']} facts from {len(stream['sources'])} sources, "
        f"{stream['asked_model']} model questions (≤ {stream['max_shown']} spaces shown)"
    )
    print(f"B-cubed precision {b[0]:.3f} recall {b[1]:.3f}; after re-filing the pending NEWs {a[0]:.3f} / {a[1]:.3f}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "when": datetime.now(UTC).isoformat(),
        "machine": platform.platform(),
        "python": platform.python_version(),
        "args": vars(args),
        "cost": measured,
        "stream": stream,
    }
    RESULTS.write_text(json.dumps(record, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
