"""JournaledFiles: one shared fdatasync per group of writes, checkpoints, and start-up recovery of
the journal a killed process left (a real subprocess, killed before it could close)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from genworker import write_journal as journal_module
from genworker.write_journal import DIRECT, JOURNAL_DIR, JournaledFiles, recover_journals


@pytest.fixture
def files(tmp_path: Path) -> Iterator[JournaledFiles]:
    journaled = JournaledFiles(tmp_path, interval_s=3600)  # checkpoints only when a test asks
    yield journaled
    journaled.close()


def segments(root: Path) -> list[Path]:
    return sorted((root / JOURNAL_DIR).glob("*.jsonl"))


class SyncCounter:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.fsync: list[int] = []
        self.fdatasync: list[int] = []
        real_fsync, real_fdatasync = os.fsync, os.fdatasync
        monkeypatch.setattr(os, "fsync", lambda fd: (self.fsync.append(fd), real_fsync(fd))[1])
        monkeypatch.setattr(os, "fdatasync", lambda fd: (self.fdatasync.append(fd), real_fdatasync(fd))[1])


def test_a_write_costs_one_journal_fdatasync_and_no_fsync(
    tmp_path: Path, files: JournaledFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    counter = SyncCounter(monkeypatch)
    target = tmp_path / "tenants" / "t" / "a.json"
    files.write_atomic(target, b'{"v": 1}', mode=0o644)
    assert files.create_exclusive(tmp_path / "b.json", b"b") is True
    assert files.create_exclusive(tmp_path / "b.json", b"other") is False  # no second record either
    assert files.move_file(tmp_path / "b.json", tmp_path / "done" / "b.json") is True
    assert files.remove(target) is True and files.remove(target) is False
    assert (counter.fsync, len(counter.fdatasync)) == ([], 4)
    assert (tmp_path / "done" / "b.json").read_bytes() == b"b"
    (segment,) = segments(tmp_path)
    ops = [line for line in segment.read_text(encoding="utf-8").splitlines() if '"op"' in line]
    assert [op.split('"op":"')[1].split('"')[0] for op in ops] == ["write", "create", "move", "remove"]


def test_lines_overwrite_zeros_written_ahead_and_a_segment_may_outgrow_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A segment starts as its header and zeros (on disk): a line's sync does not change the file's
    size. One that outgrows the zeros grows; every line is read back, and the zeros are not a torn
    line."""
    monkeypatch.setattr(journal_module, "SEGMENT_BYTES", 4096)
    files = JournaledFiles(tmp_path, interval_s=3600)
    try:
        files.write_atomic(tmp_path / "a", b"1")
        (segment,) = segments(tmp_path)
        assert segment.stat().st_size == 4096
        for i in range(5):
            files.write_atomic(tmp_path / f"big{i}", b"x" * 1000)  # ~1.4 KB a line in base64
        assert segment.stat().st_size > 4096
        records = list(journal_module._records(segment))
        assert [r.get("path") for r in records] == [None, "a", *(f"big{i}" for i in range(5))]
        assert "torn" not in caplog.text
    finally:
        files.close()


@pytest.mark.anyio
@pytest.mark.parametrize("here", [True, False])
async def test_a_block_syncs_on_the_callers_thread_when_sync_here_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, here: bool
) -> None:
    """`sync_here()` true when a block ends: its fdatasync runs on the caller's thread and the block is
    durable as it ends; false: the journal's sync thread does it and `durable()` waits for that."""
    threads: list[str] = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (threads.append(threading.current_thread().name), real(fd))[1])
    files = JournaledFiles(tmp_path, interval_s=3600, sync_here=lambda: here)
    try:
        async with files.pending() as written:
            files.write_atomic(tmp_path / "a.json", b"1")
        assert (written._synced is None) is here  # nothing left to wait for
        await written.durable()
        assert threads == ([threading.current_thread().name] if here else ["journal-sync"])
    finally:
        files.close()


