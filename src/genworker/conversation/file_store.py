"""Sessions as files: ``{workspace}/tenants/{tenant_id}/sessions/{session_id}.json``, a long
thread's oldest messages in ``sessions/archive/{session_id}/{start}.json`` (one file per chunk).

Writes are atomic (temp file in the same folder, rename) and durable through `files`
(write_journal.py); the compare-and-set runs under an exclusive ``flock`` on
``sessions/.locks/NN.lock`` (striped by session id), so several runtime processes can share one
workspace. A turn's `get` and `save` run through `files.run` (on the event loop when writes are
journaled, no fsync there), except the save of a long session; every other blocking call runs in a
worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from genworker.conversation.codec import decode_chunk, decode_session, encode_chunk, encode_session
from genworker.conversation.errors import ConcurrentUpdateError, SessionError
from genworker.conversation.models import (
    ArchiveChunk,
    ChatMessage,
    ConversationSession,
    SessionSummary,
    summary_of,
    utc_now,
)
from genworker.conversation.store import (
    INLINE_SAVE_MESSAGES,
    DecodedSessions,
    check_owner,
    is_expired,
    join_chunks,
    newest_first,
)
from genworker.fsutil import striped_lock
from genworker.ids import PlainFolders, safe_join, validate_id
from genworker.write_journal import DIRECT, DurableFiles

__all__ = ["FileSessionStore"]

log = logging.getLogger(__name__)


class FileSessionStore:
    def __init__(
        self, workspace_root: Path, *, clock: Callable[[], datetime] = utc_now, files: DurableFiles = DIRECT
    ) -> None:
        self._root = Path(workspace_root)
        self._clock = clock
        self._files = files  # how writes are made durable (write_journal.py)
        self._folders = PlainFolders()  # sessions/ folders checked once (ids.py)
        self._decoded = DecodedSessions()

    def path_of(self, tenant_id: str, session_id: str) -> Path:
        """The session's file (blocking: checks for symlinks); the ids are validated and the path must
        stay inside the workspace."""
        return self._folders.file(self._root, self._dir(tenant_id), f"{validate_id(session_id, 'session id')}.json")

    # A turn's read and write go through `files.run`: on the event loop when writes are journaled
    # (no fsync there), in a worker thread otherwise.
    async def get(self, tenant_id: str, session_id: str) -> ConversationSession | None:
        return await self._files.run(lambda: self._get(tenant_id, session_id))

    async def save(self, session: ConversationSession, expected_version: int) -> ConversationSession:
        if len(session.messages) <= INLINE_SAVE_MESSAGES:
            return await self._files.run(lambda: self._save(session, expected_version))
        return await asyncio.to_thread(self._save_durably, session, expected_version)

    async def list(self, tenant_id: str, worker_id: str | None = None) -> tuple[SessionSummary, ...]:
        return await asyncio.to_thread(self._list, tenant_id, worker_id)

    async def archive(self, chunk: ArchiveChunk, ttl_s: int | None = None) -> None:
        """Expiry is the session's: `purge_expired` removes the archive with the session file."""
        await asyncio.to_thread(self._archive, chunk)

    async def archived(self, session: ConversationSession) -> tuple[ChatMessage, ...]:
        if not session.archived:
            return ()
        return await asyncio.to_thread(self._archived, session)

    async def delete(self, tenant_id: str, session_id: str) -> bool:
        return await asyncio.to_thread(self._delete, tenant_id, session_id)

    async def purge_expired(self, tenant_id: str) -> int:
        """Remove the files of expired sessions (they already read as absent); returns how many."""
        return await asyncio.to_thread(self._purge, tenant_id)

    # -- blocking parts ---------------------------------------------------------------

    def _dir(self, tenant_id: str) -> Path:
        return safe_join(self._root, "tenants", validate_id(tenant_id, "tenant id"), "sessions")

    def _load(self, path: Path, tenant_id: str, session_id: str) -> ConversationSession | None:
        """The stored session even when expired; None when there is no file."""
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        session = self._decoded.get(path, raw)
        if session is None:
            session = decode_session(raw, str(path))
            self._decoded.put(path, raw, session)
        return check_owner(session, tenant_id, session_id, str(path))

    def _read(self, path: Path, tenant_id: str, session_id: str) -> ConversationSession | None:
        session = self._load(path, tenant_id, session_id)
        return None if session is None or is_expired(session, self._clock()) else session

    def _get(self, tenant_id: str, session_id: str) -> ConversationSession | None:
        return self._read(self.path_of(tenant_id, session_id), tenant_id, session_id)

    def _save(self, session: ConversationSession, expected_version: int) -> ConversationSession:
        path = self.path_of(session.tenant_id, session.session_id)
        with _locked(path):
            current = self._read(path, session.tenant_id, session.session_id)
            actual = current.version if current is not None else 0
            if actual != expected_version:
                raise ConcurrentUpdateError(session.session_id, expected_version, actual)
            stored = replace(session, version=expected_version + 1)
            data = encode_session(stored, indent=2)
            self._files.write_atomic(path, data)
            self._decoded.put(path, data, stored)  # what decoding `data` gives (the codec round-trips)
        return stored

    def _save_durably(self, session: ConversationSession, expected_version: int) -> ConversationSession:
        with self._files.together():  # in a turn's block, its writes join the block's one wait
            return self._save(session, expected_version)

    def _archive_dir(self, tenant_id: str, session_id: str) -> Path:
        return safe_join(self._dir(tenant_id), "archive", validate_id(session_id, "session id"))

    def _archive(self, chunk: ArchiveChunk) -> None:
        folder = self._archive_dir(chunk.tenant_id, chunk.session_id)
        path = self._folders.file(self._root, folder, f"{chunk.start:010d}.json")
        with self._files.together():  # in a turn's block, its writes join the block's one wait
            self._files.write_atomic(path, encode_chunk(chunk))

    def _archived(self, session: ConversationSession) -> tuple[ChatMessage, ...]:
        folder = self._archive_dir(session.tenant_id, session.session_id)
        chunks = [decode_chunk(path.read_bytes(), str(path)) for path in _chunk_files(folder)]
        return join_chunks(chunks, session.archived, str(folder))

    def _delete(self, tenant_id: str, session_id: str) -> bool:
        path = self.path_of(tenant_id, session_id)
        with _locked(path):
            self._decoded.forget(path)
            self._remove_archive(tenant_id, session_id)
            return self._files.remove(path)

    def _remove_archive(self, tenant_id: str, session_id: str) -> None:
        folder = self._archive_dir(tenant_id, session_id)
        for path in _chunk_files(folder):
            self._files.remove(path)
        with contextlib.suppress(OSError):  # absent, or a stray file left in it
            folder.rmdir()

    def _list(self, tenant_id: str, worker_id: str | None) -> tuple[SessionSummary, ...]:
        folder = self._dir(tenant_id)
        prefix = f"{validate_id(worker_id, 'worker id')}." if worker_id is not None else ""
        now = self._clock()
        found = []
        for path in _session_files(folder, prefix):
            try:
                session = self._load(path, tenant_id, path.name.removesuffix(".json"))
            except SessionError as exc:
                log.error("skipping unreadable session file: %s", exc)
                continue
            if session is None or is_expired(session, now):
                continue
            if worker_id is None or session.worker_id == worker_id:
                found.append(summary_of(session))
        return newest_first(found)

    def _purge(self, tenant_id: str) -> int:
        removed = 0
        for path in _session_files(self._dir(tenant_id), ""):
            with _locked(path):
                try:
                    session = self._load(path, tenant_id, path.name.removesuffix(".json"))
                except SessionError:
                    continue  # left for a human to look at
                if session is not None and is_expired(session, self._clock()):
                    self._decoded.forget(path)
                    self._remove_archive(tenant_id, session.session_id)
                    removed += self._files.remove(path)
        return removed


def _session_files(folder: Path, prefix: str) -> list[Path]:
    """Regular session files; symlinks are never followed out of the folder."""
    try:
        paths = sorted(folder.iterdir())
    except FileNotFoundError:
        return []
    return [
        p
        for p in paths
        if p.name.endswith(".json") and p.name.startswith(prefix) and not p.name.startswith(".")
        if p.is_file() and not p.is_symlink()
    ]


def _chunk_files(folder: Path) -> list[Path]:
    """An archive's chunk files, by start (their names sort by it); none when there is no archive."""
    try:
        paths = sorted(folder.iterdir())
    except FileNotFoundError:
        return []
    return [p for p in paths if p.suffix == ".json" and p.name[0].isdigit() and p.is_file() and not p.is_symlink()]


def _locked(path: Path) -> AbstractContextManager[None]:
    """An exclusive flock shared with every process using the same workspace (a striped lock file)."""
    return striped_lock(path.parent, path.stem)
