"""Settler: a worker's journal is settled once its writes pause, or at once when it grows long."""

from __future__ import annotations

import threading
from pathlib import Path

from genworker.autonomy.inbox.settler import Settler


class Recorder:
    """The settle callback: which folders were settled; `done` is set on the first."""

    def __init__(self) -> None:
        self.settled: list[Path] = []
        self.done = threading.Event()

    def __call__(self, folder: Path) -> None:
        self.settled.append(folder)
        self.done.set()


def test_a_long_journal_wakes_the_waiting_thread() -> None:
    recorder = Recorder()
    settler = Settler(recorder, idle_s=600, max_lines=10)
    folder = Path("/inbox/a")
    settler.appended(folder, 4)  # the thread now waits for the pause
    settler.appended(folder, 5)
    assert not recorder.settled
    settler.appended(folder, 1)  # 10 lines: due now, not in 600 s
    assert recorder.done.wait(30)
    assert recorder.settled == [folder]


def test_a_folder_is_settled_once_its_writes_pause() -> None:
    recorder = Recorder()
    settler = Settler(recorder, idle_s=0.05, max_lines=1000)
    for _ in range(20):
        settler.appended(Path("/inbox/b"), 1)
    assert recorder.done.wait(30)
    assert set(recorder.settled) == {Path("/inbox/b")}
