"""Durable file writes that cost one shared journal append instead of fsyncs per file.

Stores write through a `DurableFiles`: `DIRECT` makes each operation durable on its own (the
file and its folder fsynced, `fsutil`); `JournaledFiles` does the same operation without an
fsync and appends one line describing it to its process's journal under
`{workspace}/.journal/`, where concurrent writers share one `fdatasync` (group commit). Either
way the operation survives a power loss once the call returns.

From async code, `run(work)` runs a block of blocking file work and returns once what it wrote is
durable: `DirectFiles` in a worker thread (its fsyncs would stall the event loop); `JournaledFiles`
on the event loop itself, since its operations never wait on the disk there, and then awaits the
journal's `fdatasync`, which a group-commit thread (`group_commit.py`) does for every waiting
coroutine at once. A request's
file work then costs no thread hop and no thread switch per store call.

A checkpoint thread closes the journal's segment every `interval_s`, makes the files and folders
it touched durable (one `syncfs` per filesystem on Linux, else an fsync each) and deletes it, so
a journal holds well under a second of writes.

Start-up (`recover_journals`) finishes the journals of processes that are gone (their owner's
`flock` is free). A journal written on this boot needs no redo (its operations reached the page
cache before they were journaled): its files are fsynced. After a reboot the operations are
redone in order; a write only where the file is missing, empty or older than the operation, so
a newer write by another process is kept.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ctypes
import fcntl
import json
import logging
import os
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from genworker.fsutil import create_exclusive, fsync_dir, move_file, remove_file, write_atomic
from genworker.group_commit import GroupCommit, Request

__all__ = ["DIRECT", "DirectFiles", "DurableFiles", "JournaledFiles", "Written", "current_boot_id", "recover_journals"]

log = logging.getLogger(__name__)

JOURNAL_DIR = ".journal"
_FORMAT = 1
SEGMENT_BYTES = 256 * 1024  # zeros written ahead in each segment (a chat turn writes a few KB of lines)

T = TypeVar("T")
_Waits = list[tuple["_Segment", int]]


class _Block(list[tuple["_Segment", int]]):
    """The journal lines a `together()`, `run()` or `batch()` block owes a wait for. A task started in
    a block copies it with its context and may outlive it: once the block has ended (`closed`, set
    under the journal's lock) its operations wait for themselves."""

    closed = False


_WAITS: ContextVar[_Block | None] = ContextVar("genworker_journal_waits", default=None)


def _open_block() -> _Block | None:
    block = _WAITS.get()
    return block if block is not None and not block.closed else None


class DurableFiles(Protocol):
    """Blocking file operations, each durable when it returns: call them from a worker thread, or
    from async code through `run()`."""

    def write_atomic(self, path: Path, data: bytes, *, mode: int | None = None) -> None: ...

    def create_exclusive(self, path: Path, data: bytes, *, mode: int | None = None) -> bool: ...

    def move_file(self, source: Path, target: Path) -> bool: ...

    def remove(self, path: Path) -> bool: ...

    def together(self) -> AbstractContextManager[None]:
        """Operations in this block (this thread; a plain `with`, no `await` inside) are durable
        when it ends, sharing one wait."""
        ...

    async def run(self, work: Callable[[], T]) -> T:
        """Run blocking file work from async code; return its result once what it wrote is durable."""
        ...

    def batch(self) -> AbstractAsyncContextManager[None]:
        """`run()` calls inside this async block (in this task, and in tasks and threads it starts
        meanwhile) return once their work is done; the block's end waits once until all of it is
        durable. For writes that have to be durable together before anyone is told, such as the
        files that end a chat turn."""
        ...

    def pending(self) -> AbstractAsyncContextManager[Written]:
        """`batch()` whose end does not wait (unless the block raised): the sync starts there and the
        caller awaits `written.durable()` once it needs the writes on disk, doing other work meanwhile.
        A `batch()` or `pending()` inside another one is a block of its own (it waits for its writes)."""
        ...


class Written:
    """What a `pending()` block wrote: `await durable()` returns once it is on disk (at once, when it
    already is)."""

    def __init__(self) -> None:
        self._synced: asyncio.Future[None] | None = None

    def _started(self, synced: asyncio.Future[None] | None) -> None:
        self._synced = synced

    async def durable(self) -> None:
        if self._synced is not None:
            await asyncio.shield(self._synced)  # a cancelled waiter leaves the sync to the others


ON_DISK = Written()


class DirectFiles:
    """Every operation fsyncs its own file and folders."""

    def write_atomic(self, path: Path, data: bytes, *, mode: int | None = None) -> None:
        write_atomic(path, data, mode=mode)

    def create_exclusive(self, path: Path, data: bytes, *, mode: int | None = None) -> bool:
        return create_exclusive(path, data, mode=mode)

    def move_file(self, source: Path, target: Path) -> bool:
        return move_file(source, target)

    def remove(self, path: Path) -> bool:
        return remove_file(path)

    def together(self) -> AbstractContextManager[None]:
        return contextlib.nullcontext()

    async def run(self, work: Callable[[], T]) -> T:
        return await asyncio.to_thread(work)

    def batch(self) -> AbstractAsyncContextManager[None]:
        return contextlib.nullcontext()  # every operation is durable when it returns

    def pending(self) -> AbstractAsyncContextManager[Written]:
        return contextlib.nullcontext(ON_DISK)


DIRECT = DirectFiles()


def current_boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
    except OSError:  # not Linux: every journal is redone, which is always safe
        return ""


@dataclass
class _Segment:
    path: Path
    fd: int
    end: int = 0  # where the next line goes (zeros from here on)
    written: int = 0  # lines appended
    synced: int = 0  # lines known to be on disk
    syncing: bool = False
    opened: float = field(default_factory=time.monotonic)
    files: set[Path] = field(default_factory=set)
    folders: set[Path] = field(default_factory=set)


class JournaledFiles:
    """`DurableFiles` for everything under `root`, through this process's journal (paths outside
    `root` fall back to `DIRECT`). `close()` checkpoints and removes the journal."""

    def __init__(
        self,
        root: Path,
        *,
        interval_s: float = 0.5,
        boot_id: str | None = None,
        sync_here: Callable[[], bool] = lambda: False,
    ) -> None:
        self.root = Path(root)
        # True: a block that ends now syncs on the caller's thread (the event loop), saving the two
        # thread wake-ups of the group-commit hand-off; for when the loop has nothing else to do.
        self.sync_here = sync_here
        self.folder = self.root / JOURNAL_DIR
        self.folder.mkdir(parents=True, exist_ok=True)
        self.owner = f"{os.getpid()}-{secrets.token_hex(4)}"
        self.interval_s = interval_s
        self._boot_id = current_boot_id() if boot_id is None else boot_id
        self._lock_fd = os.open(self.folder / f"{self.owner}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        self._cond = threading.Condition()
        # run()'s waits; its thread lingers between turns (starting one costs more than an idle one)
        self._syncs: GroupCommit[_Waits, None] = GroupCommit(self._sync_batch, name="journal-sync", linger_s=10.0)
        self._numbers = iter(range(1, 1 << 62))
        self._segment = self._open_segment()
        self._stop = threading.Event()
        self._checkpointer = threading.Thread(target=self._checkpoint_loop, name="journal-checkpoint", daemon=True)
        self._checkpointer.start()

    # -- DurableFiles -------------------------------------------------------------------

    def write_atomic(self, path: Path, data: bytes, *, mode: int | None = None) -> None:
        if not self._owns(path):
            return DIRECT.write_atomic(path, data, mode=mode)
        ts = time.time_ns()
        write_atomic(path, data, mode=mode, durable=False)
        self._commit({"op": "write", "path": self._rel(path), "data": _b64(data), "mode": mode, "ts": ts}, path)
        return None

    def create_exclusive(self, path: Path, data: bytes, *, mode: int | None = None) -> bool:
        if not self._owns(path):
            return DIRECT.create_exclusive(path, data, mode=mode)
        ts = time.time_ns()
        if not create_exclusive(path, data, mode=mode, durable=False):
            return False
        self._commit({"op": "create", "path": self._rel(path), "data": _b64(data), "mode": mode, "ts": ts}, path)
        return True

    def move_file(self, source: Path, target: Path) -> bool:
        if not (self._owns(source) and self._owns(target)):
            return DIRECT.move_file(source, target)
        ts = time.time_ns()
        if not source.exists():  # moved before (or never there): nothing new to make durable
            return target.exists()
        moved = move_file(source, target, durable=False)
        self._commit({"op": "move", "path": self._rel(source), "to": self._rel(target), "ts": ts}, target, source)
        return moved

    def remove(self, path: Path) -> bool:
        if not self._owns(path):
            return DIRECT.remove(path)
        if not remove_file(path, durable=False):
            return False
        self._commit({"op": "remove", "path": self._rel(path), "ts": time.time_ns()}, None, path)
        return True

    @contextlib.contextmanager
    def together(self) -> Iterator[None]:
        if _open_block() is not None:  # nested (or inside run() or batch()): the outer block waits
            yield
            return
        waits = _Block()
        token = _WAITS.set(waits)
        try:
            yield
        finally:
            _WAITS.reset(token)
            with self._cond:  # also when the block raised: what it did is durable as it returns
                waits.closed = True
                for segment, line in waits:
                    self._sync_until(segment, line)

    async def run(self, work: Callable[[], T]) -> T:
        """`work` runs here, on the event loop: its operations only write and append. Then the
        group-commit thread makes what it wrote durable while the loop serves others (also when `work`
        raised after writing something)."""
        if _open_block() is not None:  # inside a together() or batch() block: that block waits
            return work()
        async with self.pending() as written:
            result = work()
        await written.durable()
        return result

    @contextlib.asynccontextmanager
    async def batch(self) -> AsyncIterator[None]:
        async with self.pending() as written:
            yield
        await written.durable()

    @contextlib.asynccontextmanager
    async def pending(self) -> AsyncIterator[Written]:
        # Nested in another block, it is a block of its own: its `durable()` must not return before
        # its writes are on disk, which the outer block only ensures at its end.
        waits, written = _Block(), Written()
        token = _WAITS.set(waits)
        failed = False
        try:
            yield written
        except BaseException:
            failed = True
            raise
        finally:
            _WAITS.reset(token)
            written._started(self._close(waits))
            if failed:  # what it did is durable before the error goes on
                await written.durable()

    def _close(self, waits: _Block) -> asyncio.Future[None] | None:
        """End a block and start the sync of what it wrote. From here on, a task it started waits for
        its own writes."""
        with self._cond:
            waits.closed = True
            owed = [(segment, line) for segment, line in waits if segment.synced < line]
            if owed and self.sync_here():
                for segment, line in owed:  # the fdatasync itself runs with the lock released
                    self._sync_until(segment, line)
                return None
        return self._syncs.enqueue(owed) if owed else None

    def _sync_batch(self, batch: list[Request[_Waits, None]]) -> list[Request[_Waits, None]]:
        """In the group-commit thread: every run() waiting by now shares the segment's fdatasyncs."""
        with self._cond:
            for request in batch:
                for segment, line in request.value:
                    self._sync_until(segment, line)
                request.future.set_result(None)
        return []

    # -- lifecycle ----------------------------------------------------------------------

    def checkpoint(self) -> None:
        """Close the current segment: fsync what it touched and delete it."""
        with self._cond:
            if self._segment.written == 0:
                return
        new = self._open_segment()  # outside the lock: writers keep appending meanwhile
        with self._cond:
            old, self._segment = self._segment, new
        self._finish(old)

    def close(self) -> None:
        self._stop.set()
        self._syncs.close()
        self._checkpointer.join()
        with self._cond:
            last = self._segment
        self._finish(last)
        (self.folder / f"{self.owner}.lock").unlink(missing_ok=True)
        os.close(self._lock_fd)

    # -- internals ----------------------------------------------------------------------

    def _owns(self, path: Path) -> bool:
        return path.is_relative_to(self.root)

    def _rel(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def _open_segment(self) -> _Segment:
        """A new segment: its header, then zeros up to `SEGMENT_BYTES`, all on disk. Lines overwrite the
        zeros, so a line's fdatasync writes its data block only, not the file's size as well (about half
        the time on ext4); a segment that outgrows the zeros simply grows."""
        path = self.folder / f"{self.owner}.{next(self._numbers):06d}.jsonl"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        header = _line({"journal": _FORMAT, "boot_id": self._boot_id, "pid": os.getpid()})
        os.pwrite(fd, header + bytes(max(SEGMENT_BYTES - len(header), 0)), 0)
        os.fsync(fd)
        fsync_dir(self.folder)
        return _Segment(path, fd, end=len(header))

    def _commit(self, record: dict[str, Any], file: Path | None, other: Path | None = None) -> None:
        """Append `record`; return once it (and any line before it) is on disk."""
        line = _line(record)
        with self._cond:
            segment = self._segment
            _write_at(segment.fd, line, segment.end)
            segment.end += len(line)
            segment.written += 1
            mine = segment.written
            if file is not None:
                segment.files.add(file)
                segment.folders.add(file.parent)
            if other is not None:
                segment.folders.add(other.parent)
            waits = _open_block()  # read under the lock that closes a block
            if waits is not None:
                waits.append((segment, mine))
            else:
                self._sync_until(segment, mine)

    def _sync_until(self, segment: _Segment, target: int) -> None:
        """Group commit (called holding `_cond`): one writer fdatasyncs for everyone waiting."""
        while segment.synced < target:
            if segment.syncing:
                self._cond.wait()
                continue
            segment.syncing = True
            upto = segment.written
            self._cond.release()
            try:
                os.fdatasync(segment.fd)
            finally:
                self._cond.acquire()
                segment.syncing = False
                self._cond.notify_all()
            segment.synced = max(segment.synced, upto)

    def _finish(self, segment: _Segment) -> None:
        with self._cond:
            self._sync_until(segment, segment.written)  # writers still waiting on it are released
        sync_paths([*segment.files, *segment.folders])
        os.close(segment.fd)
        segment.path.unlink(missing_ok=True)

    def _checkpoint_loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.checkpoint()
            except OSError:
                log.exception("journal checkpoint failed; retrying in %.1f s", self.interval_s)


def recover_journals(root: Path, *, boot_id: str | None = None) -> int:
    """Finish the journals under `root` whose process is gone; returns how many segments."""
    folder = Path(root) / JOURNAL_DIR
    if not folder.is_dir():
        return 0
    boot = current_boot_id() if boot_id is None else boot_id
    finished = 0
    for lock_path in sorted(folder.glob("*.lock")):
        owner = lock_path.name.removesuffix(".lock")
        try:
            fd = os.open(lock_path, os.O_RDWR)
        except FileNotFoundError:
            continue  # another process finished it just now
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # its process is alive
            for segment in sorted(folder.glob(f"{owner}.*.jsonl")):
                _recover_segment(Path(root), segment, boot)
                segment.unlink()
                finished += 1
            lock_path.unlink(missing_ok=True)
        finally:
            os.close(fd)
    if finished:
        fsync_dir(folder)
    return finished


def _recover_segment(root: Path, segment: Path, boot: str) -> None:
    records = list(_records(segment))
    if not records:
        return
    header, ops = records[0], records[1:]
    redo = not boot or header.get("boot_id") != boot
    touched: list[Path] = []
    for op in ops:
        path = root / op["path"]
        target = root / op["to"] if op["op"] == "move" else path
        if redo:
            _redo(op, path, target)
        touched += [target, path.parent, target.parent]
    sync_paths(list(dict.fromkeys(touched)))
    log.warning("journal %s: %d operations %s", segment.name, len(ops), "redone" if redo else "made durable")


def _redo(op: dict[str, Any], path: Path, target: Path) -> None:
    kind = op["op"]
    if kind in ("write", "create"):
        try:
            stat = path.stat()
            stale = stat.st_size == 0 or stat.st_mtime_ns < op["ts"]
        except FileNotFoundError:
            stale = True
        if stale:
            write_atomic(path, base64.b64decode(op["data"]), mode=op.get("mode"), durable=False)
    elif kind == "move":
        if path.exists():
            move_file(path, target, durable=False)
    elif kind == "remove":
        remove_file(path, durable=False)


def _write_at(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def _records(segment: Path) -> Iterator[dict[str, Any]]:
    """The segment's complete lines, up to its zeros (a line never holds a NUL byte: JSON escapes it);
    a torn last line (the crash came mid-write) was never acknowledged."""
    for raw in segment.read_bytes().split(b"\0", 1)[0].splitlines():
        try:
            yield json.loads(raw)
        except ValueError:
            log.warning("journal %s: skipping a torn line", segment.name)


def _syncfs_function() -> Callable[[int], int] | None:
    try:
        return getattr(ctypes.CDLL(None, use_errno=True), "syncfs", None)
    except OSError:  # no C library to load (not a Unix)
        return None


_SYNCFS = _syncfs_function()


def sync_paths(paths: list[Path]) -> None:
    """Make `paths` (files and folders) durable. On Linux one `syncfs` per filesystem they are on
    (one journal commit for all of them, where an fsync each costs one commit each); elsewhere an
    fsync each. Paths gone since (moved or removed) are skipped: their new state was recorded too."""
    if _SYNCFS is None:
        for path in paths:
            _fsync_path(path)
        return
    devices: dict[int, Path] = {}
    for path in paths:
        with contextlib.suppress(OSError):
            devices.setdefault(path.stat().st_dev, path)
    for path in devices.values():
        try:
            fd = os.open(path, os.O_RDONLY)
        except (FileNotFoundError, NotADirectoryError):
            continue
        try:
            if _SYNCFS(fd) != 0:
                error = ctypes.get_errno()
                raise OSError(error, f"syncfs {path}: {os.strerror(error)}")
        finally:
            os.close(fd)


def _fsync_path(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except (FileNotFoundError, NotADirectoryError):
        return  # moved or removed since: its new place is synced where it was recorded
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _line(record: dict[str, Any]) -> bytes:
    return json.dumps(record, separators=(",", ":")).encode("utf-8") + b"\n"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
