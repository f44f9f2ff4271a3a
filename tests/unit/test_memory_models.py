"""Episode files: round trip, errors that name the file and field, scopes and bindings, decay."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from genworker.memory.episodes import EpisodeStore
from genworker.memory.errors import MemoryFileError
from genworker.memory.models import (
    Episode,
    MemoryBinding,
    Provenance,
    Scope,
    ScopeKind,
    decayed_weight,
    new_episode_id,
    parse_episode,
    render_episode,
)

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def episode(**changes: object) -> Episode:
    base: dict[str, object] = {
        "episode_id": new_episode_id(NOW),
        "tenant_id": "acme",
        "worker_id": "alice",
        "scope": "conversation:t1",
        "title": "Invoice 42",
        "created_at": NOW,
        "provenance": Provenance(run_id="run_1", goal_id="g1", channel="slack"),
        "body": "Paid invoice 42 for ACME.\n\nSecond paragraph: 发票已付。",
    }
    return Episode.model_validate({**base, **changes})


def test_an_episode_survives_a_round_trip_through_its_file(tmp_path: Path) -> None:
    store = EpisodeStore(tmp_path / "memory")
    original = episode()
    path = store.write(original)
    assert path == tmp_path / "memory" / "episodes" / f"{original.episode_id}.md"
    assert path.read_text(encoding="utf-8").startswith("---\nschema_version: 1\n")
    assert store.read(original.episode_id) == original
    assert list(store.scan()) == [original]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("no front matter", "starts with a '---' front matter block"),
        ("---\nschema_version: 1\n", "not closed"),
        ("---\n: [\n---\nbody", "not valid YAML"),
        ("---\nschema_version: 2\n---\nbody", "schema_version: 2 is not supported"),
        ("---\nschema_version: 1\nepisode_id: ep_1\n---\nbody", "episode_id: Value error"),
    ],
)
def test_a_bad_episode_file_is_reported_with_its_path_and_field(text: str, message: str) -> None:
    with pytest.raises(MemoryFileError, match=message) as info:
        parse_episode(text, "memory/episodes/ep_x.md")
    assert str(info.value).startswith("memory/episodes/ep_x.md: ")


def test_a_naive_timestamp_is_refused_by_field() -> None:
    text = render_episode(episode()).replace("+00:00", "").replace('Z"', '"').replace("Z'", "'")
    with pytest.raises(MemoryFileError, match=r"created_at: .*timezone"):
        parse_episode(text, "f.md")


def test_scan_skips_an_unreadable_file_and_reports_it(tmp_path: Path) -> None:
    store = EpisodeStore(tmp_path / "memory")
    good = episode()
    store.write(good)
    broken = store.folder / "ep_20260501120000_deadbeef.md"
    broken.write_text("garbage", encoding="utf-8")
    issues: list = []
    assert list(store.scan(issues)) == [good]
    assert [i.path for i in issues] == [broken]
    assert broken.exists()  # never deleted


def test_a_binding_reads_its_layers_in_order() -> None:
    binding = MemoryBinding("acme", "alice", run_id="r1", duty_id="d1", thread_id="t1")
    assert [str(s) for s in binding.scopes()] == ["run:r1", "duty:d1", "conversation:t1", "worker:alice", "tenant:acme"]
    assert [s.kind for s in MemoryBinding("acme", "alice").scopes()] == [ScopeKind.WORKER, ScopeKind.TENANT]


def test_scope_text_is_validated() -> None:
    assert Scope.parse("duty:daily") == Scope(ScopeKind.DUTY, "daily")
    for bad in ("daily", "planet:x", "duty:"):
        with pytest.raises(ValueError, match="is not '<kind>:<id>'"):
            Scope.parse(bad)


def test_weight_halves_every_half_life() -> None:
    assert decayed_weight(1.0, NOW, NOW, 30) == 1.0
    assert decayed_weight(1.0, NOW, NOW + timedelta(days=30), 30) == pytest.approx(0.5)
    assert decayed_weight(2.0, NOW, NOW + timedelta(days=60), 30) == pytest.approx(0.5)


def test_reinforcing_raises_the_weight_in_the_file(tmp_path: Path) -> None:
    store = EpisodeStore(tmp_path / "memory")
    stored = episode()
    store.write(stored)
    updated = store.reinforce(stored.episode_id, boost=0.25, now=NOW + timedelta(days=1))
    assert updated is not None
    again = store.read(stored.episode_id)
    assert (again.weight, again.recall_count, again.reinforced_at) == (1.25, 1, NOW + timedelta(days=1))
    assert store.reinforce("ep_20260101000000_00000000", boost=1) is None


@pytest.mark.parametrize(
    "title",
    [
        "plain title",
        'quotes " and \\ backslash',
        "两个 中文 words and an emoji \U0001f600",
        "tab\tand: colon # hash - dash [brackets] {braces}",
        "yes",  # YAML 1.1 would read a bare yes as true: JSON quotes it
        "line \u2028 separator and \x85 next line",  # YAML folds these: written through PyYAML
        "\x7f delete",
    ],
)
def test_an_episode_round_trips_through_its_file_whatever_its_title(title: str) -> None:
    original = episode().model_copy(update={"title": title, "weight": 0.5, "consolidated_from": ("ep_a", "ep_b")})
    assert parse_episode(render_episode(original), "f.md") == original


def test_a_tiny_weight_round_trips() -> None:
    original = episode().model_copy(update={"weight": 1e-05})  # JSON writes 1e-05: PyYAML reads a string
    assert parse_episode(render_episode(original), "f.md") == original
