"""Inbox items as files: ``{workspace}/tenants/{t}/workers/{w}/runtime/inbox/``.

::

    journal.jsonl                                  accepted writes not yet turned into item files
    pending/ processing/ consumed/ failed/ dead/   one file per item, named
                                                   {created_at µs since 1970, 20 digits}.{item_id}.json
    dedupe/{sha256 of the dedupe_key}              names the item that first used the key: a symlink to its
                                                   id (older inboxes: a file holding the id)
    corrupt/                                       unreadable items, moved out of the way by claim
    .lock                                          flock: exclusive to change anything, shared to read
    .generation                                    changes whenever a name is added to pending/

A write is acknowledged once its line is in the journal (see journal.py): concurrent writes share one
append and one fdatasync. The journal is then *settled* -- each line becomes an item file in pending/
(fsynced), then its dedupe marker, then the journal is removed -- by a background thread once writes
pause (settler.py), and before any read or claim, so a reader never misses an acknowledged write.
Settling is idempotent: after a crash the next settle redoes whatever was left. Dedupe is decided at
the write, under the lock: a key is taken when its marker exists or the journal holds it.

The file's content is the truth and its folder an index: a change rewrites the file in place
(temp file, fsync, rename) and then renames it into the folder of its new state, so an item is
never in two folders. A file found in the wrong folder after a crash is moved to the right one.
Names sort oldest first, so a claim lists `pending/` without reading it (and keeps the sorted list
until `.generation` changes); it reads only the files it takes plus those in `processing/` and
`failed/` (to find expired leases and due retries).
Every blocking call runs in a worker thread, never in the event loop.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import fcntl
import hashlib
import logging
import os
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, NamedTuple

from genworker.autonomy.inbox import journal
from genworker.autonomy.inbox.codec import check_owner, decode_item, encode_item
from genworker.autonomy.inbox.errors import InboxCorruptError, InboxError, InboxSchemaError
from genworker.autonomy.inbox.journal import JOURNAL_NAME, JournalMark
from genworker.autonomy.inbox.models import InboxItem, InboxState
from genworker.autonomy.inbox.settler import Settler
from genworker.autonomy.inbox.store import (
    DEFAULT_LIST_LIMIT,
    check_batch,
    check_claim_args,
    check_list_args,
    check_new_item,
    claimed,
    is_claimable,
    micros,
    with_state_of,
)
from genworker.autonomy.inbox.topics import publish_quietly, written_event
from genworker.bus import EventBus
from genworker.group_commit import GroupCommit, Request
from genworker.ids import safe_join, validate_id

__all__ = ["FileInboxStore"]

log = logging.getLogger(__name__)

_STATES: Final = tuple(InboxState)
_DUE_STATES: Final = (InboxState.PROCESSING, InboxState.FAILED)
_DEDUPE: Final = "dedupe"
_CORRUPT: Final = "corrupt"
_LOCK: Final = ".lock"
_GENERATION: Final = ".generation"
_FSYNC_POOL: Final = ThreadPoolExecutor(max_workers=8, thread_name_prefix="inbox-fsync")


def _utc_now() -> datetime:
    return datetime.now(UTC)


class _Entry(NamedTuple):
    """One item file, known by name only: sorts oldest first."""

    created_us: int
    item_id: str
    name: str
    state: InboxState


@dataclass
class _PendingView:
    """This process's sorted list of pending names, valid while the folder's generation is unchanged.

    Writers (and anything moving an item into pending/) change the generation; claims in other
    processes only remove names, which a claim notices when the file is gone.
    """

    generation: str
    entries: builtins.list[_Entry]
    position: int = 0

    def peek(self) -> _Entry | None:
        return self.entries[self.position] if self.position < len(self.entries) else None


@dataclass
class _Journaled:
    """What this process appended to a worker's journal since it was last settled."""

    mark: JournalMark | None
    names: set[str] = field(default_factory=set)  # item file names
    markers: set[str] = field(default_factory=set)  # dedupe marker names
    items: builtins.list[InboxItem] = field(default_factory=list)  # in journal order


_Request = Request[InboxItem, bool]
_Fresh = builtins.list[tuple[_Request, str, str | None]]


