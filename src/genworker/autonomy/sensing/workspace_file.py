"""The workspace_file sensor: files created, modified or deleted under a folder of the worker.

Each poll walks the folder and diffs `{relative path: (mtime_ns, size)}` against the snapshot in the
cursor, so changes made while the runtime was stopped are reported once at the next poll. Hidden
entries (a leading dot), symlinks and the worker's runtime state folders (STATE_DIRS: the inbox,
tasks, runs, cursors ...) are never reported, so a sensor cannot feed on its own writes. With
`filter.push`, watchfiles wakes the poll right after a change; the diff stays the source of truth.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from watchfiles import Change, awatch

from genworker.autonomy.sensing.base import Clock, Observation, PullSensor, confined_path, utc_now
from genworker.autonomy.sensing.cursors import Cursor, CursorStore
from genworker.autonomy.sensing.errors import SensorConfigError, SensorPollError
from genworker.autonomy.sensing.facts import Fact, FactEmitter
from genworker.autonomy.sensing.filters import WorkspaceFileFilter
from genworker.workspace.models.persona import SensorConfig

__all__ = ["STATE_DIRS", "FileState", "WorkspaceFileSensor", "diff_files", "scan_folder"]

FileState = tuple[int, int]  # (mtime_ns, size)

PUSH_DEBOUNCE_MS = 200
STATE_DIRS = ("sensor_snapshots", "runtime", "tasks", "runs", "memory", "archive")
"""Worker sub-folders the runtime writes to; never watched."""


class WorkspaceFileSensor(PullSensor):
    def __init__(
        self,
        config: SensorConfig,
        emitter: FactEmitter,
        cursors: CursorStore,
        clock: Clock = utc_now,
        *,
        sensor_filter: WorkspaceFileFilter,
        limit: Path,
    ) -> None:
        super().__init__(config, emitter, cursors, clock)
        self.filter = sensor_filter
        self.limit = limit  # the folder the watched path must stay in (the tenant's folder)
        self.state_dirs = tuple((self.cursors.worker_dir / name).resolve() for name in STATE_DIRS)
        self.folder()  # refuse a bad path at construction

    def folder(self) -> Path:
        folder = confined_path(self.cursors.worker_dir, self.filter.path, self.limit, "filter.path")
        real = folder.resolve()
        for state in self.state_dirs:
            if real == state or state in real.parents:
                raise SensorConfigError(f"filter.path {self.filter.path!r} is runtime state ({state.name}/)")
        return folder

    def scope(self) -> str:
        return f"path={self.filter.path}"

    def observe(self, previous: Cursor | None, seq: int) -> Observation:
        folder = self.folder()
        if not folder.is_dir():
            raise SensorPollError(f"watched folder {self.filter.path!r} does not exist under the worker folder")
        current = scan_folder(folder, skip=self.state_dirs, max_files=self.filter.max_files)
        state = {"files": {path: list(st) for path, st in sorted(current.items())}}
        if previous is None and self.filter.on_first_poll == "baseline":
            return Observation((), state)
        old = _files(previous.state) if previous is not None else {}
        prefix = "" if self.filter.path == "." else f"{self.filter.path}/"
        facts = tuple(
            _fact(change, path, st, before, seq, prefix) for change, path, st, before in diff_files(old, current)
        )
        return Observation(facts, state)

    async def watch(self, trigger: Callable[[], None], stop: asyncio.Event) -> None:
        if not self.filter.push:
            return
        folder = await asyncio.to_thread(self.folder)
        skip = tuple(str(state) + os.sep for state in self.state_dirs)

        def wanted(change: Change, path: str) -> bool:
            rel = os.path.relpath(path, folder)
            return not (path + os.sep).startswith(skip) and not any(p.startswith(".") for p in Path(rel).parts)

        async for _ in awatch(
            folder, watch_filter=wanted, stop_event=stop, debounce=PUSH_DEBOUNCE_MS, step=20, recursive=True
        ):
            trigger()


def scan_folder(folder: Path, *, skip: tuple[Path, ...] = (), max_files: int = 20_000) -> dict[str, FileState]:
    """`{posix path relative to folder: (mtime_ns, size)}` of the regular files under `folder`,
    leaving out hidden entries, symlinks and the (resolved) folders in `skip`."""
    found: dict[str, FileState] = {}
    for rel, st in _walk(folder, "", frozenset(skip)):
        found[rel] = st
        if len(found) > max_files:
            raise SensorPollError(
                f"more than {max_files} files under the watched folder: narrow filter.path or raise filter.max_files"
            )
    return found


def _walk(folder: Path, prefix: str, skip: frozenset[Path]) -> Iterator[tuple[str, FileState]]:
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:  # removed while walking
        return
    for entry in sorted(entries, key=lambda e: e.name):
        if entry.name.startswith(".") or entry.is_symlink():
            continue
        rel = f"{prefix}{entry.name}"
        try:
            if entry.is_dir(follow_symlinks=False):
                if Path(entry.path).resolve() not in skip:
                    yield from _walk(Path(entry.path), f"{rel}/", skip)
            elif entry.is_file(follow_symlinks=False):
                st = entry.stat(follow_symlinks=False)
                yield rel, (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            continue


def diff_files(
    old: Mapping[str, FileState], new: Mapping[str, FileState]
) -> Iterator[tuple[str, str, FileState, FileState | None]]:
    """(change, path, state, state before) in path order; for a deletion, `state` is the last one known."""
    for path in sorted(old.keys() | new.keys()):
        before, after = old.get(path), new.get(path)
        if before is None and after is not None:
            yield "created", path, after, None
        elif after is None and before is not None:
            yield "deleted", path, before, before
        elif before is not None and after is not None and before != after:
            yield "modified", path, after, before


def _fact(change: str, path: str, st: FileState, before: FileState | None, seq: int, prefix: str) -> Fact:
    mtime_ns, size = st
    payload: dict[str, Any] = {
        "change": change,
        "path": path,
        "worker_path": f"{prefix}{path}",
        "size": size,
        "mtime_ns": mtime_ns,
        "mtime": datetime.fromtimestamp(mtime_ns / 1e9, UTC).isoformat(),
    }
    if change == "modified" and before is not None:
        payload["previous_size"] = before[1]
        payload["previous_mtime_ns"] = before[0]
    return Fact(f"file.{change}", payload, f"{seq}:{change}:{path}:{mtime_ns}:{size}")


def _files(state: Mapping[str, Any]) -> dict[str, FileState]:
    files = state.get("files")
    if not isinstance(files, Mapping):
        return {}
    return {str(p): (int(v[0]), int(v[1])) for p, v in files.items() if isinstance(v, list | tuple) and len(v) == 2}
