"""The heartbeat's state files under ``tenants/{t}/workers/{w}/runtime/``: one JSON document each,
read through a pydantic TypeAdapter after a schema_version check, replaced atomically under a lock.
Blocking: call from a worker thread."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar, cast

from pydantic import TypeAdapter, ValidationError

from genworker.autonomy.heartbeat.errors import HeartbeatFileError
from genworker.fsutil import Signature, file_signature, write_atomic
from genworker.ids import safe_join, validate_id

__all__ = ["locked", "read_document", "runtime_file", "update_document", "write_atomic"]

T = TypeVar("T")


def runtime_file(workspace: Path, tenant_id: str, worker_id: str, name: str) -> Path:
    """`{workspace}/tenants/{t}/workers/{w}/runtime/{name}` (ids validated, stays in the workspace)."""
    folder = safe_join(
        workspace, "tenants", validate_id(tenant_id, "tenant id"), "workers", validate_id(worker_id, "worker id")
    )
    return folder / "runtime" / name


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Exclusive across threads and processes sharing the workspace (an flock on `.{name}.lock` beside it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # also releases the lock


DocumentCache = dict[Path, tuple[Signature, Any]]
"""Decoded documents by path and file signature (inode, mtime, ctime, size): every atomic replace
makes a new inode, so a document another process rewrote is read again. The values are immutable."""


def read_document(adapter: TypeAdapter[T], path: Path, supported: int, cache: DocumentCache | None = None) -> T | None:
    """The decoded file, None when it does not exist; HeartbeatFileError when it cannot be used.
    With `cache`, a file unchanged since it was last decoded is not parsed again."""
    if cache is not None:
        signature = file_signature(path)
        cached = cache.get(path)
        if signature is None:
            cache.pop(path, None)
            return None
        if cached is not None and cached[0] == signature:
            return cast(T, cached[1])
        document = read_document(adapter, path, supported)
        cache[path] = (signature, document)
        return document
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise HeartbeatFileError(path, f"cannot be read: {exc}") from None
    try:
        raw: Any = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HeartbeatFileError(path, f"not valid JSON ({exc})") from None
    version = raw.get("schema_version") if isinstance(raw, dict) else None
    if type(version) is not int or version != supported:
        raise HeartbeatFileError(
            path, f"unsupported schema_version {version!r} (this runtime reads schema_version {supported})"
        )
    try:
        return adapter.validate_python(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(root)'}: {err['msg']}"
            for err in exc.errors(include_url=False, include_input=False)[:5]
        )
        raise HeartbeatFileError(path, f"invalid fields: {problems}") from None


def update_document(
    adapter: TypeAdapter[T],
    path: Path,
    supported: int,
    change: Callable[[T | None], T | None],
    cache: DocumentCache | None = None,
) -> T | None:
    """Read, apply `change` (None: leave the file as it is), write atomically, all under the file's lock."""
    with locked(path):
        current = read_document(adapter, path, supported, cache)
        new = change(current)
        if new is not None and new is not current:
            write_atomic(path, adapter.dump_json(new, indent=2) + b"\n")
            if cache is not None:
                signature = file_signature(path)
                if signature is not None:
                    cache[path] = (signature, new)
        return new if new is not None else current