def _file_name(item: InboxItem) -> str:
    return f"{micros(item.created_at):020d}.{item.item_id}.json"


def _parse_name(name: str, state: InboxState) -> _Entry | None:
    stamp, dot, rest = name.partition(".")
    if not dot or len(stamp) != 20 or not stamp.isdigit() or not rest.endswith(".json"):
        return None
    return _Entry(int(stamp), rest.removesuffix(".json"), name, state)


class FileInboxStore:
    def __init__(
        self, workspace_root: Path, *, bus: EventBus | None = None, clock: Callable[[], datetime] = _utc_now
    ) -> None:
        self._root = Path(workspace_root)
        self._bus = bus
        self._clock = clock
        self._reported: set[str] = set()  # unreadable files already logged by claim
        self._views: dict[Path, _PendingView] = {}  # read and changed only under the exclusive lock
        self._writers: dict[tuple[str, str], GroupCommit[InboxItem, bool]] = {}
        self._writers_lock = threading.Lock()
        self._write_dirs: dict[tuple[str, str], Path] = {}  # only the worker's own drain thread adds its key
        self._journaled: dict[Path, _Journaled] = {}  # read and changed only under the exclusive lock
        self._settler = Settler(self._settled)

    def inbox_dir(self, tenant_id: str, worker_id: str) -> Path:
        """The worker's inbox folder (blocking: resolves symlinks); ids validated, stays in the workspace."""
        return safe_join(
            self._root,
            "tenants",
            validate_id(tenant_id, "tenant id"),
            "workers",
            validate_id(worker_id, "worker id"),
            "runtime",
            "inbox",
        )

    async def write(self, item: InboxItem) -> bool:
        stored = check_new_item(item)
        if not await self._writer(stored).submit(stored):
            return False
        await publish_quietly(self._bus, written_event(stored))
        return True

    def _writer(self, item: InboxItem) -> GroupCommit[InboxItem, bool]:
        """The worker's group commit: concurrent writes in this process share one lock and one journal fsync."""
        key = (item.tenant_id, item.worker_id)
        with self._writers_lock:
            writer = self._writers.get(key)
            if writer is None:
                writer = self._writers[key] = GroupCommit(self._append, name=f"inbox-write-{key[0]}-{key[1]}")
        return writer

    async def get(self, tenant_id: str, worker_id: str, item_id: str) -> InboxItem | None:
        return await asyncio.to_thread(self._get, tenant_id, worker_id, item_id)

    async def list(
        self,
        tenant_id: str,
        worker_id: str,
        state: InboxState | None = None,
        *,
        limit: int = DEFAULT_LIST_LIMIT,
        offset: int = 0,
    ) -> tuple[InboxItem, ...]:
        check_list_args(limit, offset)
        return await asyncio.to_thread(self._list, tenant_id, worker_id, state, limit, offset)

    async def counts(self, tenant_id: str, worker_id: str) -> Mapping[InboxState, int]:
        return await asyncio.to_thread(self._counts, tenant_id, worker_id)

    async def claim(
        self, tenant_id: str, worker_id: str, owner: str, *, limit: int, lease_s: float
    ) -> tuple[InboxItem, ...]:
        check_claim_args(owner, limit, lease_s)
        return await asyncio.to_thread(self._claim, tenant_id, worker_id, owner, limit, lease_s)

    async def compare_and_set(self, item: InboxItem, expected_version: int) -> InboxItem | None:
        return await asyncio.to_thread(self._compare_and_set, item, expected_version)

    async def compare_and_set_many(self, changes: Sequence[tuple[InboxItem, int]]) -> builtins.list[InboxItem | None]:
        if not changes:
            return []
        check_batch(changes)
        return await asyncio.to_thread(self._compare_and_set_many, changes)

    async def delete_consumed(self, tenant_id: str, worker_id: str, *, before: datetime, limit: int = 1000) -> int:
        if limit < 1:
            raise ValueError("limit must be 1 or more")
        return await asyncio.to_thread(self._purge, tenant_id, worker_id, micros(before), limit)

    # -- blocking parts, run in a worker thread ------------------------------------

    def _append(self, batch: builtins.list[_Request]) -> builtins.list[_Request]:
        """Journal a batch of new items of one worker under one lock: one append, one fdatasync, and only
        then is each write answered True. An item that fails to encode fails alone. A request repeating
        an earlier one of the batch waits for the next batch, to see how that one ends."""
        first = batch[0].value
        folder = self._write_dir(first.tenant_id, first.worker_id)
        with _locked(folder, exclusive=True):
            journaled = self._journal_of(folder)
            fresh, later = _fresh(folder, batch, journaled)
            lines: builtins.list[bytes] = []
            kept: _Fresh = []
            for entry in fresh:
                try:
                    lines.append(encode_item(entry[0].value))
                except BaseException as exc:
                    entry[0].future.set_exception(exc)
                    continue
                kept.append(entry)
            if not kept:
                return later
            try:
                journaled.mark = journal.append(folder / JOURNAL_NAME, journaled.mark, lines)
            except BaseException as exc:
                self._journaled.pop(folder, None)
                for request, _, _ in kept:
                    request.future.set_exception(exc)
                return later
            for request, name, marker in kept:
                journaled.names.add(name)
                journaled.items.append(request.value)
                if marker is not None:
                    journaled.markers.add(marker)
        for request, _, _ in kept:
            request.future.set_result(True)
        self._settler.appended(folder, len(kept))
        return later

    def _write_dir(self, tenant_id: str, worker_id: str) -> Path:
        """`inbox_dir`, resolved once per worker for its group commit (a batch needs no path walk)."""
        key = (tenant_id, worker_id)
        folder = self._write_dirs.get(key)
        if folder is None:
            folder = self._write_dirs[key] = self.inbox_dir(tenant_id, worker_id)
        return folder

    def _journal_of(self, folder: Path) -> _Journaled:
        """This process's view of the worker's journal; a journal it did not write (another process's, or
        one a crash left behind) is settled first. Call under the exclusive lock."""
        mark = journal.mark_of(folder / JOURNAL_NAME)
        known = self._journaled.get(folder)
        if known is not None and known.mark == mark:
            return known
        if mark is not None:
            self._settle(folder)
        known = self._journaled[folder] = _Journaled(None)
        return known

    def _settled(self, folder: Path) -> None:
        """Settle the worker's journal if there is one (blocking; takes the exclusive lock)."""
        if (folder / JOURNAL_NAME).exists():
            with _locked(folder, exclusive=True):
                self._settle(folder)

    def _settle(self, folder: Path) -> None:
        """Turn the journal's lines into fsynced item files in pending/, then their markers, then drop the
        journal. Idempotent: an item already stored is skipped (its marker made if missing). Call under
        the exclusive lock."""
        path = folder / JOURNAL_NAME
        known = self._journaled.get(folder)
        if known is not None and known.mark is not None and known.mark == journal.mark_of(path):
            items = known.items  # this process's own journal: dedupe was decided as each line was appended
            new = [(item, _file_name(item)) for item in items]
        else:
            lines = journal.read_lines(path)
            if lines is None:
                self._journaled.pop(folder, None)
                return
            found = self._journal_items(folder, lines)
            items = [item for item, _, _ in found]
            new = [(item, name) for item, name, stored in found if not stored]
        if new:
            pending = folder / InboxState.PENDING
            pending.mkdir(exist_ok=True)
            _write_new([(pending / name, encode_item(item, indent=2)) for item, name in new])
            _bump_generation(folder)
            _fsync_dirs([pending])
        if any(item.dedupe_key is not None for item in items):
            (folder / _DEDUPE).mkdir(exist_ok=True)
            for item in items:
                if item.dedupe_key is not None:
                    _make_marker(folder / _DEDUPE / _dedupe_name(item.dedupe_key), item.item_id)
            _fsync_dirs([folder / _DEDUPE])
        journal.remove(path)
        self._journaled.pop(folder, None)

    def _journal_items(self, folder: Path, lines: builtins.list[bytes]) -> builtins.list[tuple[InboxItem, str, bool]]:
        """(item, file name, already stored) for each line; a key another item holds drops the line, an
        unreadable line is kept in corrupt/."""
        found: builtins.list[tuple[InboxItem, str, bool]] = []
        seen: set[str] = set()
        where = str(folder / JOURNAL_NAME)
        for line in lines:
            try:
                item = check_owner(decode_item(line, where), *_owner(folder), where)
            except InboxError as exc:
                _keep_corrupt_line(folder, line, exc)
                continue
            name = _file_name(item)
            owner = _marker_owner(folder / _DEDUPE / _dedupe_name(item.dedupe_key)) if item.dedupe_key else None
            key = item.dedupe_key or name
            if key in seen or (owner is not None and owner != item.item_id):
                log.info("inbox journal %s: item %s dropped, its dedupe key is taken", where, item.item_id)
                continue
            seen.add(key)
            found.append((item, name, _locate(folder, name, _STATES[1:]) is not None))  # pending/: maybe half written
        return found

    def _purge(self, tenant_id: str, worker_id: str, cutoff_us: int, limit: int) -> int:
        folder = self.inbox_dir(tenant_id, worker_id)
        if not folder.is_dir():
            return 0
        with _locked(folder, exclusive=True):
            old = sorted(
                e for e in _entries(folder / InboxState.CONSUMED, InboxState.CONSUMED) if e.created_us < cutoff_us
            )
            old = old[:limit]
            markers = False
            for entry in old:
                path = folder / InboxState.CONSUMED / entry.name
                try:
                    key = self._read(path, tenant_id, worker_id).dedupe_key
                except InboxError:
                    key = None
                if key is not None:
                    marker = folder / _DEDUPE / _dedupe_name(key)
                    if _marker_owner(marker) == entry.item_id:
                        marker.unlink(missing_ok=True)
                        markers = True
                path.unlink(missing_ok=True)
            if old:
                _fsync_dirs([folder / InboxState.CONSUMED, *([folder / _DEDUPE] if markers else [])])
        return len(old)

    def _get(self, tenant_id: str, worker_id: str, item_id: str) -> InboxItem | None:
        validate_id(item_id, "inbox item id")
        folder = self.inbox_dir(tenant_id, worker_id)
        if not folder.is_dir():
            return None
        self._settled(folder)
        with _locked(folder, exclusive=False):
            for sub in (*_STATES, _CORRUPT):
                for entry in _entries(folder / sub, InboxState.PENDING):  # the state is unused here
                    if entry.item_id == item_id:
                        return self._read(folder / sub / entry.name, tenant_id, worker_id)
        return None

    def _list(
        self, tenant_id: str, worker_id: str, state: InboxState | None, limit: int, offset: int
    ) -> tuple[InboxItem, ...]:
        folder = self.inbox_dir(tenant_id, worker_id)
        if not folder.is_dir():
            return ()
        self._settled(folder)
        found: list[InboxItem] = []
        with _locked(folder, exclusive=False):
            entries = sorted(e for s in ([state] if state else _STATES) for e in _entries(folder / s, s))
            for entry in entries[offset : offset + limit]:
                path = folder / entry.state / entry.name
                try:
                    found.append(self._read(path, tenant_id, worker_id))
                except InboxError as exc:
                    log.error("skipping unreadable inbox item: %s", exc)
        return tuple(found)

    def _counts(self, tenant_id: str, worker_id: str) -> dict[InboxState, int]:
        folder = self.inbox_dir(tenant_id, worker_id)
        if not folder.is_dir():
            return dict.fromkeys(_STATES, 0)
        self._settled(folder)
        with _locked(folder, exclusive=False):
            return {state: sum(1 for _ in _entries(folder / state, state)) for state in _STATES}

    def _claim(self, tenant_id: str, worker_id: str, owner: str, limit: int, lease_s: float) -> tuple[InboxItem, ...]:
        folder = self.inbox_dir(tenant_id, worker_id)
        if not folder.is_dir():
            return ()
        taken: list[InboxItem] = []
        touched: set[Path] = set()
        with _locked(folder, exclusive=True):
            self._settle(folder)
            now = self._clock()
            try:
                moves: builtins.list[tuple[Path, InboxItem]] = []
                for path, item in self._claimable(folder, tenant_id, worker_id, now, touched):
                    moves.append((path, claimed(item, owner, now, lease_s)))
                    if len(moves) >= limit:
                        break
                touched |= _move_many(folder, moves)
                taken = [item for _, item in moves]
            except BaseException:
                self._views.pop(folder, None)
                raise
            finally:
                _fsync_dirs(touched)
        return tuple(taken)

    def _claimable(
        self, folder: Path, tenant_id: str, worker_id: str, now: datetime, touched: set[Path]
    ) -> Iterator[tuple[Path, InboxItem]]:
        """Claimable items oldest first: pending names merged with due processing/failed items."""
        due: builtins.list[tuple[_Entry, InboxItem]] = []
        for state in _DUE_STATES:
            for entry in _entries(folder / state, state):
                item = self._read_for_claim(folder, entry, tenant_id, worker_id, touched)
                if item is not None and is_claimable(item, now):
                    due.append((entry, item))
        due.sort(key=lambda pair: pair[0])
        pending = self._pending_view(folder)
        next_due = 0
        while True:  # a merge without look-ahead: a pending name leaves the view only once it is examined
            head = pending.peek()
            if head is None and next_due == len(due):
                return
            if head is not None and (next_due == len(due) or head < due[next_due][0]):
                pending.position += 1
                entry, item = head, self._read_for_claim(folder, head, tenant_id, worker_id, touched)
            else:
                (entry, item), next_due = due[next_due], next_due + 1
            if item is not None:
                yield folder / entry.state / entry.name, item

    def _pending_view(self, folder: Path) -> _PendingView:
        """The sorted pending names, listed again only when something may have been added since."""
        generation = _read_generation(folder)
        view = self._views.get(folder)
        if view is None or view.generation != generation:
            entries = sorted(_entries(folder / InboxState.PENDING, InboxState.PENDING))
            view = self._views[folder] = _PendingView(generation, entries)
        return view

    def _read_for_claim(
        self, folder: Path, entry: _Entry, tenant_id: str, worker_id: str, touched: set[Path]
    ) -> InboxItem | None:
        """The item, or None: a newer schema is left alone, a corrupt file is moved to corrupt/, a file in
        the wrong folder is moved to the right one (and looked at on the next claim)."""
        path = folder / entry.state / entry.name
        try:
            item = self._read(path, tenant_id, worker_id)
        except FileNotFoundError:
            return None
        except InboxSchemaError as exc:
            if str(path) not in self._reported:
                self._reported.add(str(path))
                log.error("inbox item left unclaimed: %s", exc)
            return None
        except InboxCorruptError as exc:
            quarantine = folder / _CORRUPT / entry.name
            quarantine.parent.mkdir(exist_ok=True)
            path.rename(quarantine)
            touched.update({path.parent, quarantine.parent})
            log.error("%s; moved to %s, the inbox goes on without it", exc, quarantine)
            return None
        if item.state is not entry.state:
            log.warning("inbox item %s is %s but was found in %s/: moved back", path, item.state, entry.state)
            touched |= _move(path, folder, item, rewrite=False)
            return None
        return item

    def _compare_and_set(self, item: InboxItem, expected_version: int) -> InboxItem | None:
        folder = self.inbox_dir(item.tenant_id, item.worker_id)
        name = _file_name(item)
        with _locked(folder, exclusive=True):
            path = _locate(folder, name)
            if path is None:
                return None
            current = self._read(path, item.tenant_id, item.worker_id)
            if current.version != expected_version or current.item_id != item.item_id:
                return None
            stored = with_state_of(current, item, expected_version + 1)
            _fsync_dirs(_move(path, folder, stored))
        return stored

    def _compare_and_set_many(self, changes: Sequence[tuple[InboxItem, int]]) -> builtins.list[InboxItem | None]:
        first = changes[0][0]
        folder = self.inbox_dir(first.tenant_id, first.worker_id)
        results: builtins.list[InboxItem | None] = [None] * len(changes)
        with _locked(folder, exclusive=True):
            plans: builtins.list[tuple[int, Path, InboxItem]] = []
            for index, (item, expected) in enumerate(changes):
                path = _locate(folder, _file_name(item))
                if path is None:
                    continue
                current = self._read(path, item.tenant_id, item.worker_id)
                if current.version == expected and current.item_id == item.item_id:
                    plans.append((index, path, with_state_of(current, item, expected + 1)))
            _fsync_dirs(_move_many(folder, [(path, stored) for _, path, stored in plans]))
        for index, _, stored in plans:
            results[index] = stored
        return results

    def _read(self, path: Path, tenant_id: str, worker_id: str) -> InboxItem:
        item = check_owner(decode_item(path.read_bytes(), str(path)), tenant_id, worker_id, str(path))
        if _parse_name(path.name, item.state) != _Entry(micros(item.created_at), item.item_id, path.name, item.state):
            raise InboxCorruptError(str(path), f"the file name does not match item {item.item_id!r} and its created_at")
        return item


