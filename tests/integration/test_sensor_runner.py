"""SensorRunner and SensorRegistry: scheduled polls, failure isolation, statuses, clean stop, reloads."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from genworker.autonomy.sensing import (
    Cursor,
    CursorStore,
    FactEmitter,
    Observation,
    PullSensor,
    SensorRegistry,
    SensorRunner,
    SensorStatus,
    build_sensor,
)
from genworker.autonomy.sensing.testing import MemoryInboxWriter, StatusLog, write_worker
from genworker.workspace.models.persona import SensorConfig

pytestmark = pytest.mark.anyio

FILES = {"source_type": "workspace_file", "sensor_id": "drop", "poll_interval": "1h", "filter": {"path": "drop"}}
BROKEN_GIT = {"source_type": "git", "sensor_id": "repo", "poll_interval": "1h", "filter": {"repo": "not_a_repo"}}
HOOK = {"source_type": "webhook", "sensor_id": "hook"}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    for folder in ("drop", "not_a_repo"):
        (root / "tenants/acme/workers/w" / folder).mkdir(parents=True)
    return root


def polled(key: str) -> Callable[[SensorStatus], bool]:
    return lambda status: status.sensor_key == key and status.polls >= 1


class Exploding(PullSensor):
    """A sensor with a bug (not a SensorError): stands in for any unexpected failure."""

    def scope(self) -> str:
        return "boom"

    def observe(self, previous: Cursor | None, seq: int) -> Observation:
        raise RuntimeError("bug in a sensor")


class Hanging(PullSensor):
    """A poll stuck in its thread (an unresponsive server) until `release` is set."""

    release = threading.Event()

    def scope(self) -> str:
        return "hang"

    def observe(self, previous: Cursor | None, seq: int) -> Observation:
        self.release.wait(30)
        return Observation((), {})


def builder(root: Path, writer: MemoryInboxWriter, special: dict[str, type[PullSensor]]) -> Any:
    worker = write_worker(root, [FILES, BROKEN_GIT, HOOK, *({**FILES, "sensor_id": key} for key in special)])

    def build(config: SensorConfig) -> PullSensor | None:
        if config.key in special:
            emitter = FactEmitter("acme", "w", config, writer)
            return special[config.key](config, emitter, CursorStore(root / "tenants/acme/workers/w"))
        return build_sensor(worker, config, writer, workspace=root)

    return worker, build


async def test_one_failing_sensor_does_not_stop_the_others(root: Path) -> None:
    writer = MemoryInboxWriter()
    log = StatusLog()
    worker, build = builder(root, writer, {"boom": Exploding})
    run = SensorRunner(worker, writer, workspace=root, on_status=log, build=build)
    assert {s.sensor_key: s.mode for s in run.statuses()} == {
        "drop": "poll",
        "repo": "poll",
        "hook": "push",
        "boom": "poll",
    }
    await run.start()
    try:
        for key in ("drop", "repo", "boom"):
            await log.wait_for(polled(key))
        assert run.status("repo").state == "degraded" and "not a git repository" in run.status("repo").reason
        assert run.status("boom").state == "degraded" and run.status("boom").reason == "RuntimeError: bug in a sensor"
        assert run.status("drop").state == "ready" and run.status("hook").state == "ready"
        (root / "tenants/acme/workers/w/drop/new.txt").write_text("x", encoding="utf-8")
        run.trigger("drop")  # the interval is an hour: the trigger is what polls now
        await writer.wait_for(lambda items: len(items) == 1)
        assert writer.items[0].payload["path"] == "new.txt"
        run.trigger("repo")
        await log.wait_for(lambda s: s.sensor_key == "repo" and s.consecutive_failures >= 2)
    finally:
        await run.stop()
    assert {s.state for s in run.statuses()} == {"stopped"}
    assert all(t.done() for t in asyncio.all_tasks() if t.get_name().startswith("sensor"))


async def test_poll_all_isolates_failures(root: Path) -> None:
    writer = MemoryInboxWriter()
    worker, build = builder(root, writer, {"boom": Exploding})
    run = SensorRunner(worker, writer, workspace=root, build=build)
    assert await run.poll_all() == {"drop": []}
    (root / "tenants/acme/workers/w/drop/a.txt").write_text("a", encoding="utf-8")
    results = await run.poll_all()
    assert list(results) == ["drop"] and results["drop"][0].payload["path"] == "a.txt"
    assert run.status("boom").consecutive_failures == 2 and run.status("drop").facts_written == 1
    as_dict = run.status("drop").as_dict()
    assert as_dict["state"] == "ready" and isinstance(as_dict["last_success_at"], str)
    with pytest.raises(KeyError):
        await run.poll_now("hook")  # push sensors are not polled


async def test_stop_cancels_a_hung_poll_after_the_grace_period(root: Path) -> None:
    writer = MemoryInboxWriter()
    log = StatusLog()
    worker, build = builder(root, writer, {"hang": Hanging})
    run = SensorRunner(worker, writer, workspace=root, on_status=log, build=build)
    Hanging.release.clear()
    await run.start()
    try:
        await log.wait_for(polled("drop"))
        await asyncio.wait_for(run.stop(grace_s=0.2), 10)
        assert run.status("hang").state == "stopped"
    finally:
        Hanging.release.set()


async def test_a_bad_filter_degrades_at_start_with_the_field_named(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    worker = write_worker(root, [{**FILES, "filter": {"path": "drop", "max_files": 0}}])
    with caplog.at_level(logging.INFO, logger="genworker.sensing"):
        run = SensorRunner(worker, MemoryInboxWriter(), workspace=root)
    assert run.status("drop").state == "degraded" and "filter.max_files" in run.status("drop").reason
    assert run.sensors == {}
    # the operator hears of it once, at start-up, as a warning (it used to be said nowhere but the status)
    [record] = caplog.records
    assert record.levelno == logging.WARNING and "acme/w: drop will not run" in record.getMessage()
    assert "filter.max_files" in record.getMessage()


async def test_a_failing_poll_is_said_once_until_it_changes_or_recovers(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A sensor whose source is down fails every poll_interval: a warning when it starts failing, DEBUG
    while the same failure repeats, a new warning when the failure changes, INFO when it polls again."""
    repo = root / "tenants/acme/workers/w/not_a_repo"
    worker = write_worker(root, [BROKEN_GIT])
    run = SensorRunner(worker, MemoryInboxWriter(), workspace=root)
    caplog.set_level(logging.DEBUG, logger="genworker.sensing")
    for _ in range(3):
        await run.poll_all()
    repo.rmdir()
    await run.poll_all()
    await run.poll_all()
    await asyncio.to_thread(subprocess.run, ["git", "init", "-q", str(repo)], check=True)
    await run.poll_all()
    said = [(r.levelname, r.getMessage().removeprefix("[Sensor] acme/w: repo ")) for r in caplog.records]
    expected = [
        ("WARNING", "poll failed: git rev-parse failed"),
        ("DEBUG", "poll failed again: git rev-parse failed"),
        ("DEBUG", "poll failed again: git rev-parse failed"),
        ("WARNING", "poll failed: repository 'not_a_repo' does not exist"),
        ("DEBUG", "poll failed again: repository 'not_a_repo' does not exist"),
        ("INFO", "polls again (5 failed before)"),
    ]
    assert len(said) == len(expected), said
    pairs = zip(said, expected, strict=True)
    assert all(level == want and text.startswith(start) for (level, text), (want, start) in pairs), said
    assert run.status("repo").state == "ready"