def test_concurrent_writers_share_one_fdatasync(
    tmp_path: Path, files: JournaledFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first writer's fdatasync is held until five more lines are appended; those five then
    need one more fdatasync between them, not five."""
    appended = 0
    five_more = threading.Event()
    real_write, real_fdatasync = os.pwrite, os.fdatasync
    syncs: list[int] = []

    def write(fd: int, data: bytes, offset: int) -> int:
        nonlocal appended
        done = real_write(fd, data, offset)
        if b'"op"' in bytes(data):
            appended += 1
            if appended == 6:
                five_more.set()
        return done

    def fdatasync(fd: int) -> None:
        syncs.append(fd)
        if len(syncs) == 1:
            assert five_more.wait(30)
        real_fdatasync(fd)

    monkeypatch.setattr(os, "pwrite", write)
    monkeypatch.setattr(os, "fdatasync", fdatasync)
    threads = [threading.Thread(target=files.write_atomic, args=(tmp_path / f"f{i}", b"x")) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(syncs) == 2
    assert all((tmp_path / f"f{i}").read_bytes() == b"x" for i in range(6))


class SyncfsCounter:
    """Counts the checkpoint's `syncfs` calls (by the folder of the path each was made on)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.paths: list[str] = []
        real = journal_module._SYNCFS
        assert real is not None, "Linux has syncfs"

        def syncfs(fd: int) -> int:
            self.paths.append(str(Path(f"/proc/self/fd/{fd}").readlink()))
            return real(fd)

        monkeypatch.setattr(journal_module, "_SYNCFS", syncfs)


def test_checkpoint_makes_the_touched_files_durable_with_one_syncfs_and_drops_the_segment(
    tmp_path: Path, files: JournaledFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    files.write_atomic(tmp_path / "a", b"1")
    files.write_atomic(tmp_path / "a", b"2")
    files.write_atomic(tmp_path / "sub" / "b", b"3")
    old = segments(tmp_path)
    counter, syncfs = SyncCounter(monkeypatch), SyncfsCounter(monkeypatch)
    files.checkpoint()
    assert len(syncfs.paths) == 1  # two files and two folders, on one filesystem: one syncfs
    assert len(counter.fsync) == 2  # the new segment (its zeros) and .journal/, for its name
    assert segments(tmp_path) != old and len(segments(tmp_path)) == 1  # a fresh, empty segment
    files.write_atomic(tmp_path / "b", b"3")  # writes go on after a checkpoint
    assert (tmp_path / "b").read_bytes() == b"3"


def test_close_leaves_no_journal(tmp_path: Path) -> None:
    files = JournaledFiles(tmp_path)
    files.write_atomic(tmp_path / "a", b"1")
    files.close()
    assert list((tmp_path / JOURNAL_DIR).iterdir()) == []


def test_paths_outside_the_root_are_written_directly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = JournaledFiles(tmp_path / "ws")
    try:
        counter = SyncCounter(monkeypatch)
        files.write_atomic(tmp_path / "elsewhere.json", b"{}")
        assert counter.fsync and not counter.fdatasync
        assert not any('"op"' in s.read_text(encoding="utf-8") for s in segments(tmp_path / "ws"))
    finally:
        files.close()


CRASHING_WRITER = """
import os, sys
from pathlib import Path
from genworker.write_journal import JournaledFiles
root = Path(sys.argv[1])
files = JournaledFiles(root, interval_s=3600, boot_id=sys.argv[2])
files.write_atomic(root / "kept.json", b"journaled")
files.create_exclusive(root / "lost.json", b"created")
files.write_atomic(root / "emptied.json", b"full")
files.write_atomic(root / "newer.json", b"journaled")
files.create_exclusive(root / "active" / "m.json", b"manifest")
files.move_file(root / "active" / "m.json", root / "done" / "m.json")
files.write_atomic(root / "gone.json", b"x")
files.remove(root / "gone.json")
os._exit(0)  # killed: no close(), no checkpoint
"""


def crash_after_writes(root: Path, boot_id: str) -> None:
    subprocess.run([sys.executable, "-c", CRASHING_WRITER, str(root), boot_id], check=True, timeout=60)
    assert segments(root), "the killed writer left its journal"


def test_a_killed_writer_on_this_boot_is_made_durable_not_redone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    crash_after_writes(tmp_path, journal_module.current_boot_id())
    (tmp_path / "kept.json").write_bytes(b"changed later by someone else")
    counter = SyncCounter(monkeypatch)
    assert recover_journals(tmp_path) == 1
    assert counter.fsync  # what the segment touched is now durable
    assert (tmp_path / "kept.json").read_bytes() == b"changed later by someone else"
    assert list((tmp_path / JOURNAL_DIR).iterdir()) == []
    assert recover_journals(tmp_path) == 0


def test_after_a_reboot_lost_writes_are_redone_and_newer_files_kept(tmp_path: Path) -> None:
    crash_after_writes(tmp_path, "boot-before-the-power-cut")
    # What a power cut can leave: a file missing, one empty, one older; another process's newer write.
    (tmp_path / "lost.json").unlink()
    (tmp_path / "emptied.json").write_bytes(b"")
    (tmp_path / "kept.json").write_bytes(b"old")
    os.utime(tmp_path / "kept.json", ns=(1, 1))
    (tmp_path / "done" / "m.json").rename(tmp_path / "active" / "m.json")  # the move was lost
    (tmp_path / "newer.json").write_bytes(b"written after the journal")  # mtime now: newer
    (tmp_path / "gone.json").write_bytes(b"x")  # the removal was lost

    assert recover_journals(tmp_path, boot_id="boot-after") == 1

    assert (tmp_path / "lost.json").read_bytes() == b"created"
    assert (tmp_path / "emptied.json").read_bytes() == b"full"
    assert (tmp_path / "kept.json").read_bytes() == b"journaled"
    assert (tmp_path / "newer.json").read_bytes() == b"written after the journal"
    assert (tmp_path / "done" / "m.json").read_bytes() == b"manifest" and not (tmp_path / "active" / "m.json").exists()
    assert not (tmp_path / "gone.json").exists()
    assert list((tmp_path / JOURNAL_DIR).iterdir()) == []


def test_a_live_writer_journal_is_left_alone(tmp_path: Path, files: JournaledFiles) -> None:
    files.write_atomic(tmp_path / "a", b"1")
    before = segments(tmp_path)
    assert recover_journals(tmp_path) == 0
    assert segments(tmp_path) == before


def test_a_torn_last_line_is_skipped(tmp_path: Path) -> None:
    crash_after_writes(tmp_path, "old-boot")
    (segment,) = segments(tmp_path)
    with segment.open("ab") as fh:
        fh.write(b'{"op":"write","path":"torn.json","da')
    assert recover_journals(tmp_path, boot_id="new-boot") == 1
    assert not (tmp_path / "torn.json").exists()
    assert (tmp_path / "kept.json").read_bytes() == b"journaled"


def test_writes_together_share_one_wait_even_when_the_block_raises(
    tmp_path: Path, files: JournaledFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    counter = SyncCounter(monkeypatch)
    with files.together():
        files.create_exclusive(tmp_path / "manifest.json", b"m")
        with files.together():  # nested: the outer block waits
            files.write_atomic(tmp_path / "run.json", b"r")
        files.move_file(tmp_path / "manifest.json", tmp_path / "done" / "manifest.json")
        assert counter.fdatasync == []  # nothing waited yet
    assert len(counter.fdatasync) == 1
    with pytest.raises(RuntimeError), files.together():
        files.write_atomic(tmp_path / "run.json", b"r2")
        raise RuntimeError("the change failed after the write")
    assert len(counter.fdatasync) == 2  # what it wrote is durable all the same
    files.write_atomic(tmp_path / "alone.json", b"a")  # outside a block: its own wait again
    assert len(counter.fdatasync) == 3 and counter.fsync == []


def test_without_syncfs_the_checkpoint_fsyncs_each_touched_file_and_folder(
    tmp_path: Path, files: JournaledFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    files.write_atomic(tmp_path / "a", b"1")
    files.write_atomic(tmp_path / "sub" / "b", b"2")
    files.remove(tmp_path / "a")  # gone by the checkpoint: skipped, its folder is synced
    monkeypatch.setattr(journal_module, "_SYNCFS", None)
    counter = SyncCounter(monkeypatch)
    files.checkpoint()
    assert len(counter.fsync) == 5  # sub/b, sub/, the root folder, and the new segment and its folder


class HeldSync:
    """`os.fdatasync` that blocks until released, and says when the first call is waiting."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, error: OSError | None = None) -> None:
        self.waiting, self.release = threading.Event(), threading.Event()
        self.calls: list[int] = []
        real = os.fdatasync

        def fdatasync(fd: int) -> None:
            self.calls.append(threading.get_ident())
            self.waiting.set()
            assert self.release.wait(30)
            if error is not None:
                raise error
            real(fd)

        monkeypatch.setattr(os, "fdatasync", fdatasync)


@pytest.mark.anyio
async def test_run_works_on_the_loop_and_returns_once_the_disk_has_it(
    tmp_path: Path, files: JournaledFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = HeldSync(monkeypatch)
    ran_on: list[int] = []

    def work() -> str:
        ran_on.append(threading.get_ident())
        files.write_atomic(tmp_path / "a.json", b"1")
        with files.together():  # inside run(): run() waits, the block does not
            files.write_atomic(tmp_path / "b.json", b"2")
        return "done"

    task = asyncio.create_task(files.run(work))
    assert await asyncio.to_thread(held.waiting.wait, 30)
    assert ran_on == [threading.get_ident()]  # on the event loop, no worker thread
    assert threading.get_ident() not in held.calls  # the loop never waited on the disk
    assert not task.done()  # run() has not returned: its lines are not on disk yet ...
    assert await asyncio.sleep(0, "served") == "served"  # ... and the loop serves others meanwhile
    held.release.set()
    assert await task == "done"
    assert (tmp_path / "b.json").read_bytes() == b"2"


@pytest.mark.anyio
async def test_runs_waiting_together_share_one_fdatasync(
    tmp_path: Path, files: JournaledFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = HeldSync(monkeypatch)
    first = asyncio.create_task(files.run(lambda: files.write_atomic(tmp_path / "f0", b"x")))
    assert await asyncio.to_thread(held.waiting.wait, 30)  # the first one's fdatasync is held ...
    others = [
        asyncio.create_task(files.run(lambda i=i: files.write_atomic(tmp_path / f"f{i}", b"x"))) for i in range(1, 6)
    ]
    await asyncio.sleep(0)  # ... while five more runs write and queue up behind it
    held.release.set()
    await asyncio.gather(first, *others)
    assert len(held.calls) == 2  # one for the first, one for the five that waited together


@pytest.mark.anyio
async def test_a_failed_fdatasync_fails_the_run(
    tmp_path: Path, files: JournaledFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = HeldSync(monkeypatch, OSError(5, "Input/output error"))
    held.release.set()
    with pytest.raises(OSError, match="Input/output error"):
        await files.run(lambda: files.write_atomic(tmp_path / "a", b"1"))


@pytest.mark.anyio
async def test_direct_files_run_their_work_in_a_worker_thread(tmp_path: Path) -> None:
    def work() -> int:
        DIRECT.write_atomic(tmp_path / "a", b"1")
        return threading.get_ident()

    assert await DIRECT.run(work) != threading.get_ident()  # its fsyncs never stall the loop
    assert (tmp_path / "a").read_bytes() == b"1"


@pytest.mark.anyio
async def test_a_batch_of_runs_across_tasks_and_threads_waits_once_at_its_end(
    tmp_path: Path, files: JournaledFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    counter = SyncCounter(monkeypatch)

    async def store(name: str) -> None:  # a store's write, as the router's gather runs three
        await files.run(lambda: files.write_atomic(tmp_path / name, b"x"))

    async with files.batch():
        await store("session.json")
        await asyncio.gather(store("run.json"), store("episode.md"))
        await asyncio.to_thread(files.write_atomic, tmp_path / "index.json", b"i")  # a thread it started
        assert counter.fdatasync == []  # every one of them returned without waiting
    assert len(counter.fdatasync) == 1  # the block's end: one wait for all four
    await store("alone.json")
    assert len(counter.fdatasync) == 2 and counter.fsync == []


@pytest.mark.anyio
async def test_a_batch_that_raises_still_waits_and_a_task_that_outlives_it_waits_for_itself(
    tmp_path: Path, files: JournaledFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    counter = SyncCounter(monkeypatch)
    go = asyncio.Event()

    async def late_writer() -> None:  # started inside the block, writes after it ended
        await go.wait()
        await files.run(lambda: files.write_atomic(tmp_path / "late.json", b"l"))

    with pytest.raises(RuntimeError):
        async with files.batch():
            late = asyncio.create_task(late_writer())
            await files.run(lambda: files.write_atomic(tmp_path / "run.json", b"r"))
            raise RuntimeError("the turn failed after writing")
    assert len(counter.fdatasync) == 1  # what it wrote is durable all the same
    go.set()
    await late
    assert len(counter.fdatasync) == 2  # the closed block did not swallow the late write's wait


@pytest.mark.anyio
async def test_direct_files_batch_is_every_write_durable_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counter = SyncCounter(monkeypatch)
    async with DIRECT.batch():
        await DIRECT.run(lambda: DIRECT.write_atomic(tmp_path / "a", b"1"))
        assert len(counter.fsync) == 2  # the file and its folder, before run() returned


@pytest.mark.anyio
async def test_a_pending_block_starts_its_sync_at_its_end_and_durable_waits_for_it(
    tmp_path: Path, files: JournaledFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = HeldSync(monkeypatch)
    async with files.pending() as written:
        await files.run(lambda: files.write_atomic(tmp_path / "run.json", b"r"))
        await files.run(lambda: files.write_atomic(tmp_path / "session.json", b"s"))
    assert await asyncio.to_thread(held.waiting.wait, 30)  # the sync is under way ...
    overlapped = await asyncio.sleep(0, "recall and context")  # ... while the caller goes on
    waiter = asyncio.create_task(written.durable())
    await asyncio.sleep(0)
    assert overlapped and not waiter.done()  # durable() returns only once the disk has it
    held.release.set()
    await waiter
    await written.durable()  # again: at once
    assert len(held.calls) == 1


@pytest.mark.anyio
async def test_a_pending_block_that_raises_waits_before_the_error_goes_on(
    tmp_path: Path, files: JournaledFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    counter = SyncCounter(monkeypatch)
    with pytest.raises(RuntimeError):
        async with files.pending():
            await files.run(lambda: files.write_atomic(tmp_path / "run.json", b"r"))
            raise RuntimeError("governance failed after the write")
    assert len(counter.fdatasync) == 1
    async with files.pending() as nothing:  # a block that wrote nothing has nothing to wait for
        pass
    await nothing.durable()
    assert len(counter.fdatasync) == 1


@pytest.mark.anyio
async def test_a_pending_block_inside_another_waits_for_its_own_writes(
    tmp_path: Path, files: JournaledFiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    counter = SyncCounter(monkeypatch)
    async with files.batch():
        async with files.pending() as written:
            await files.run(lambda: files.write_atomic(tmp_path / "run.json", b"r"))
        await written.durable()
        assert len(counter.fdatasync) == 1  # on disk before the outer block ends
        await files.run(lambda: files.write_atomic(tmp_path / "session.json", b"s"))
    assert len(counter.fdatasync) == 2
