"""Which paths a load looked at, and what they were: the key of a cached load.

While `tracking()` is active, the loader's file accesses go through `stat`, `is_file` and
`is_dir` here, which record each path's identity (`FileStamp`) or its absence. A file read
records its folder too: a folder's mtime changes whenever an entry is created, deleted or
renamed in it, so a file that appears next to the ones read (`CHANNEL_CREDENTIALS.json`, a
graph module) is seen. Outside `tracking()` these are plain `os.stat` calls.
"""

from __future__ import annotations

import os
import stat as stat_module
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["FileStamp", "Inputs", "current_stamp", "is_dir", "is_file", "stat", "tracking"]

FileStamp = tuple[int, int, int, int, int, int]
"""(st_mode, st_ino, st_dev, st_size, st_mtime_ns, st_ctime_ns). ctime cannot be set by a
program (mtime can, e.g. `touch -d` or an archive extract), and changes with every write."""


def _stamp(info: os.stat_result) -> FileStamp:
    return (info.st_mode, info.st_ino, info.st_dev, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def current_stamp(path: str) -> FileStamp | None:
    """What `path` is now (None: absent or unreadable), comparable with a recorded stamp."""
    try:
        return _stamp(os.stat(path))  # noqa: PTH116 - a str path: no Path object per check on the warm path
    except (OSError, ValueError):
        return None


@dataclass(slots=True)
class Inputs:
    """Path (absolute, as the loader named it) -> stamp when first looked at, or None: absent."""

    stamps: dict[str, FileStamp | None] = field(default_factory=dict)

    def items(self) -> tuple[tuple[str, FileStamp | None], ...]:
        return tuple(self.stamps.items())

    def newest_ns(self) -> int:
        """The latest mtime or ctime among the recorded paths (0 when none)."""
        return max((max(s[4], s[5]) for s in self.stamps.values() if s is not None), default=0)

    def record(self, path: Path) -> os.stat_result:
        """`os.stat(path)`, keeping the first stamp seen (or None when it raises)."""
        key = str(path)
        try:
            info = os.stat(key)  # noqa: PTH116
        except OSError:
            self.stamps.setdefault(key, None)
            raise
        self.stamps.setdefault(key, _stamp(info))
        return info


_ACTIVE: ContextVar[Inputs | None] = ContextVar("genworker_load_inputs", default=None)


@contextmanager
def tracking() -> Iterator[Inputs]:
    """Record the paths the loader looks at until the block ends (nested blocks record apart)."""
    found = Inputs()
    token = _ACTIVE.set(found)
    try:
        yield found
    finally:
        _ACTIVE.reset(token)


def stat(path: Path) -> os.stat_result:
    """`path.stat()` for a file about to be read: records the file and its folder."""
    found = _ACTIVE.get()
    if found is None:
        return path.stat()
    parent = path.parent
    if str(parent) not in found.stamps:
        with suppress(OSError):
            found.record(parent)
    return found.record(path)


def is_file(path: Path) -> bool:
    return _is(path, stat_module.S_ISREG)


def is_dir(path: Path) -> bool:
    return _is(path, stat_module.S_ISDIR)


def _is(path: Path, kind: Callable[[int], bool]) -> bool:
    found = _ACTIVE.get()
    try:
        info = path.stat() if found is None else found.record(path)
    except (OSError, ValueError):
        return False
    return kind(info.st_mode)