def _fresh(
    folder: Path, batch: builtins.list[_Request], journaled: _Journaled
) -> tuple[_Fresh, builtins.list[_Request]]:
    """The requests to journal now, with their file name and dedupe marker name, and those repeating an
    earlier request of the batch; a duplicate of a stored or journaled item is answered False."""
    fresh: _Fresh = []
    later: builtins.list[_Request] = []
    names: set[str] = set()
    markers: set[str] = set()
    for request in batch:
        item = request.value
        name = _file_name(item)
        marker = _dedupe_name(item.dedupe_key) if item.dedupe_key is not None else None
        if name in names or (marker is not None and marker in markers):
            later.append(request)
        elif _taken(folder, name, marker, journaled):
            request.future.set_result(False)
        else:
            names.add(name)
            if marker is not None:
                markers.add(marker)
            fresh.append((request, name, marker))
    return fresh, later


def _taken(folder: Path, name: str, marker: str | None, journaled: _Journaled) -> bool:
    """Whether the item or its dedupe key is stored or journaled. A stored item with a key always has its
    marker (made before its journal is dropped, removed only with the item), so a key needs no search."""
    if name in journaled.names:
        return True
    if marker is not None:
        return marker in journaled.markers or os.path.lexists(folder / _DEDUPE / marker)
    return _locate(folder, name) is not None