async def test_registry_follows_reloads(root: Path) -> None:
    writer = MemoryInboxWriter()
    log = StatusLog()
    registry = SensorRegistry(root, writer, on_status=log)
    worker = write_worker(root, [FILES])
    await registry.sync([worker])
    first = registry.runner("acme", "w")
    assert first is not None
    await log.wait_for(polled("drop"))
    same = write_worker(root, [FILES])  # reloaded, nothing about sensors changed
    await registry.sync([same])
    assert registry.runner("acme", "w") is first
    changed = write_worker(root, [FILES, HOOK])
    await registry.sync([changed])
    second = registry.runner("acme", "w")
    assert second is not None and second is not first
    assert first.status("drop").state == "stopped"
    assert sorted(registry.describe()["acme/w"][i]["sensor_key"] for i in range(2)) == ["drop", "hook"]
    await registry.sync([write_worker(root, [])])  # no sensors left
    assert registry.runner("acme", "w") is None and second.status("drop").state == "stopped"
    await registry.sync([changed])
    await registry.stop()
    assert {s.state for s in registry.statuses()} <= {"stopped"}


async def test_with_the_real_file_inbox_store_a_crash_repeats_nothing(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from genworker.autonomy.inbox import FileInboxStore

    store = FileInboxStore(root)
    worker = write_worker(root, [{**FILES, "filter": {"path": "."}}])  # the whole worker folder, inbox included
    await SensorRunner(worker, store, workspace=root).poll_now("drop")
    (root / "tenants/acme/workers/w/drop/report.md").write_text("x", encoding="utf-8")
    monkeypatch.setattr(CursorStore, "save", lambda self, cursor: (_ for _ in ()).throw(OSError("killed")))
    with pytest.raises(OSError):
        await SensorRunner(worker, store, workspace=root).poll_now("drop")
    monkeypatch.undo()
    again = SensorRunner(worker, store, workspace=root)
    assert await again.poll_now("drop") == []  # the store dropped the repeat by its dedupe key
    assert await again.poll_now("drop") == []  # and the store's own files under runtime/ are not news
    [item] = await store.list("acme", "w")
    assert item.payload["path"] == "drop/report.md" and item.event_type == "file.created"
