"""The file edge of the task lifecycle: JSON through pydantic TypeAdapters with a schema_version
check, atomic replace, exclusive create and per-file locks. Blocking; callers run it off the loop."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError

from genworker.fsutil import create_exclusive, file_lock, move_file, write_atomic
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
