"""Cursor files: round trip, atomic replace, schema_version, and clear errors on bad files."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path

import pytest

from genworker.autonomy.sensing.cursors import CURSOR_SCHEMA_VERSION, Cursor, CursorStore
from genworker.autonomy.sensing.errors import CursorError
from genworker.ids import InvalidIdError

NOW = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


def cursor(seq: int = 3, **state: object) -> Cursor:
    return Cursor("repo", "git", "repo=repos/app", seq, state or {"branches": {"main": "abc"}}, NOW)


def test_round_trip_and_location(tmp_path: Path) -> None:
    store = CursorStore(tmp_path / "w")
    assert store.load("repo") is None
    store.save(cursor())
    path = tmp_path / "w" / "sensor_snapshots" / "repo.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["schema_version"] == CURSOR_SCHEMA_VERSION
    loaded = store.load("repo")
    assert loaded is not None
    assert (loaded.seq, loaded.scope, dict(loaded.state), loaded.updated_at) == (
        3,
        "repo=repos/app",
        {"branches": {"main": "abc"}},
        NOW,
    )
    assert loaded.updated_at.tzinfo is not None


def test_save_replaces_atomically_and_leaves_no_temp_files(tmp_path: Path) -> None:
    store = CursorStore(tmp_path)
    store.save(cursor(1))
    store.save(cursor(2, files={"a": [1, 2]}))
    loaded = store.load("repo")
    assert loaded is not None and loaded.seq == 2 and dict(loaded.state) == {"files": {"a": [1, 2]}}
    assert [p.name for p in store.folder.iterdir()] == ["repo.json"]


def test_naive_datetimes_are_refused(tmp_path: Path) -> None:
    naive = Cursor("repo", "git", "s", 0, {}, datetime(2025, 1, 1))  # noqa: DTZ001
    with pytest.raises(ValueError, match="timezone-aware"):
        CursorStore(tmp_path).save(naive)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("{not json", "not valid JSON"),
        (json.dumps({"schema_version": 99}), "unsupported schema_version 99"),
        (json.dumps({"schema_version": 1, "sensor_key": "repo"}), "source_type"),
        (
            json.dumps(
                {
                    "schema_version": 1,
                    "sensor_key": "other",
                    "source_type": "git",
                    "scope": "s",
                    "seq": 0,
                    "updated_at": "2025-01-01T00:00:00Z",
                    "state": {},
                }
            ),
            "belongs to sensor 'other'",
        ),
    ],
)
def test_bad_files_raise_cursor_error_and_stay(tmp_path: Path, text: str, fragment: str) -> None:
    store = CursorStore(tmp_path)
    store.folder.mkdir()
    store.path("repo").write_text(text, encoding="utf-8")
    with pytest.raises(CursorError, match=fragment):
        store.load("repo")
    assert store.path("repo").read_text(encoding="utf-8") == text


def test_sensor_keys_are_ids(tmp_path: Path) -> None:
    with pytest.raises(InvalidIdError):
        CursorStore(tmp_path).path("../escape")


def test_upstreams_snapshot_reads_as_no_cursor_and_is_kept_aside(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # upstream genworker writes sensor_snapshots/{source_type}.json too, in its own shape
    store = CursorStore(tmp_path)
    store.folder.mkdir()
    upstream = json.dumps({"seen_ids": ["<fixture-1@example.com>"]})
    store.path("email").write_text(upstream, encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="genworker.sensing"):
        assert store.load("email") is None
        assert store.load("email") is None
    assert len(caplog.records) == 1 and "another runtime's snapshot" in caplog.records[0].getMessage()
    cursor = Cursor("email", "email", "INBOX", 0, {"uids": {}}, datetime(2026, 1, 1, tzinfo=UTC))
    store.save(cursor)
    assert store.load("email") == cursor
    assert (store.folder / "email.upstream.json").read_text(encoding="utf-8") == upstream  # nothing lost
