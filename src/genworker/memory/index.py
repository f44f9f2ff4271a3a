"""MemoryIndex: the embedded SQLite FTS5 (BM25) index over episodes and session messages.

Derived and disposable: it lives in the owner's `runtime/memory_index.sqlite3` and is rebuilt from
the episode files whenever it is missing, corrupt, of another schema version, or asked to
(`genworker memory reindex`). CJK text is indexed one character per token so Chinese recall works
without a segmenter. Optional vectors (the `embeddings` extra) sit in a side table for hybrid ranking.
"""

from __future__ import annotations

import re
import sqlite3
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from genworker.memory.derived import DerivedIndex, Progress
from genworker.memory.models import Episode, MemoryHit, Scope

__all__ = ["INDEX_SCHEMA_VERSION", "IndexedMessage", "MemoryIndex", "SearchFilters", "fts_query", "fts_text"]

INDEX_SCHEMA_VERSION = 1
_CJK = re.compile(r"([\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af])")
_WORD = re.compile(r"\w+", re.UNICODE)
_MAX_QUERY_TERMS = 32

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS docs (
    rowid INTEGER PRIMARY KEY,
    doc_id TEXT NOT NULL UNIQUE,
    doc_type TEXT NOT NULL,
    scope TEXT NOT NULL,
    kind TEXT NOT NULL,
    title TEXT NOT NULL,
    body TEXT NOT NULL,
    goal_id TEXT, duty_id TEXT, thread_id TEXT, channel TEXT, run_id TEXT,
    created_at REAL NOT NULL,
    weight REAL NOT NULL,
    anchor REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS docs_scope ON docs (doc_type, scope, created_at);
CREATE VIRTUAL TABLE IF NOT EXISTS docs_fts USING fts5 (title, body, tokenize = 'unicode61 remove_diacritics 2');
CREATE TABLE IF NOT EXISTS vectors (rowid INTEGER PRIMARY KEY, vec BLOB NOT NULL);
"""


def fts_text(text: str) -> str:
    """Text as the index stores it: CJK characters split into single-character tokens."""
    return _CJK.sub(r" \1 ", text)


def fts_query(text: str) -> str | None:
    """An FTS5 MATCH expression: the query's distinct terms OR-ed, each quoted (no operator injection)."""
    terms = list(dict.fromkeys(t.lower() for t in _WORD.findall(fts_text(text))))[:_MAX_QUERY_TERMS]
    return " OR ".join(f'"{t}"' for t in terms) if terms else None


@dataclass(frozen=True, slots=True)
class SearchFilters:
    scopes: tuple[Scope, ...]
    goal_id: str | None = None
    duty_id: str | None = None
    kinds: tuple[str, ...] = ()
    since: datetime | None = None
    until: datetime | None = None
    doc_type: str = "episode"
    exclude_thread: str | None = None
    any_scope: bool = False  # session search across the owner's threads (never across owners)
    exclude_runs: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class IndexedMessage:
    """One session message, indexed for session search (cross-channel recall)."""

    message_id: str
    thread_id: str
    channel: str
    role: str
    text: str
    created_at: datetime
    run_id: str | None = None


class MemoryIndex(DerivedIndex):
    """One SQLite file; every method is blocking (call it through `asyncio.to_thread`)."""

    SCHEMA = _SCHEMA
    SCHEMA_VERSION = INDEX_SCHEMA_VERSION
    SOURCE = "episode files"

    def __init__(
        self,
        path: Path,
        source: Callable[[], Iterable[Episode]],
        *,
        half_life_days: float = 30.0,
        embed: Callable[[Sequence[str]], list[list[float]]] | None = None,
    ) -> None:
        super().__init__(path)
        self._source = source
        self.half_life_days = half_life_days
        self.embed = embed

    def _fill(self, conn: sqlite3.Connection, progress: Progress | None) -> int:
        episodes = list(self._source())
        total = len(episodes)
        for start in range(0, total, 500):
            batch = episodes[start : start + 500]
            self._insert_episodes(conn, batch)
            if progress is not None:
                progress(start + len(batch), total)
        if progress is not None and total == 0:
            progress(0, 0)
        return total

    # -- writes ------------------------------------------------------------------------------

    def add(self, episodes: Sequence[Episode]) -> None:
        self._write(lambda conn: self._insert_episodes(conn, episodes))

    def _insert_episodes(self, conn: sqlite3.Connection, episodes: Sequence[Episode]) -> None:
        vectors = self.embed([f"{e.title}\n{e.body}" for e in episodes]) if self.embed and episodes else None
        for position, e in enumerate(episodes):
            self._delete_doc(conn, e.episode_id)
            p = e.provenance
            anchor = (e.reinforced_at or e.created_at).timestamp()
            cur = conn.execute(
                "INSERT INTO docs (doc_id, doc_type, scope, kind, title, body, goal_id, duty_id, thread_id, channel,"
                " run_id, created_at, weight, anchor) VALUES (?, 'episode', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    e.episode_id, e.scope, e.kind, e.title, e.body, p.goal_id, p.duty_id, p.thread_id, p.channel,
                    p.run_id, e.created_at.timestamp(), e.weight, anchor,
                ),
            )  # fmt: skip
            rowid = cur.lastrowid
            conn.execute(
                "INSERT INTO docs_fts (rowid, title, body) VALUES (?, ?, ?)",
                (rowid, fts_text(e.title), fts_text(e.body)),
            )
            if vectors is not None:
                conn.execute("INSERT INTO vectors VALUES (?, ?)", (rowid, array("f", vectors[position]).tobytes()))

    @staticmethod
    def _delete_doc(conn: sqlite3.Connection, doc_id: str) -> bool:
        row = conn.execute("SELECT rowid FROM docs WHERE doc_id = ?", (doc_id,)).fetchone()
        if row is None:
            return False
        conn.execute("DELETE FROM docs_fts WHERE rowid = ?", row)
        conn.execute("DELETE FROM vectors WHERE rowid = ?", row)
        conn.execute("DELETE FROM docs WHERE rowid = ?", row)
        return True

    def remove(self, doc_ids: Sequence[str]) -> None:
        def op(conn: sqlite3.Connection) -> None:
            for doc_id in doc_ids:
                self._delete_doc(conn, doc_id)

        self._write(op)

    def add_messages(self, messages: Sequence[IndexedMessage]) -> None:
        def op(conn: sqlite3.Connection) -> None:
            for m in messages:
                doc_id = f"msg:{m.message_id}"
                self._delete_doc(conn, doc_id)
                cur = conn.execute(
                    "INSERT INTO docs (doc_id, doc_type, scope, kind, title, body, thread_id, channel, run_id,"
                    " created_at, weight, anchor) VALUES (?, 'message', ?, ?, '', ?, ?, ?, ?, ?, 1.0, ?)",
                    (doc_id, f"conversation:{m.thread_id}", m.role, m.text, m.thread_id, m.channel, m.run_id,
                     m.created_at.timestamp(), m.created_at.timestamp()),
                )  # fmt: skip
                conn.execute(
                    "INSERT INTO docs_fts (rowid, title, body) VALUES (?, '', ?)", (cur.lastrowid, fts_text(m.text))
                )

        self._write(op)

    def set_weight(self, episode_id: str, weight: float, anchor: datetime) -> None:
        self._guard(
            lambda conn: conn.execute(
                "UPDATE docs SET weight = ?, anchor = ? WHERE doc_id = ?", (weight, anchor.timestamp(), episode_id)
            )
        )

    # -- reads -------------------------------------------------------------------------------

    def count(self, doc_type: str = "episode") -> int:
        row = self._guard(lambda c: c.execute("SELECT COUNT(*) FROM docs WHERE doc_type = ?", (doc_type,)).fetchone())
        return int(row[0])

    def size_hint(self) -> int:
        """At least the number of documents held (episodes and messages): the highest rowid, one
        B-tree lookup where COUNT(*) reads every row."""
        row = self._guard(lambda c: c.execute("SELECT max(rowid) FROM docs").fetchone())
        return int(row[0] or 0)

    def ids(self) -> set[str]:
        rows = self._guard(lambda c: c.execute("SELECT doc_id FROM docs WHERE doc_type = 'episode'").fetchall())
        return {r[0] for r in rows}

    def search(
        self,
        text: str,
        filters: SearchFilters,
        limit: int = 10,
        *,
        now: datetime | None = None,
        query_vector: Sequence[float] | None = None,
    ) -> list[MemoryHit]:
        """Best hits first: BM25 relevance times the decayed weight; with a query vector, fused
        (reciprocal rank) with cosine similarity over the same filtered rows."""
        match = fts_query(text)
        if (match is None and query_vector is None) or not (filters.scopes or filters.any_scope) or limit <= 0:
            return []
        where, params = _where(filters)
        now_ts = (now or datetime.now(UTC)).timestamp()

        def op(conn: sqlite3.Connection) -> list[MemoryHit]:
            rows: list[tuple[Any, ...]] = []
            if match is not None:
                rows = conn.execute(
                    f"SELECT {_COLUMNS}, bm25(docs_fts, 2.0, 1.0) FROM docs_fts JOIN docs d ON d.rowid = docs_fts.rowid"
                    f" WHERE docs_fts MATCH ? AND {where} ORDER BY bm25(docs_fts, 2.0, 1.0) LIMIT ?",
                    (match, *params, max(limit * 5, 50)),
                ).fetchall()
            lexical = [(r, -float(r[-1]) * self._decay(r, now_ts)) for r in rows]
            lexical.sort(key=lambda pair: pair[1], reverse=True)
            if query_vector is None:
                return [_hit(r, score) for r, score in lexical[:limit]]
            return self._hybrid(conn, lexical, query_vector, where, params, limit, now_ts)

        result: list[MemoryHit] = self._guard(op)
        return result

    def _decay(self, row: tuple[Any, ...], now_ts: float) -> float:
        weight, anchor = float(row[_WEIGHT]), float(row[_ANCHOR])
        age_days = max(now_ts - anchor, 0.0) / 86_400
        factor: float = weight * 0.5 ** (age_days / self.half_life_days) if self.half_life_days > 0 else weight
        return max(factor, 0.05)  # an old, strongly matching episode can still be found

    def _hybrid(
        self,
        conn: sqlite3.Connection,
        lexical: list[tuple[tuple[Any, ...], float]],
        query_vector: Sequence[float],
        where: str,
        params: Sequence[Any],
        limit: int,
        now_ts: float,
    ) -> list[MemoryHit]:
        q = array("f", query_vector)
        qnorm = sum(x * x for x in q) ** 0.5 or 1.0
        rows = conn.execute(
            f"SELECT {_COLUMNS}, v.vec FROM vectors v JOIN docs d ON d.rowid = v.rowid WHERE {where}", params
        ).fetchall()
        semantic: list[tuple[tuple[Any, ...], float]] = []
        for row in rows:
            vec = array("f")
            vec.frombytes(row[-1])
            norm = sum(x * x for x in vec) ** 0.5 or 1.0
            cosine = sum(a * b for a, b in zip(q, vec, strict=False)) / (qnorm * norm)
            semantic.append((row[:-1], cosine * self._decay(row, now_ts)))
        semantic.sort(key=lambda pair: pair[1], reverse=True)
        fused: dict[str, float] = {}
        by_id: dict[str, tuple[Any, ...]] = {}
        for ranking in (lexical, semantic[: max(limit * 5, 50)]):
            for rank, (row, _score) in enumerate(ranking):
                fused[row[0]] = fused.get(row[0], 0.0) + 1.0 / (60 + rank)
                by_id[row[0]] = row
        best = sorted(fused.items(), key=lambda pair: pair[1], reverse=True)[:limit]
        return [_hit(by_id[doc_id], score) for doc_id, score in best]