def _make_marker(marker: Path, item_id: str) -> None:
    """A symlink naming the item: one atomic create-if-absent call, durable with its folder's fsync."""
    with contextlib.suppress(FileExistsError):
        marker.symlink_to(item_id)


def _marker_owner(marker: Path) -> str | None:
    """The id of the item holding a dedupe key: a symlink's target, or an older marker file's content."""
    try:
        return str(marker.readlink())
    except FileNotFoundError:
        return None
    except OSError:  # not a symlink: a marker written before markers were symlinks
        with contextlib.suppress(FileNotFoundError, UnicodeDecodeError):
            return marker.read_text(encoding="utf-8").strip()
    return None


def _owner(folder: Path) -> tuple[str, str]:
    """(tenant_id, worker_id) of an inbox folder: tenants/{t}/workers/{w}/runtime/inbox."""
    return folder.parents[3].name, folder.parents[1].name


def _keep_corrupt_line(folder: Path, line: bytes, exc: InboxError) -> None:
    """A complete journal line that does not decode is never dropped silently: it goes to corrupt/."""
    target = folder / _CORRUPT / f"journal-{uuid.uuid4().hex}.jsonl"
    target.parent.mkdir(exist_ok=True)
    _durable_temps([(target, line + b"\n")])[0].replace(target)
    _fsync_dirs([target.parent])
    log.error("%s; the line is kept in %s, the inbox goes on without it", exc, target)


