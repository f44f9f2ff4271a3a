"""DerivedIndex: an SQLite file derived from files that stay the truth (the memory index over episode
files, the context-space index over space files). It is opened on first use and rebuilt from the
files when it is missing, corrupt or of another schema version, and once more when an operation
finds it corrupt mid-way. Every method is blocking (call it through `asyncio.to_thread`).

A subclass gives its `SCHEMA` (SQL run on every open, with a ``meta`` table), `SCHEMA_VERSION`,
what its files are called in the logs (`SOURCE`), and `_fill`, which inserts every file's rows.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

__all__ = ["DerivedIndex", "Progress"]

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]  # (done, total)


class DerivedIndex:
    SCHEMA: ClassVar[str]
    SCHEMA_VERSION: ClassVar[int]
    SOURCE: ClassVar[str] = "files"

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self.rebuilds = 0

    def _fill(self, conn: sqlite3.Connection, progress: Progress | None) -> int:
        """Insert every file's rows (inside the rebuild's transaction); how many files."""
        raise NotImplementedError

    # -- lifecycle ---------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        if self._conn is not None:
            return self._conn
        fresh = not self.path.exists()
        try:
            conn = self._open()
            version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if version is None or int(version[0]) != self.SCHEMA_VERSION:
                conn.close()
                raise sqlite3.DatabaseError(f"schema {version and version[0]}, not {self.SCHEMA_VERSION}")
        except sqlite3.DatabaseError as exc:
            if not fresh:
                log.warning("index %s is unusable (%s): rebuilding from the %s", self.path, exc, self.SOURCE)
            self._discard()
            conn = self._open()
            fresh = True
        self._conn = conn
        if fresh:  # a deleted index comes back from the files
            self._rebuild_locked()
        return conn

    def _open(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=10.0)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.executescript(self.SCHEMA)
        conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(self.SCHEMA_VERSION),))
        return conn

    def _discard(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def rebuild(self, progress: Progress | None = None) -> int:
        """Drop the index and index every file again; the number indexed."""
        with self._lock:
            self._discard()
            self._conn = self._open()
            return self._rebuild_locked(progress)

    def _rebuild_locked(self, progress: Progress | None = None) -> int:
        assert self._conn is not None
        self.rebuilds += 1
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            total = self._fill(conn, progress)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return total

    # -- operations --------------------------------------------------------------------------

    def _guard(self, op: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run `op`; an index found corrupt mid-way is rebuilt once and `op` retried."""
        with self._lock:
            try:
                return op(self._connect())
            except sqlite3.DatabaseError as exc:
                if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
                    raise
                log.warning("index %s failed (%s): rebuilding from the %s", self.path, exc, self.SOURCE)
                self._discard()
                return op(self._connect())

    def _write(self, op: Callable[[sqlite3.Connection], None]) -> None:
        """`op` in one write transaction (guarded)."""

        def transaction(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")
            try:
                op(conn)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

        self._guard(transaction)
