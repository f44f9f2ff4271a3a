"""Sensor cursors: what each sensor has already reported, one file per sensor.

`tenants/{t}/workers/{w}/sensor_snapshots/{sensor_key}.json`, written atomically (temp file in the
same folder, fsync, rename, fsync of the folder). A sensor moves its cursor only after every fact it
observed is in the inbox, so a crash in between repeats facts (dropped by their dedupe keys) and
never skips one. The hot-reload watcher ignores this folder. Blocking: call from a thread.

A poll holds `.{sensor_key}.lock` in the same folder (`hold`: an exclusive `flock`, not waited
for) from reading the cursor to saving the next one, so two runtime processes sharing the
workspace never poll one sensor from the same cursor: when a worker's autonomy moves, the new
owner's poll starts where the old owner's last poll ended (docs/deploy.md).

Upstream genworker writes its own snapshots to the same place (`{"seen_ids": ...}`,
`{"file_snapshot": ...}`, no `schema_version`): such a file reads as "no cursor" (said once), and
is moved aside to `{sensor_key}.upstream.json`, never overwritten, when the first cursor is saved.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, ValidationError

from genworker.autonomy.sensing.errors import CursorError
from genworker.ids import safe_join

__all__ = ["CURSOR_SCHEMA_VERSION", "SNAPSHOT_DIR", "Cursor", "CursorStore"]

log = logging.getLogger("genworker.sensing")

CURSOR_SCHEMA_VERSION = 1
SNAPSHOT_DIR = "sensor_snapshots"
_FOREIGN_SAID: set[Path] = set()


@dataclass(frozen=True, slots=True)
class Cursor:
    sensor_key: str
    source_type: str
    scope: str  # what was watched (folder, repo, mailbox); a cursor of another scope is not reused
    seq: int  # number of the poll that wrote it (0: the first)
    state: Mapping[str, Any]
    updated_at: datetime


class _CursorFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int
    sensor_key: str
    source_type: str
    scope: str
    seq: int
    updated_at: AwareDatetime
    state: dict[str, Any]


class CursorStore:
    """The cursors of one worker's sensors."""

    def __init__(self, worker_dir: Path) -> None:
        self.worker_dir = worker_dir
        self.folder = worker_dir / SNAPSHOT_DIR

    def path(self, sensor_key: str) -> Path:
        return safe_join(self.folder, sensor_key, kind="sensor key").with_name(f"{sensor_key}.json")

    def hold(self, sensor_key: str) -> int | None:
        """Take the sensor's poll lock without waiting: its file descriptor (`os.close` it to let go),
        or None while another poll holds it (in this process or another)."""
        path = self.path(sensor_key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path.with_name(f".{sensor_key}.lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        return fd

    def load(self, sensor_key: str) -> Cursor | None:
        """The stored cursor, None when there is none; CursorError when it is unreadable."""
        path = self.path(sensor_key)
        try:
            raw = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise CursorError(f"cannot read {path}: {exc}") from None
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise CursorError(f"{path} is not valid JSON ({exc}); delete it to start this sensor over") from None
        if _foreign(data):
            if path not in _FOREIGN_SAID:
                _FOREIGN_SAID.add(path)
                log.warning("%s holds another runtime's snapshot (no schema_version): the sensor starts over", path)
            return None
        version = data.get("schema_version") if isinstance(data, dict) else None
        if version != CURSOR_SCHEMA_VERSION:
            raise CursorError(
                f"{path}: unsupported schema_version {version!r} (this runtime reads {CURSOR_SCHEMA_VERSION})"
            )
        try:
            parsed = _CursorFile.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ()))
            raise CursorError(f"{path}: {where}: {first.get('msg', 'invalid')}") from None
        if parsed.sensor_key != sensor_key:
            raise CursorError(f"{path} belongs to sensor {parsed.sensor_key!r}, not {sensor_key!r}")
        return Cursor(
            sensor_key=parsed.sensor_key,
            source_type=parsed.source_type,
            scope=parsed.scope,
            seq=parsed.seq,
            state=MappingProxyType(parsed.state),
            updated_at=parsed.updated_at,
        )

    def save(self, cursor: Cursor) -> None:
        if cursor.updated_at.tzinfo is None:
            raise ValueError("cursor.updated_at must be timezone-aware")
        body = _CursorFile(
            schema_version=CURSOR_SCHEMA_VERSION,
            sensor_key=cursor.sensor_key,
            source_type=cursor.source_type,
            scope=cursor.scope,
            seq=cursor.seq,
            updated_at=cursor.updated_at,
            state=_plain(cursor.state),
        ).model_dump(mode="json")
        path = self.path(cursor.sensor_key)
        _keep_foreign(path)
        _write_atomic(path, json.dumps(body, indent=1, sort_keys=True) + "\n")


def _foreign(data: Any) -> bool:
    """A JSON object without our `schema_version`: upstream's snapshot (`seen_ids`, `file_snapshot` ...)."""
    return isinstance(data, dict) and "schema_version" not in data


def _keep_foreign(path: Path) -> None:
    """Move another runtime's snapshot aside (`{key}.upstream.json`) instead of overwriting it."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if _foreign(data):
        aside = path.with_name(f"{path.stem}.upstream.json")
        n = 1
        while aside.exists():
            n += 1
            aside = path.with_name(f"{path.stem}.upstream-{n}.json")
        path.replace(aside)
        log.info("%s: the other runtime's snapshot is kept as %s", path, aside.name)


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        Path(tmp).replace(path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            Path(tmp).unlink()
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
