"""Which paths a load looked at, and what they were: the key of a cached load.

While `tracking()` is active, the loader's file accesses go through `stat`, `is_file` and
`is_dir` here, which record each path's identity (`FileStamp`) or its absence. A folder that is
listed is recorded itself: its mtime changes whenever an entry is created, deleted or renamed in
it. The folders of files read are not: the runtime creates its state folders (`runtime/`,
`memory/` …) next to PERSONA.md and TENANT.json, which must not count as an edit; a file looked
for there (`CHANNEL_CREDENTIALS.json`) goes through `is_file`. Outside `tracking()` these are
plain `os.stat` calls.
"""

from __future__ import annotations

import os
import stat as stat_module
import struct
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Inputs", "Key", "is_dir", "is_file", "stamps_now", "stat", "tracking"]

# A stamp: st_mode, st_ino, st_dev, st_size, st_mtime_ns, st_ctime_ns, packed (a few bytes
# instead of seven objects per path). ctime cannot be set by a program (mtime can: `touch -d`,
# an archive extract) and changes with every write. An absent path has mode -1.
_STAMP = struct.Struct("<qQQqqq")
_ABSENT = _STAMP.pack(-1, 0, 0, 0, 0, 0)

Key = tuple[tuple[str, ...], bytes]
"""The paths looked at, in order, and their stamps joined: equal keys, unchanged inputs."""


def _pack(info: os.stat_result) -> bytes:
    return _STAMP.pack(info.st_mode, info.st_ino, info.st_dev, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def stamps_now(paths: Iterable[str]) -> bytes:
    """The stamps of `paths` as they are now, comparable with a recorded key's."""
    out = []
    for path in paths:
        try:
            out.append(_pack(os.stat(path)))  # noqa: PTH116 - a str path: no Path object per check on the warm path
        except (OSError, ValueError):
            out.append(_ABSENT)
    return b"".join(out)


@dataclass(slots=True)
class Inputs:
    """Path (absolute, as the loader named it) -> its stamp when first looked at."""

    stamps: dict[str, bytes] = field(default_factory=dict)
    newest_ns: int = 0  # the latest mtime or ctime among them

    def key(self) -> Key:
        return tuple(self.stamps), b"".join(self.stamps.values())

    def record(self, path: Path) -> os.stat_result:
        """`os.stat(path)`, keeping the first stamp seen (absent when it raises)."""
        key = str(path)
        try:
            info = os.stat(key)  # noqa: PTH116
        except OSError:
            self.stamps.setdefault(key, _ABSENT)
            raise
        if key not in self.stamps:
            self.stamps[key] = _pack(info)
            self.newest_ns = max(self.newest_ns, info.st_mtime_ns, info.st_ctime_ns)
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
    """`path.stat()` for a file about to be read (recorded before the read)."""
    found = _ACTIVE.get()
    return path.stat() if found is None else found.record(path)


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
