"""Preferences and decisions: explicit supersession (the old one kept, marked, with its evidence),
conflicts flagged, duplicates folded, bad lines reported by file and line."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from genworker.memory.errors import MemoryFileError
from genworker.memory.models import Scope
from genworker.memory.preferences import Evidence, StatementStore

T0 = datetime(2026, 5, 1, tzinfo=UTC)
CONV = Scope.parse("conversation:t1")


def test_a_newer_decision_supersedes_the_older_one_explicitly(tmp_path: Path) -> None:
    store = StatementStore(tmp_path, "decision")
    old = store.add(
        "Vendor", "Use ACME for printing", CONV, evidence=Evidence(run_id="r1", quote="go with ACME"), now=T0
    )
    new = store.add("vendor ", "Use Globex for printing", CONV, evidence=Evidence(run_id="r2"), now=T0 + timedelta(1))
    records = {r.id: r for r in store.all()}
    assert len(records) == 2
    kept = records[old.id]
    assert (kept.status, kept.superseded_by, kept.superseded_at) == ("superseded", new.id, T0 + timedelta(1))
    assert kept.evidence.quote == "go with ACME"  # the old evidence stays
    assert records[new.id].supersedes == old.id
    assert [s.value for s in store.active([CONV])] == ["Use Globex for printing"]


def test_a_preference_replaces_another_only_when_it_says_so(tmp_path: Path) -> None:
    store = StatementStore(tmp_path, "preference")
    first = store.add("report language", "English", CONV, now=T0)
    clash = store.add("report language", "German", CONV, now=T0 + timedelta(1))
    records = {r.id: r for r in store.all()}
    assert records[first.id].conflict_with == (clash.id,)
    assert records[clash.id].conflict_with == (first.id,)
    assert {s.status for s in records.values()} == {"active"}
    final = store.add("report language", "French", CONV, replaces=True, now=T0 + timedelta(2))
    assert [s.id for s in store.active()] == [final.id]
    assert {r.superseded_by for r in store.all() if r.status == "superseded"} == {final.id}


def test_the_same_statement_twice_is_stored_once(tmp_path: Path) -> None:
    store = StatementStore(tmp_path, "preference")
    a = store.add("tone", "Brief answers", CONV)
    b = store.add("Tone", "brief answers", CONV)
    assert a.id == b.id and len(store.all()) == 1


def test_scopes_keep_statements_apart(tmp_path: Path) -> None:
    store = StatementStore(tmp_path, "decision")
    store.add("vendor", "ACME", Scope.parse("duty:printing"))
    store.add("vendor", "Globex", CONV)
    assert [s.value for s in store.active([CONV])] == ["Globex"]
    assert len(store.active()) == 2  # different scopes never supersede each other


def test_a_corrupt_line_is_reported_with_file_and_line(tmp_path: Path) -> None:
    store = StatementStore(tmp_path, "decision")
    store.add("vendor", "ACME", CONV)
    with store.file.path.open("a", encoding="utf-8") as fh:
        fh.write('{"schema_version": 1, "id": "x"}\n')
    with pytest.raises(MemoryFileError, match=r"decisions.jsonl:2: kind: Field required"):
        store.all()
    store.file.path.write_text('{"schema_version": 9}\n', encoding="utf-8")
    with pytest.raises(MemoryFileError, match=r"decisions.jsonl:1: schema_version: 9 is not supported"):
        store.all()