def _dedupe_name(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _entries(folder: Path, state: InboxState) -> Iterator[_Entry]:
    """Item files in `folder` by name (no reads); temp files, strays and symlinks are ignored."""
    try:
        with os.scandir(folder) as it:
            for dirent in it:
                if dirent.name.startswith(".") or not dirent.is_file(follow_symlinks=False):
                    continue
                entry = _parse_name(dirent.name, state)
                if entry is not None:
                    yield entry
    except FileNotFoundError:
        return


def _locate(folder: Path, name: str, states: Sequence[InboxState] = _STATES) -> Path | None:
    for state in states:
        path = folder / state / name
        if path.exists():
            return path
    return None


def _move(path: Path, folder: Path, item: InboxItem, *, rewrite: bool = True) -> set[Path]:
    """Rewrite `path` with `item` in place, then rename it into its state's folder; the folders to fsync."""
    if rewrite:
        _replace_file(path, encode_item(item, indent=2))
    target = folder / item.state / path.name
    if target == path:
        return {path.parent}
    target.parent.mkdir(exist_ok=True)
    path.rename(target)
    if item.state is InboxState.PENDING:
        _bump_generation(folder)
    return {path.parent, target.parent}


def _move_many(folder: Path, moves: Sequence[tuple[Path, InboxItem]]) -> set[Path]:
    """`_move` for several items: their new contents are written to temp files and fsynced in
    parallel (the filesystem merges the flushes), then each replaces its file and is renamed into its
    state's folder. Each file is always whole; the caller fsyncs the folders returned."""
    temps = _durable_temps([(path, encode_item(item, indent=2)) for path, item in moves])
    touched: set[Path] = set()
    for (path, item), tmp in zip(moves, temps, strict=True):
        tmp.replace(path)
        touched |= _move(path, folder, item, rewrite=False)
    return touched


def _read_generation(folder: Path) -> str:
    try:
        return (folder / _GENERATION).read_text(encoding="ascii")
    except FileNotFoundError:
        return ""


def _bump_generation(folder: Path) -> None:
    """A hint for other processes' pending views (never fsynced: a crash loses those views too)."""
    (folder / _GENERATION).write_text(uuid.uuid4().hex, encoding="ascii")


@contextlib.contextmanager
def _locked(folder: Path, *, exclusive: bool) -> Iterator[None]:
    """flock on the inbox's .lock file, shared with every process using the same workspace; an exclusive
    lock creates the folder when it is missing."""
    try:
        fd = os.open(folder / _LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    except FileNotFoundError:
        if not exclusive:
            raise
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / _LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _temp_file(path: Path, data: bytes) -> tuple[Path, Path]:
    """`data` in a new temp file next to `path` (not fsynced); the pair (temp file, path)."""
    path.parent.mkdir(exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as tmp_file:
            tmp_file.write(data)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp, path


def _durable_temps(files: Sequence[tuple[Path, bytes]]) -> builtins.list[Path]:
    """A temp file next to each path holding its data, all fsynced in parallel (the filesystem merges the
    flushes); on any failure none is left behind."""
    temps: builtins.list[Path] = []
    try:
        for path, data in files:
            temps.append(_temp_file(path, data)[0])
        _fsync_files(temps)
    except BaseException:
        for tmp in temps:
            tmp.unlink(missing_ok=True)
        raise
    return temps


def _write_new(files: Sequence[tuple[Path, bytes]]) -> None:
    """Write each file in place (created, or cut and rewritten) and fsync them all in parallel. Only for
    the items of a journal being settled: nobody reads them before the journal is gone, and a crash
    midway leaves the journal, whose next settle writes them again."""
    fds: builtins.list[int] = []
    try:
        for path, data in files:
            fds.append(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
            journal.write_all(fds[-1], data, 0)
        _fsync_fds(fds)
    finally:
        for fd in fds:
            os.close(fd)


def _fsync_files(paths: Sequence[Path]) -> None:
    fds: builtins.list[int] = []
    try:
        for path in paths:
            fds.append(os.open(path, os.O_RDONLY))
        _fsync_fds(fds)
    finally:
        for fd in fds:
            os.close(fd)


def _fsync_fds(fds: Sequence[int]) -> None:
    try:
        futures = [_FSYNC_POOL.submit(os.fsync, fd) for fd in fds]
    except RuntimeError:  # the interpreter is exiting and the pool takes no more work: fsync here
        futures = []
        for fd in fds:
            os.fsync(fd)
    for future in futures:
        future.result()


def _replace_file(path: Path, data: bytes) -> None:
    """Temp file in the same folder, fsync, rename over `path` (the caller fsyncs the folder)."""
    path.parent.mkdir(exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as tmp_file:
            tmp_file.write(data)
            tmp_file.flush()
            os.fsync(tmp_file.fileno())
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _fsync_dirs(folders: Iterable[Path]) -> None:
    for folder in folders:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
