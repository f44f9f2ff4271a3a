"""What the CLI prints: aligned tables, JSON, timestamps, and a progress bar on stderr for long operations."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

__all__ = ["Progress", "print_json", "print_table", "progress_enabled", "timestamp"]


def timestamp(value: datetime | str | None) -> str:
    """The one way the CLI shows a moment: ISO 8601 in UTC, to the second (`2026-12-04T05:08:27Z`).

    Accepts a datetime or an ISO string as the API sends it; a naive one is taken as UTC, None is
    `-`, and a string that is not a time is shown as it came.
    """
    if value is None or value == "":
        return "-"
    try:
        moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    except ValueError:
        return str(value)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False, default=str))


def print_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], *, empty: str = "(none)") -> None:
    if not rows:
        print(empty)
        return
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    print("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= 60 else text[:59] + "…"


def progress_enabled(choice: bool | None, stream: TextIO | None = None) -> bool:
    """--progress / --no-progress, else only when stderr is a terminal."""
    if choice is not None:
        return choice
    return (stream or sys.stderr).isatty()


class Progress:
    """`label [#####-----]  12/40` redrawn in place on a terminal; whole lines (at most ~20)
    elsewhere, so a log or a test sees it advance without being flooded."""

    WIDTH = 30

    def __init__(self, label: str, *, enabled: bool = True, stream: TextIO | None = None) -> None:
        self.label = label
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self._tty = self.stream.isatty()
        self._last_line = -1
        self._last_draw = 0.0

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        total = max(total, 0)
        if self._tty:
            now = time.monotonic()
            if done < total and now - self._last_draw < 0.05:  # redraw at most 20 times a second
                return
            self._last_draw = now
            self.stream.write("\r" + self._bar(done, total))
            if total and done >= total:
                self.stream.write("\n")
            self.stream.flush()
            return
        step = max(total // 20, 1)
        if done == total or done - self._last_line >= step:
            self._last_line = done
            self.stream.write(self._bar(done, total) + "\n")
            self.stream.flush()

    def _bar(self, done: int, total: int) -> str:
        filled = self.WIDTH if not total else min(self.WIDTH, self.WIDTH * done // total)
        return f"{self.label} [{'#' * filled}{'-' * (self.WIDTH - filled)}] {done}/{total}"
