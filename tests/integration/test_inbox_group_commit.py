"""Concurrent writes to one worker's file inbox share a commit: each is still durable when it says True,
dedupe stays exact within a batch, across batches and across processes, and a failing write fails alone.
A write is durable once its journal line is fsynced; any read settles the journal into item files."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from genworker.autonomy.inbox import FileInboxStore, InboxItem, InboxState, encode_item, file_store, journal, new_item

pytestmark = pytest.mark.anyio


def fact(n: int, **more: Any) -> InboxItem:
    return new_item("acme", "alice", "webhook", "hook-1", "webhook.fact", {"n": n}, **more)


async def pending(root: Path) -> set[str]:
    """The item ids in pending/, once the journal is settled (as any read does)."""
    await FileInboxStore(root).counts("acme", "alice")
    folder = root / "tenants" / "acme" / "workers" / "alice" / "runtime" / "inbox" / "pending"
    return {p.name.split(".")[1] for p in folder.glob("*.json")}


async def test_concurrent_writes_are_each_durable_when_true_and_share_fsyncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: set[str] = set()  # item ids whose journal lines were written and fsynced
    appends = 0
    real = journal.append

    def recording(path: Path, mark: journal.JournalMark | None, lines: list[bytes]) -> journal.JournalMark:
        nonlocal appends
        result = real(path, mark, lines)  # returns only after the fsync
        appends += 1
        synced.update(json.loads(line)["item_id"] for line in lines)
        return result

    monkeypatch.setattr(journal, "append", recording)
    store = FileInboxStore(tmp_path)
    items = [fact(n) for n in range(200)]

    async def write(value: InboxItem) -> None:
        assert await store.write(value) is True
        assert value.item_id in synced, "write said True before its journal line was fsynced"

    await asyncio.gather(*(write(value) for value in items))
    assert appends < len(items) // 2, "concurrent writes should share journal appends"
    counts = await FileInboxStore(tmp_path).counts("acme", "alice")  # another store settles what it finds
    assert counts[InboxState.PENDING] == len(items)
    assert (await pending(tmp_path)) == {value.item_id for value in items}


async def test_dedupe_is_exact_within_and_across_batches(tmp_path: Path) -> None:
    store = FileInboxStore(tmp_path)
    first = [fact(n, dedupe_key=f"k{n % 10}") for n in range(100)]
    results = await asyncio.gather(*(store.write(value) for value in first))
    assert sum(results) == 10
    winners = {value.dedupe_key: value.item_id for value, ok in zip(first, results, strict=True) if ok}
    assert len(winners) == 10 and (await pending(tmp_path)) == set(winners.values())

    again = [fact(n, dedupe_key=f"k{n % 20}") for n in range(100)]  # keys k0..k9 are taken, k10..k19 new
    results = await asyncio.gather(*(store.write(value) for value in again))
    assert sum(results) == 10
    assert {value.dedupe_key for value, ok in zip(again, results, strict=True) if ok} == {
        f"k{n}" for n in range(10, 20)
    }

    same = fact(1000)
    assert sorted(await asyncio.gather(store.write(same), store.write(same), store.write(same))) == [False, False, True]
    assert len(await pending(tmp_path)) == 21


async def test_a_failing_write_fails_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    poisoned = fact(0, dedupe_key="shared")
    real = encode_item

    def encode(item: InboxItem, **kwargs: Any) -> bytes:
        if item.item_id == poisoned.item_id:
            raise OSError("disk said no")
        return real(item, **kwargs)

    monkeypatch.setattr(file_store, "encode_item", encode)
    store = FileInboxStore(tmp_path)
    others = [fact(n) for n in range(1, 50)]
    same_key = fact(50, dedupe_key="shared")  # must land: the first writer of its key failed
    results = await asyncio.gather(
        store.write(poisoned), *(store.write(value) for value in others), store.write(same_key), return_exceptions=True
    )
    assert isinstance(results[0], OSError)
    assert results[1:] == [True] * (len(others) + 1)
    assert (await pending(tmp_path)) == {value.item_id for value in [*others, same_key]}
    assert await store.write(fact(51, dedupe_key="shared")) is False


WRITER = r"""
import asyncio, json, sys
from pathlib import Path
from genworker.autonomy.inbox import FileInboxStore, new_item

async def main() -> list[bool]:
    store = FileInboxStore(Path(sys.argv[1]))
    items = [new_item("acme", "alice", "webhook", "hook-1", "webhook.fact", {"n": n}, dedupe_key=f"k{n % 50}")
             for n in range(200)]
    return list(await asyncio.gather(*(store.write(item) for item in items)))

print("ready", flush=True)
sys.stdin.readline()
print(json.dumps(asyncio.run(main())), flush=True)
"""


async def test_dedupe_is_exact_across_processes(tmp_path: Path) -> None:
    processes = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            WRITER,
            str(tmp_path),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for _ in range(2)
    ]
    try:
        for process in processes:
            assert process.stdout is not None
            assert await asyncio.wait_for(process.stdout.readline(), 60) == b"ready\n"
        outputs = await asyncio.gather(*(asyncio.wait_for(p.communicate(b"go\n"), 120) for p in processes))
    finally:
        for process in processes:
            if process.returncode is None:
                process.kill()
                await process.wait()
    accepted = 0
    for process, (out, err) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, err.decode("utf-8", "replace")
        accepted += sum(json.loads(out.decode("utf-8")))
    assert accepted == 50
    assert len(await pending(tmp_path)) == 50
