"""The workspace_file sensor on a real folder: create / modify / delete, restarts, crashes, filters, push."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from genworker.autonomy.inbox import InboxItem
from genworker.autonomy.sensing import CursorStore, SensorRunner
from genworker.autonomy.sensing.testing import MemoryInboxWriter, StatusLog, write_worker

pytestmark = pytest.mark.anyio


def sensor(**filter: Any) -> dict[str, Any]:
    return {
        "source_type": "workspace_file",
        "sensor_id": "drop",
        "poll_interval": "1h",
        "filter": {"path": "data/drop", **filter},
        "routing_rules": [{"field": "path", "pattern": "reports/", "match": "prefix", "route": "task"}],
        "fallback_route": "summary",
    }


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "ws"


def folder(root: Path) -> Path:
    path = root / "tenants/acme/workers/w/data/drop"
    path.mkdir(parents=True, exist_ok=True)
    return path


def put(path: Path, text: str, mtime_ns: int | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    if mtime_ns is not None:
        os.utime(path, ns=(mtime_ns, mtime_ns))


def runner(root: Path, writer: MemoryInboxWriter, **filter: Any) -> SensorRunner:
    return SensorRunner(write_worker(root, [sensor(**filter)]), writer, workspace=root)


def events(items: list[InboxItem]) -> list[tuple[str, str]]:
    return [(i.event_type, str(i.payload["path"])) for i in items]


async def test_created_modified_deleted_after_a_silent_baseline(root: Path) -> None:
    drop = folder(root)
    put(drop / "old.txt", "there before the sensor")
    writer = MemoryInboxWriter()
    run = runner(root, writer)
    assert await run.poll_now("drop") == []  # baseline: what exists is not news
    put(drop / "reports/q1.csv", "a,b\n")
    put(drop / "old.txt", "changed, and longer than before")
    put(drop / ".hidden", "never reported")
    items = await run.poll_now("drop")
    assert events(items) == [("file.modified", "old.txt"), ("file.created", "reports/q1.csv")]
    created = items[1]
    assert created.route == "task" and items[0].route == "summary"
    assert created.payload["worker_path"] == "data/drop/reports/q1.csv" and created.payload["size"] == 4
    assert items[0].payload["previous_size"] == len("there before the sensor")
    (drop / "old.txt").unlink()
    assert events(await run.poll_now("drop")) == [("file.deleted", "old.txt")]
    assert await run.poll_now("drop") == []
    assert run.status("drop").state == "ready" and run.status("drop").facts_written == 3


async def test_restart_repeats_nothing_and_reports_changes_made_while_stopped_once(root: Path) -> None:
    drop = folder(root)
    put(drop / "a.txt", "a")
    writer = MemoryInboxWriter()
    first = runner(root, writer)
    await first.poll_now("drop")
    put(drop / "b.txt", "b")
    assert events(await first.poll_now("drop")) == [("file.created", "b.txt")]
    await first.stop()
    # While stopped: one file modified, one created, one deleted.
    put(drop / "a.txt", "a, edited")
    put(drop / "c.txt", "c")
    (drop / "b.txt").unlink()
    second = runner(root, writer)
    got = await second.poll_now("drop")
    assert events(got) == [("file.modified", "a.txt"), ("file.deleted", "b.txt"), ("file.created", "c.txt")]
    assert await second.poll_now("drop") == []
    assert writer.dropped == []  # nothing was even offered twice
    third = runner(root, writer)
    assert await third.poll_now("drop") == []


async def test_a_crash_between_inbox_write_and_cursor_move_repeats_nothing_and_skips_nothing(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    drop = folder(root)
    writer = MemoryInboxWriter()
    await runner(root, writer).poll_now("drop")
    put(drop / "x.txt", "x")

    def crash(self: CursorStore, cursor: object) -> None:
        raise OSError("power cut")

    monkeypatch.setattr(CursorStore, "save", crash)
    crashed = runner(root, writer)
    with pytest.raises(OSError, match="power cut"):
        await crashed.poll_now("drop")
    assert events(writer.items) == [("file.created", "x.txt")]  # written, but the cursor did not move
    assert crashed.status("drop").state == "degraded" and "power cut" in crashed.status("drop").reason
    monkeypatch.undo()
    put(drop / "y.txt", "y")  # and something new arrives before the restart
    again = runner(root, writer)
    assert events(await again.poll_now("drop")) == [("file.created", "y.txt")]
    assert events(writer.dropped) == [("file.created", "x.txt")]  # offered again, dropped by dedupe key
    assert events(writer.items) == [("file.created", "x.txt"), ("file.created", "y.txt")]


async def test_an_identical_state_after_a_delete_is_still_news(root: Path) -> None:
    drop = folder(root)
    put(drop / "f.txt", "same", mtime_ns=1_700_000_000_000_000_000)
    writer = MemoryInboxWriter()
    run = runner(root, writer)
    await run.poll_now("drop")
    (drop / "f.txt").unlink()
    await run.poll_now("drop")
    put(drop / "f.txt", "same", mtime_ns=1_700_000_000_000_000_000)  # restored with the same mtime and size
    assert events(await run.poll_now("drop")) == [("file.created", "f.txt")]


async def test_include_and_exclude_globs(root: Path) -> None:
    drop = folder(root)
    writer = MemoryInboxWriter()
    run = runner(root, writer, paths=["*.csv", "*.md"], exclude=["tmp/*"])  # `paths` is `include`
    await run.poll_now("drop")
    for name in ("a.csv", "b.md", "c.txt", "tmp/d.csv"):
        put(drop / name, name)
    assert events(await run.poll_now("drop")) == [("file.created", "a.csv"), ("file.created", "b.md")]


async def test_report_on_first_poll(root: Path) -> None:
    put(folder(root) / "existing.md", "x")
    writer = MemoryInboxWriter()
    items = await runner(root, writer, on_first_poll="report").poll_now("drop")
    assert events(items) == [("file.created", "existing.md")]


async def test_the_workers_runtime_state_is_never_reported(root: Path) -> None:
    writer = MemoryInboxWriter()
    worker = write_worker(root, [{**sensor(), "filter": {"path": "."}}])
    run = SensorRunner(worker, writer, workspace=root)
    await run.poll_now("drop")
    worker_dir = root / "tenants/acme/workers/w"
    for state in ("runtime/inbox/ibx_1.json", "tasks/active/t.json", "runs/r.json", "memory/episodes/e.md"):
        put(worker_dir / state, "{}")  # what the runtime writes as it acts on facts
    put(worker_dir / "notes/todo.md", "a real change")
    await run.poll_now("drop")  # the first poll also wrote sensor_snapshots/drop.json
    assert (worker_dir / "sensor_snapshots/drop.json").is_file()
    assert events(writer.items) == [("file.created", "notes/todo.md")]
    assert await run.poll_now("drop") == []


@pytest.mark.parametrize("path", ["runtime", "runtime/inbox", "sensor_snapshots", "tasks/active"])
async def test_a_sensor_cannot_watch_runtime_state(root: Path, path: str) -> None:
    (root / "tenants/acme/workers/w" / path).mkdir(parents=True)
    worker = write_worker(root, [{**sensor(), "filter": {"path": path}}])
    run = SensorRunner(worker, MemoryInboxWriter(), workspace=root)
    assert run.status("drop").state == "degraded" and "runtime state" in run.status("drop").reason


async def test_a_path_escaping_the_tenant_degrades_only_that_sensor(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    worker_dir = root / "tenants/acme/workers/w"
    worker_dir.mkdir(parents=True)
    (worker_dir / "link").symlink_to(outside)
    writer = MemoryInboxWriter()
    worker = write_worker(root, [{**sensor(), "filter": {"path": "link"}}])
    run = SensorRunner(worker, writer, workspace=root)
    status = run.status("drop")
    assert status.state == "degraded" and "resolves outside" in status.reason
    assert "drop" not in run.sensors


async def test_a_missing_folder_is_a_failed_poll(root: Path) -> None:
    writer = MemoryInboxWriter()
    run = runner(root, writer)
    with pytest.raises(Exception, match="does not exist"):
        await run.poll_now("drop")
    assert run.status("drop").state == "degraded"
    folder(root)
    await run.poll_now("drop")
    assert run.status("drop").state == "ready" and run.status("drop").consecutive_failures == 0


async def test_push_wakes_the_poll_right_after_a_change(root: Path) -> None:
    drop = folder(root)
    writer = MemoryInboxWriter()
    statuses = StatusLog()
    worker = write_worker(root, [sensor(push=True)])  # poll_interval is 1h: only push can be this quick
    run = SensorRunner(worker, writer, workspace=root, on_status=statuses)
    await run.start()
    try:
        await statuses.wait_for(lambda s: s.polls >= 1)  # the baseline
        # The OS watch starts asynchronously: touch until a push-driven poll reports the file.
        for attempt in range(50):
            put(drop / "pushed.txt", "x" * (attempt + 1))
            try:
                await writer.wait_for(lambda items: bool(items), 0.5)
                break
            except TimeoutError:
                continue
        assert writer.items and writer.items[0].payload["path"] == "pushed.txt"
    finally:
        await run.stop()
    assert run.status("drop").state == "stopped"


async def test_upstream_watch_paths_and_routes(root: Path) -> None:
    """Upstream's filter (`watch_paths`, `patterns` as comma-separated strings), its `match_mode` rules and
    routes: several folders, reported relative to the worker folder; heartbeat / reactive / both are the
    heartbeat's default route here, and the written route is kept in the item's metadata."""
    worker_dir = root / "tenants/acme/workers/w"
    config = {
        "source_type": "workspace_file",
        "poll_interval": "1h",
        "filter": {"watch_paths": "data/inbox, data/exports", "patterns": "*.csv, *.xlsx"},
        "routing_rules": [{"field": "path", "pattern": "URGENT", "match_mode": "regex", "route": "both"}],
        "fallback_route": "heartbeat",
    }
    put(worker_dir / "data/inbox/keep.csv", "there before")
    (worker_dir / "data/exports").mkdir(parents=True)
    writer = MemoryInboxWriter()
    run = SensorRunner(write_worker(root, [config]), writer, workspace=root)
    assert run.status("workspace_file").reason == ""
    assert await run.poll_now("workspace_file") == []
    put(worker_dir / "data/inbox/urgent-fix.csv", "x")
    put(worker_dir / "data/exports/q2.xlsx", "y")
    put(worker_dir / "data/exports/notes.txt", "not a pattern")
    put(worker_dir / "data/elsewhere/other.csv", "not watched")
    items = await run.poll_now("workspace_file")
    assert events(items) == [("file.created", "data/exports/q2.xlsx"), ("file.created", "data/inbox/urgent-fix.csv")]
    assert [i.route for i in items] == [None, None]
    assert [i.metadata.get("cognition_route") for i in items] == ["heartbeat", "both"]  # regex without case


async def test_a_feishu_folder_sensor_is_degraded_not_silent(root: Path) -> None:
    config = {"source_type": "feishu_doc", "poll_interval": "20m", "filter": {"folder_path": "/Shared/Specs"}}
    run = SensorRunner(write_worker(root, [config]), MemoryInboxWriter(), workspace=root)
    status = run.status("feishu_folder")
    assert (status.state, status.mode) == ("degraded", "poll")
    assert "not supported on this server yet" in status.reason and run.sensors == {}
