"""SpaceIndex: one worker's SQLite index over its space files — an FTS5 table over each space's
title, entities and keywords, the strong anchors, which space holds which event, and a row per
space with what retrieval, ranking, the lifecycle sweep and listings need (no file is opened).

With an `embed` function (the `embeddings` extra, `router.embeddings: true`) each space also has a
vector of its title and latest facts, for semantic similarity in ranking and resurrection.

Derived and disposable, like the memory index: ``runtime/spaces/index.sqlite3`` is rebuilt from the
space files when it is missing, corrupt or of another schema version. Every method is blocking.
"""

from __future__ import annotations

import json
import math
import sqlite3
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from genworker.autonomy.spaces.models import ContextSpace, SpaceState
from genworker.autonomy.spaces.similarity import keywords
from genworker.memory.derived import DerivedIndex, Progress
from genworker.memory.index import fts_query, fts_text

__all__ = [
    "INDEX_FILE",
    "INDEX_SCHEMA_VERSION",
    "Embed",
    "IndexedSpace",
    "SpaceIndex",
    "card_of",
    "cosine",
    "vector_text",
]

INDEX_FILE: Final = "index.sqlite3"
INDEX_SCHEMA_VERSION: Final = 2
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS spaces (
    rowid INTEGER PRIMARY KEY,
    space_id TEXT NOT NULL UNIQUE,
    state TEXT NOT NULL,
    review TEXT NOT NULL,
    pinned INTEGER NOT NULL,
    last_active REAL NOT NULL,
    due REAL,
    entities TEXT NOT NULL,
    keywords TEXT NOT NULL,
    times TEXT NOT NULL,
    card TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS spaces_state ON spaces (state, last_active);
CREATE INDEX IF NOT EXISTS spaces_review ON spaces (review, state);
CREATE INDEX IF NOT EXISTS spaces_pinned ON spaces (pinned, last_active);
CREATE VIRTUAL TABLE IF NOT EXISTS spaces_fts USING fts5 (
    title, entities, words, tokenize = 'unicode61 remove_diacritics 2'
);
CREATE TABLE IF NOT EXISTS anchors (anchor TEXT NOT NULL, space_id TEXT NOT NULL, PRIMARY KEY (anchor, space_id));
CREATE TABLE IF NOT EXISTS events (event_id TEXT PRIMARY KEY, space_id TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS vectors (space_id TEXT PRIMARY KEY, vec BLOB NOT NULL);
"""
_LIVE = "review != 'merged'"
_SEARCH_DEPTH = 8  # matches ranked per wanted one, before their state is looked at
_TIMES = 64  # the latest facts' times kept for the time window
_VECTOR_FACTS = 5  # a space's vector: its title and its latest facts
_EMBED_BATCH = 64

Embed = Callable[[Sequence[str]], list[list[float]]]


@dataclass(frozen=True, slots=True)
class IndexedSpace:
    """What ranking needs of a space, from its index row."""

    space_id: str
    state: SpaceState
    pinned: bool
    last_active: datetime
    due: datetime | None
    entities: tuple[str, ...]
    keywords: tuple[str, ...]
    title: str
    times: tuple[float, ...] = ()  # when its latest facts happened, and the meetings they start at (epoch s)
    vector: tuple[float, ...] | None = None  # normalised; with embeddings only


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Of two normalised vectors (the embedder's): their dot product, 0 for different sizes."""
    if len(a) != len(b):
        return 0.0
    return math.fsum(x * y for x, y in zip(a, b, strict=True))


def vector_text(space: ContextSpace) -> str:
    return "\n".join([space.title, *(e.summary for e in space.evidence[-_VECTOR_FACTS:])])


def card_of(space: ContextSpace) -> dict[str, Any]:
    """The space in a line of a listing (API, CLI, dashboard), kept in its index row."""
    return {
        "space_id": space.space_id,
        "title": space.title,
        "state": space.state.value,
        "review": space.review,
        "is_pinned": space.is_pinned,
        "pin_reason": space.pin_reason,
        "focus_type": space.focus_type,
        "focus_ref": space.focus_ref,
        "due_at": space.due_at.isoformat() if space.due_at else None,
        "space_score": round(space.space_score, 3),
        "evidence_count": len(space.evidence),
        "sources": sorted({e.source for e in space.evidence}),
        "created_at": space.created_at.isoformat(),
        "last_active_at": space.last_active_at.isoformat(),
        "merged_into": space.merged_into,
        "suggested_space": space.suggested_space,
        "route_confidence": space.route_confidence,
        "route_reason": space.route_reason[:300],
        "tasks": [{"task_id": c.task_id, "priority": c.priority, "run_id": c.run_id} for c in space.candidates],
    }


class SpaceIndex(DerivedIndex):
    SCHEMA = _SCHEMA
    SCHEMA_VERSION = INDEX_SCHEMA_VERSION
    SOURCE = "space files"

    def __init__(self, path: Path, source: Callable[[], Iterable[ContextSpace]], *, embed: Embed | None = None) -> None:
        super().__init__(path)
        self._source = source
        self.embed = embed

    def _fill(self, conn: sqlite3.Connection, progress: Progress | None) -> int:
        count, batch = 0, []
        for space in self._source():
            batch.append(space)
            if len(batch) == _EMBED_BATCH:
                count += self._put_all(conn, batch)
                batch = []
        return count + self._put_all(conn, batch)

    def _put_all(self, conn: sqlite3.Connection, spaces: Sequence[ContextSpace]) -> int:
        vectors = self._vectors(spaces)
        for n, space in enumerate(spaces):
            self._put(conn, space)
            if vectors is not None:
                conn.execute("INSERT OR REPLACE INTO vectors VALUES (?, ?)", (space.space_id, vectors[n]))
        return len(spaces)

    def _vectors(self, spaces: Sequence[ContextSpace]) -> list[bytes] | None:
        if self.embed is None or not spaces:
            return None
        return [array("f", v).tobytes() for v in self.embed([vector_text(s) for s in spaces])]

    def query_vector(self, text: str) -> tuple[float, ...] | None:
        """The embedding of a fact's text, None without embeddings."""
        return tuple(self.embed([text])[0]) if self.embed is not None and text.strip() else None

    # -- writes ------------------------------------------------------------------------------

    def put(self, spaces: Sequence[ContextSpace]) -> None:
        vectors = self._vectors(spaces)  # before the write transaction: the model takes milliseconds

        def op(conn: sqlite3.Connection) -> None:
            for n, space in enumerate(spaces):
                self._put(conn, space)
                if vectors is not None:
                    conn.execute("INSERT OR REPLACE INTO vectors VALUES (?, ?)", (space.space_id, vectors[n]))

        self._write(op)

    @staticmethod
    def _put(conn: sqlite3.Connection, space: ContextSpace) -> None:
        words = keywords([space.title, *(e.summary for e in space.evidence)])
        times = sorted({t.timestamp() for e in space.evidence for t in (e.at, e.starts_at) if t is not None})
        row = conn.execute("SELECT rowid FROM spaces WHERE space_id = ?", (space.space_id,)).fetchone()
        values = (
            space.state.value, space.review, int(space.is_pinned), space.last_active_at.timestamp(),
            space.due_at.timestamp() if space.due_at else None, json.dumps(space.entity_set), json.dumps(words),
            json.dumps(times[-_TIMES:]), json.dumps(card_of(space), ensure_ascii=False),
        )  # fmt: skip
        if row is None:
            cur = conn.execute(
                "INSERT INTO spaces (state, review, pinned, last_active, due, entities, keywords, times, card,"
                " space_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (*values, space.space_id),
            )
            rowid = cur.lastrowid
        else:
            rowid = row[0]
            conn.execute(
                "UPDATE spaces SET state = ?, review = ?, pinned = ?, last_active = ?, due = ?, entities = ?,"
                " keywords = ?, times = ?, card = ? WHERE rowid = ?",
                (*values, rowid),
            )
            conn.execute("DELETE FROM spaces_fts WHERE rowid = ?", (rowid,))
        conn.execute(
            "INSERT INTO spaces_fts (rowid, title, entities, words) VALUES (?, ?, ?, ?)",
            (rowid, fts_text(space.title), fts_text(" ".join(space.entity_set)), fts_text(" ".join(words))),
        )
        conn.execute("DELETE FROM anchors WHERE space_id = ?", (space.space_id,))
        if space.review != "merged":
            anchors = [(a, space.space_id) for a in space.anchors]
            conn.executemany("INSERT OR IGNORE INTO anchors VALUES (?, ?)", anchors)
        conn.executemany(
            "INSERT OR REPLACE INTO events VALUES (?, ?)", [(e.event_id, space.space_id) for e in space.evidence]
        )

    # -- reads -------------------------------------------------------------------------------

    def space_of_event(self, event_id: str) -> str | None:
        row = self._guard(lambda c: c.execute("SELECT space_id FROM events WHERE event_id = ?", (event_id,)).fetchone())
        return row[0] if row else None

    def by_anchors(self, anchors: Sequence[str]) -> list[str]:
        """Spaces holding any of the anchors, the most recently active first."""
        if not anchors:
            return []
        marks = ", ".join("?" * len(anchors))
        sql = (
            f"SELECT DISTINCT s.space_id FROM anchors a JOIN spaces s ON s.space_id = a.space_id"
            f" WHERE a.anchor IN ({marks}) AND s.{_LIVE} ORDER BY s.last_active DESC"
        )
        return [r[0] for r in self._guard(lambda c: c.execute(sql, tuple(anchors)).fetchall())]

    def pinned(self, limit: int) -> list[str]:
        sql = f"SELECT space_id FROM spaces WHERE pinned = 1 AND {_LIVE} ORDER BY last_active DESC LIMIT ?"
        return [r[0] for r in self._guard(lambda c: c.execute(sql, (limit,)).fetchall())]

    def recent(self, since: datetime, limit: int) -> list[str]:
        sql = (
            f"SELECT space_id FROM spaces WHERE {_LIVE} AND state = 'active' AND last_active >= ?"
            " ORDER BY last_active DESC LIMIT ?"
        )
        return [r[0] for r in self._guard(lambda c: c.execute(sql, (since.timestamp(), limit)).fetchall())]

    def search(self, text: str, states: Iterable[SpaceState], limit: int) -> list[str]:
        """Best FTS matches (BM25: title, entities, keywords) among spaces in `states`."""
        match = fts_query(text)
        wanted = [s.value for s in states]
        if match is None or not wanted or limit <= 0:
            return []
        # the best matches first, then their state: a join before the ranking would read every match's row
        sql = (
            "SELECT s.space_id FROM (SELECT rowid, bm25(spaces_fts, 2.0, 2.0, 1.0) AS rank FROM spaces_fts"
            " WHERE spaces_fts MATCH ? ORDER BY rank LIMIT ?) f JOIN spaces s ON s.rowid = f.rowid"
            f" WHERE s.{_LIVE} AND s.state IN ({', '.join('?' * len(wanted))}) ORDER BY f.rank LIMIT ?"
        )
        params = (match, limit * _SEARCH_DEPTH, *wanted, limit)
        return [r[0] for r in self._guard(lambda c: c.execute(sql, params).fetchall())]

    def profiles(self, space_ids: Sequence[str]) -> list[IndexedSpace]:
        if not space_ids:
            return []
        sql = (
            "SELECT s.space_id, state, pinned, last_active, due, entities, keywords, card, times, v.vec"
            " FROM spaces s LEFT JOIN vectors v ON v.space_id = s.space_id"
            f" WHERE s.space_id IN ({', '.join('?' * len(space_ids))})"
        )
        rows = {r[0]: r for r in self._guard(lambda c: c.execute(sql, tuple(space_ids)).fetchall())}
        return [_profile(rows[i]) for i in space_ids if i in rows]

    def cards(
        self, *, state: SpaceState | None = None, review: str | None = None, limit: int = 100, offset: int = 0
    ) -> list[dict[str, Any]]:
        clauses, params = [], []
        for column, value in (("state", state.value if state else None), ("review", review)):
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        sql = f"SELECT card FROM spaces {where} ORDER BY last_active DESC, space_id LIMIT ? OFFSET ?"
        rows = self._guard(lambda c: c.execute(sql, (*params, limit, offset)).fetchall())
        return [json.loads(r[0]) for r in rows]

    def counts(self) -> dict[str, int]:
        """Spaces by state (merged ones apart, under "merged")."""

        def op(conn: sqlite3.Connection) -> tuple[dict[str, int], dict[str, int]]:
            every = dict(conn.execute("SELECT state, COUNT(*) FROM spaces GROUP BY state").fetchall())
            merged = "SELECT state, COUNT(*) FROM spaces WHERE review = 'merged' GROUP BY state"
            return every, dict(conn.execute(merged).fetchall())

        every, merged = self._guard(op)
        counts = {s.value: int(every.get(s.value, 0)) - int(merged.get(s.value, 0)) for s in SpaceState}
        return counts | {"merged": sum(merged.values())}

    def stale(self, now: datetime, dormant_s: float, parked_s: float, archive_s: float, pin_until: float) -> list[str]:
        """Spaces whose lifecycle state or pin is due to change: unpinned ones past a threshold of
        their state, and pinned ones whose only reason may have lapsed (a due date long past)."""
        t = now.timestamp()
        sql = (
            f"SELECT space_id FROM spaces WHERE {_LIVE} AND ("
            " (pinned = 0 AND state = 'active' AND last_active < ?)"
            " OR (pinned = 0 AND state IN ('active', 'dormant') AND last_active < ?)"
            " OR (pinned = 0 AND state != 'archived' AND last_active < ?)"
            " OR (pinned = 1 AND due IS NOT NULL AND due < ?))"
        )
        params = (t - dormant_s, t - parked_s, t - archive_s, pin_until)
        return [r[0] for r in self._guard(lambda c: c.execute(sql, params).fetchall())]

    def pending_cards(self) -> list[dict[str, Any]]:
        return self.cards(review="pending", limit=200)


def _profile(row: tuple[Any, ...]) -> IndexedSpace:
    return IndexedSpace(
        space_id=row[0],
        state=SpaceState(row[1]),
        pinned=bool(row[2]),
        last_active=datetime.fromtimestamp(row[3], UTC),
        due=datetime.fromtimestamp(row[4], UTC) if row[4] is not None else None,
        entities=tuple(json.loads(row[5])),
        keywords=tuple(json.loads(row[6])),
        title=json.loads(row[7])["title"],
        times=tuple(json.loads(row[8])),
        vector=tuple(array("f", row[9])) if row[9] is not None else None,
    )
