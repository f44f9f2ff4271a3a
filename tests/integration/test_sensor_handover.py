"""A sensor's cursor when a worker's autonomy moves between runtime processes (issue #30): a poll
holds the sensor's lock from reading the cursor to saving the next one, so a process never polls
from a cursor another process is still moving, and the new owner goes on where the old one ended:
no fact read twice, none skipped. Two sensors on one worker folder stand for two processes."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from pathlib import Path

import pytest

from genworker.autonomy.sensing import Cursor, CursorStore, Observation, PullSensor, SensorRunner, build_sensor
from genworker.autonomy.sensing.errors import SensorBusy
from genworker.autonomy.sensing.testing import MemoryInboxWriter, StatusLog, write_worker

pytestmark = pytest.mark.anyio

FILES = {"source_type": "workspace_file", "sensor_id": "drop", "poll_interval": "1h", "filter": {"path": "drop"}}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "tenants/acme/workers/w/drop").mkdir(parents=True)
    return root


def drop(root: Path, name: str) -> None:
    (root / "tenants/acme/workers/w/drop" / name).write_text(name, encoding="utf-8")


def paths(writer: MemoryInboxWriter) -> list[str]:
    return [item.payload["path"] for item in writer.items]


class Slow:
    """Makes a sensor's `observe` wait (in its thread) until released: a poll still going on in the
    process that is giving the worker up."""

    def __init__(self, sensor: PullSensor, monkeypatch: pytest.MonkeyPatch) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        observe = sensor.observe

        def slow(previous: Cursor | None, seq: int) -> Observation:
            self.entered.set()
            self.release.wait(30)
            return observe(previous, seq)

        monkeypatch.setattr(sensor, "observe", slow)


async def test_a_poll_never_starts_from_a_cursor_another_process_is_moving(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = write_worker(root, [FILES])
    [config] = worker.persona.sensor_configs
    old_inbox, new_inbox = MemoryInboxWriter(), MemoryInboxWriter()
    old = build_sensor(worker, config, old_inbox, workspace=root)  # the process giving the worker up
    new = build_sensor(worker, config, new_inbox, workspace=root)  # the process taking it
    assert old is not None and new is not None
    assert await new.poll() == []  # the first poll sets the baseline
    drop(root, "a.txt")
    slow = Slow(old, monkeypatch)
    going = asyncio.create_task(old.poll())
    await asyncio.to_thread(slow.entered.wait, 10)  # the old owner's poll has read the cursor
    with pytest.raises(SensorBusy):
        await new.poll()  # it reads nothing while the old one's poll goes on
    slow.release.set()
    assert [item.payload["path"] for item in await going] == ["a.txt"]
    assert await new.poll() == []  # from the cursor the old owner saved: a.txt is not read again
    drop(root, "b.txt")
    assert [item.payload["path"] for item in await new.poll()] == ["b.txt"]
    assert (paths(old_inbox), paths(new_inbox)) == (["a.txt"], ["b.txt"])


class Said(logging.Handler):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text, self.seen = text, threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.seen.set()


async def test_a_runner_polls_again_soon_once_the_other_process_has_finished(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    worker = write_worker(root, [FILES])
    writer, log = MemoryInboxWriter(), StatusLog()
    runner = SensorRunner(worker, writer, workspace=root, on_status=log)
    assert await runner.poll_now("drop") == []  # the baseline
    said = Said("another runtime process is polling it")
    caplog.set_level(logging.INFO, logger="genworker.sensing")
    logging.getLogger("genworker.sensing").addHandler(said)
    held = await asyncio.to_thread(CursorStore(root / "tenants/acme/workers/w").hold, "drop")  # the other's poll
    assert held is not None
    try:
        await runner.start()
        await asyncio.to_thread(said.seen.wait, 10)  # its first poll found the sensor busy
        drop(root, "b.txt")
        os.close(held)  # the other process's poll is over
        held = None
        await writer.wait_for(lambda items: len(items) == 1)  # within BUSY_RETRY_S, not the hour
        assert runner.status("drop").state == "ready" and runner.status("drop").consecutive_failures == 0
    finally:
        logging.getLogger("genworker.sensing").removeHandler(said)
        if held is not None:
            os.close(held)
        await runner.stop()
    assert paths(writer) == ["b.txt"]
