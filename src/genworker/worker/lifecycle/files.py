"""The file edge of the task lifecycle: JSON through pydantic TypeAdapters with a schema_version
check, atomic replace, exclusive create and per-file locks. Blocking; callers run it off the loop."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError

from genworker.worker.lifecycle.errors import TaskFileError

__all__ = ["create_exclusive", "decode", "encode", "file_lock", "move_file", "read_file", "write_atomic"]

T = TypeVar("T")


def encode(adapter: TypeAdapter[T], value: T) -> bytes:
    return adapter.dump_json(value, indent=2) + b"\n"


def decode(adapter: TypeAdapter[T], path: Path, data: bytes, supported: int) -> T:
    """Parse `data` read from `path`; every problem is a TaskFileError naming the file."""
    try:
        raw: Any = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TaskFileError(path, f"not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise TaskFileError(path, f"expected a JSON object, got {type(raw).__name__}")
    version = raw.get("schema_version")
    if version is None:
        raise TaskFileError(path, f"schema_version is missing (this runtime reads schema_version {supported})")
    if type(version) is not int or version != supported:
        raise TaskFileError(
            path, f"schema_version {version!r} is not supported (this runtime reads schema_version {supported})"
        )
    try:
        return adapter.validate_python(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in err['loc']) or '(root)'}: {err['msg']}" for err in exc.errors()
        )
        raise TaskFileError(path, f"invalid fields: {problems}") from None


def read_file(adapter: TypeAdapter[T], path: Path, supported: int) -> T:
    """Read and decode `path`; FileNotFoundError passes through."""
    return decode(adapter, path, path.read_bytes(), supported)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _temp_copy(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    return Path(name)


def write_atomic(path: Path, data: bytes) -> None:
    """Replace `path` with `data`: readers see the old file or the new one, never a partial one."""
    tmp = _temp_copy(path, data)
    try:
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def create_exclusive(path: Path, data: bytes) -> bool:
    """Create `path` with `data` only if it does not exist; False when it already does.

    The complete file is linked into place (`link` fails on an existing name, like O_EXCL), so a
    reader never sees it half-written and two racing creators cannot both win.
    """
    tmp = _temp_copy(path, data)
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(path.parent)
    return True


def move_file(source: Path, target: Path) -> bool:
    """Move `source` to `target` atomically (same filesystem). When `source` is gone, True if
    `target` exists (moved before), False if neither does."""
    if not source.exists():
        return target.exists()
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        source.replace(target)
    except FileNotFoundError:
        return target.exists()
    _fsync_dir(target.parent)
    _fsync_dir(source.parent)
    return True


@contextlib.contextmanager
def file_lock(lock_path: Path) -> Iterator[None]:
    """An exclusive `flock` on `lock_path`: serialises threads and processes sharing the workspace."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # also releases the flock
