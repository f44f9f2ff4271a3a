"""When the file inbox turns its journal into item files: once a worker's writes pause, or sooner when
its journal grows long.

Settling costs a new file, a dedupe marker and an fsync per item; doing it while a burst of writes is
still arriving takes the CPU and the filesystem's journal from the writes being acknowledged, so it
waits for `idle_s` without writes (or `max_lines` journaled). Readers never wait for it: every read and
claim settles first. One thread, started on demand, ends when nothing is left to settle.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

__all__ = ["SETTLE_IDLE_S", "SETTLE_MAX_LINES", "Settler"]

log = logging.getLogger(__name__)

SETTLE_IDLE_S: Final = 0.2
SETTLE_MAX_LINES: Final = 5000


class Settler:
    def __init__(
        self, settle: Callable[[Path], None], *, idle_s: float = SETTLE_IDLE_S, max_lines: int = SETTLE_MAX_LINES
    ) -> None:
        self._settle = settle
        self._idle_s = idle_s
        self._max_lines = max_lines
        self._cond = threading.Condition()
        self._due: dict[Path, tuple[float, int]] = {}  # folder -> (time of its last write, lines written)
        self._running = False

    def appended(self, folder: Path, lines: int) -> None:
        """`lines` new journal lines in `folder`'s journal."""
        with self._cond:
            _, count = self._due.get(folder, (0.0, 0))
            self._due[folder] = (time.monotonic(), count + lines)
            if self._running:
                # a write only moves the folder's deadline later: the thread, waking at the old one, waits
                # again; it needs waking only for a folder that is due now
                if count + lines >= self._max_lines:
                    self._cond.notify()
                return
            self._running = True
        threading.Thread(target=self._run, name="inbox-settle").start()

    def _run(self) -> None:
        while True:
            with self._cond:
                ready = self._take_ready()
                if not ready and not self._due:
                    self._running = False
                    return
                if not ready:
                    self._cond.wait(self._next_wait())
                    continue
            for folder in ready:
                try:
                    self._settle(folder)
                except Exception:
                    log.exception("settling the inbox journal in %s failed; the next read, claim or write does", folder)

    def _take_ready(self) -> list[Path]:
        now = time.monotonic()
        ready = [f for f, (at, n) in self._due.items() if n >= self._max_lines or now - at >= self._idle_s]
        for folder in ready:
            del self._due[folder]
        return ready

    def _next_wait(self) -> float:
        now = time.monotonic()
        return max(0.0, min(at + self._idle_s - now for at, _ in self._due.values()))
