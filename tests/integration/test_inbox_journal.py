"""The file inbox's write-ahead journal: an acknowledged write survives a crash before it became a file
and lands exactly once; dedupe holds across the journal, settled files and older marker files; a torn
last line (a write never acknowledged) is ignored."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from genworker.autonomy.inbox import FileInboxStore, InboxAggregate, InboxItem, InboxState, journal, new_item
from genworker.autonomy.inbox.errors import InboxSchemaError

pytestmark = pytest.mark.anyio


def fact(n: int, **more: Any) -> InboxItem:
    return new_item("acme", "alice", "webhook", "hook-1", "webhook.fact", {"n": n}, **more)


def inbox(root: Path) -> Path:
    return root / "tenants" / "acme" / "workers" / "alice" / "runtime" / "inbox"


CRASHER = r"""
import asyncio, os, sys
from pathlib import Path
from genworker.autonomy.inbox import FileInboxStore, new_item

async def main() -> None:
    store = FileInboxStore(Path(sys.argv[1]))
    items = [new_item("acme", "alice", "webhook", "hook-1", "webhook.fact", {"n": n}, dedupe_key=f"k{n}")
             for n in range(200)]
    results = await asyncio.gather(*(store.write(item) for item in items))
    print(sum(results), flush=True)  # every write acknowledged; now wait to be killed before settling
    sys.stdin.readline()

asyncio.run(main())
"""


async def test_acknowledged_writes_survive_kill_9_and_land_exactly_once(tmp_path: Path) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        CRASHER,
        str(tmp_path),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 60)
        assert line == b"200\n"
        process.send_signal(signal.SIGKILL)  # before the settler's pause is over, or mid-settle
        await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    aggregate = InboxAggregate(FileInboxStore(tmp_path))
    claimed = await aggregate.claim("acme", "alice", "runner", limit=500)
    assert sorted(item.payload["n"] for item in claimed) == list(range(200))
    assert not (inbox(tmp_path) / journal.JOURNAL_NAME).exists()
    store = FileInboxStore(tmp_path)
    assert await store.write(fact(7, dedupe_key="k7")) is False  # the keys survived the crash too
    assert await aggregate.claim("acme", "alice", "runner-2", limit=500, lease_s=60) == ()


async def test_a_journal_left_behind_is_settled_once_even_if_settling_is_repeated(tmp_path: Path) -> None:
    store = FileInboxStore(tmp_path)
    items = [fact(n, dedupe_key=f"k{n}") for n in range(20)]
    assert all(await asyncio.gather(*(store.write(item) for item in items)))
    folder = inbox(tmp_path)
    left = (folder / journal.JOURNAL_NAME).read_bytes()  # as a crash mid-settle would leave it
    assert await FileInboxStore(tmp_path).counts("acme", "alice") == {
        **dict.fromkeys(InboxState, 0),
        InboxState.PENDING: 20,
    }
    (folder / journal.JOURNAL_NAME).write_bytes(left)
    fresh = FileInboxStore(tmp_path)
    assert len(await fresh.list("acme", "alice")) == 20
    assert await fresh.write(fact(99, dedupe_key="k3")) is False


async def test_item_files_torn_by_a_crash_mid_settle_are_written_again(tmp_path: Path) -> None:
    store = FileInboxStore(tmp_path)
    assert all(await asyncio.gather(*(store.write(fact(n, dedupe_key=f"k{n}")) for n in range(10))))
    folder = inbox(tmp_path)
    left = (folder / journal.JOURNAL_NAME).read_bytes()
    await store.counts("acme", "alice")  # settle: item files are written in place, not renamed into pending/
    [taken] = await InboxAggregate(store).claim("acme", "alice", "runner", limit=1)
    torn = sorted((folder / "pending").iterdir())[:3]
    for path in torn:
        path.write_bytes(path.read_bytes()[:40])  # as a crash mid-settle leaves them
    (folder / journal.JOURNAL_NAME).write_bytes(left)
    fresh = FileInboxStore(tmp_path)
    items = await fresh.list("acme", "alice")
    assert sorted(item.payload["n"] for item in items) == list(range(10))  # whole again, none twice
    assert {item.item_id: item.state for item in items}[taken.item_id] is InboxState.PROCESSING
    assert not (folder / "corrupt").exists()


async def test_duplicates_are_dropped_while_journaled_and_after_settling(tmp_path: Path) -> None:
    store = FileInboxStore(tmp_path)
    assert await store.write(fact(1, dedupe_key="same")) is True
    assert (inbox(tmp_path) / journal.JOURNAL_NAME).exists()  # not settled yet: the writes have not paused
    assert await store.write(fact(2, dedupe_key="same")) is False
    other = FileInboxStore(tmp_path)  # another process: its first write settles what it did not write
    assert await other.write(fact(3, dedupe_key="same")) is False
    assert not (inbox(tmp_path) / journal.JOURNAL_NAME).exists()
    assert await store.write(fact(4, dedupe_key="same")) is False
    [item] = await store.list("acme", "alice")
    assert item.payload["n"] == 1
    marker = next((inbox(tmp_path) / "dedupe").iterdir())
    assert marker.is_symlink() and str(marker.readlink()) == item.item_id


async def test_an_older_marker_file_still_holds_its_key_and_is_purged_with_its_item(tmp_path: Path) -> None:
    store = FileInboxStore(tmp_path)
    aggregate = InboxAggregate(store)
    first = fact(1, dedupe_key="legacy")
    assert await store.write(first) is True
    await store.counts("acme", "alice")  # settle
    marker = next((inbox(tmp_path) / "dedupe").iterdir())
    marker.unlink()
    marker.write_text(first.item_id, encoding="utf-8")  # the marker kind written before symlinks
    assert await FileInboxStore(tmp_path).write(fact(2, dedupe_key="legacy")) is False
    [claimed] = await aggregate.claim("acme", "alice", "runner", limit=1)
    await aggregate.consume(claimed, "runner")
    later = claimed.created_at.replace(year=claimed.created_at.year + 1)
    assert await store.delete_consumed("acme", "alice", before=later) == 1
    assert not marker.exists()
    assert await store.write(fact(3, dedupe_key="legacy")) is True


async def test_a_torn_last_line_is_ignored_and_the_next_write_is_whole(tmp_path: Path) -> None:
    store = FileInboxStore(tmp_path)
    assert await store.write(fact(1)) is True
    path = inbox(tmp_path) / journal.JOURNAL_NAME
    with path.open("ab") as fh:
        fh.write(b'{"schema_version": 1, "item_id": "ibx_torn')  # a write the crash cut short
    fresh = FileInboxStore(tmp_path)
    assert await fresh.write(fact(2)) is True
    items = await fresh.list("acme", "alice")
    assert sorted(item.payload["n"] for item in items) == [1, 2]
    assert not (inbox(tmp_path) / "corrupt").exists()


async def test_an_unknown_journal_schema_is_named(tmp_path: Path) -> None:
    folder = inbox(tmp_path)
    folder.mkdir(parents=True)
    (folder / journal.JOURNAL_NAME).write_bytes(json.dumps({"schema_version": 9, "journal_id": "x"}).encode() + b"\n")
    with pytest.raises(InboxSchemaError, match=r"journal\.jsonl: unsupported .* schema_version 9"):
        await FileInboxStore(tmp_path).write(fact(1))