_COLUMNS = (
    "d.doc_id, d.scope, d.kind, d.title, d.body, d.created_at,"
    " d.goal_id, d.duty_id, d.thread_id, d.channel, d.run_id, d.weight, d.anchor"
)
_WEIGHT, _ANCHOR = 11, 12


def _where(f: SearchFilters) -> tuple[str, list[Any]]:
    clauses = ["d.doc_type = ?"]
    params: list[Any] = [f.doc_type]
    if not f.any_scope:
        clauses.append(f"d.scope IN ({', '.join('?' * len(f.scopes))})")
        params.extend(str(s) for s in f.scopes)
    for column, value in (("goal_id", f.goal_id), ("duty_id", f.duty_id)):
        if value is not None:
            clauses.append(f"d.{column} = ?")
            params.append(value)
    if f.kinds:
        clauses.append(f"d.kind IN ({', '.join('?' * len(f.kinds))})")
        params.extend(f.kinds)
    if f.since is not None:
        clauses.append("d.created_at >= ?")
        params.append(f.since.timestamp())
    if f.until is not None:
        clauses.append("d.created_at < ?")
        params.append(f.until.timestamp())
    if f.exclude_thread is not None:
        clauses.append("(d.thread_id IS NULL OR d.thread_id != ?)")
        params.append(f.exclude_thread)
    if f.exclude_runs:
        clauses.append(f"(d.run_id IS NULL OR d.run_id NOT IN ({', '.join('?' * len(f.exclude_runs))}))")
        params.extend(f.exclude_runs)
    return " AND ".join(clauses), params


def _hit(row: tuple[Any, ...], score: float) -> MemoryHit:
    metadata = {
        k: v
        for k, v in zip(("goal_id", "duty_id", "thread_id", "channel", "run_id"), row[6:11], strict=True)
        if v is not None
    }
    return MemoryHit(
        episode_id=row[0],
        scope=Scope.parse(row[1]),
        kind=row[2],
        title=row[3],
        text=row[4],
        score=score,
        created_at=datetime.fromtimestamp(row[5], UTC),
        metadata=metadata,
    )
