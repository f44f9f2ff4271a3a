"""The workspace_file sensor: files created, modified or deleted under a folder of the worker (or
several: upstream's `watch_paths`, where paths are reported relative to the worker folder).

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
        self.folders()  # refuse a bad path at construction

    @property
    def _field(self) -> str:
        return "filter.watch_paths" if self.filter.watch_paths else "filter.path"

    def folders(self) -> list[tuple[str, Path]]:
        """(the path as written, the folder) for each watched folder."""
        found = []
        for rel in self.filter.folders:
            folder = confined_path(self.cursors.worker_dir, rel, self.limit, self._field)
            real = folder.resolve()
            for state in self.state_dirs:
                if real == state or state in real.parents:
                    raise SensorConfigError(f"{self._field} {rel!r} is runtime state ({state.name}/)")
            found.append((rel, folder))
        return found

    def scope(self) -> str:
        if self.filter.watch_paths:
            return "paths=" + ",".join(self.filter.watch_paths)
        return f"path={self.filter.path}"

    def observe(self, previous: Cursor | None, seq: int) -> Observation:
        current: dict[str, FileState] = {}
        for rel, folder in self.folders():
            if not folder.is_dir():
                raise SensorPollError(f"watched folder {rel!r} does not exist under the worker folder")
            files = scan_folder(folder, skip=self.state_dirs, max_files=self.filter.max_files)
            within = "" if not self.filter.watch_paths or rel == "." else f"{rel}/"  # several: worker-relative
            current.update((f"{within}{path}", st) for path, st in files.items())
            if len(current) > self.filter.max_files:
                raise SensorPollError(f"more than {self.filter.max_files} files in the watched folders")
        state = {"files": {path: list(st) for path, st in sorted(current.items())}}
        if previous is None and self.filter.on_first_poll == "baseline":
            return Observation((), state)
        old = _files(previous.state) if previous is not None else {}
        prefix = "" if self.filter.watch_paths or self.filter.path == "." else f"{self.filter.path}/"
        facts = tuple(
            _fact(change, path, st, before, seq, prefix) for change, path, st, before in diff_files(old, current)
        )
        return Observation(facts, state)

    async def watch(self, trigger: Callable[[], None], stop: asyncio.Event) -> None:
        if not self.filter.push:
            return
        folders = [folder for _, folder in await asyncio.to_thread(self.folders)]
        skip = tuple(str(state) + os.sep for state in self.state_dirs)

        def wanted(change: Change, path: str) -> bool:
            inside = next((f for f in folders if Path(path).is_relative_to(f)), folders[0])
            rel = os.path.relpath(path, inside)
            return not (path + os.sep).startswith(skip) and not any(p.startswith(".") for p in Path(rel).parts)

        async for _ in awatch(
            *folders, watch_filter=wanted, stop_event=stop, debounce=PUSH_DEBOUNCE_MS, step=20, recursive=True
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
