"""`tenants/{tenant}/auth/api_keys.json`: its schema, reading it, and writing it atomically.

Writers hold an exclusive `flock` on a sibling lock file for the whole read-modify-write, and
replace the file through a synced temp file, so readers (which take no lock) always see a
whole file and concurrent writers in any process never lose each other's keys.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Annotated

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from genworker.auth.errors import KeyFileError
from genworker.auth.keys import HASH_PATTERN, KEY_ID_PATTERN
from genworker.fsutil import write_atomic

__all__ = ["KEY_FILE", "SCHEMA_VERSION", "KeyRecord", "locked", "read_key_file", "write_key_file"]

SCHEMA_VERSION = 1
KEY_FILE = Path("auth") / "api_keys.json"
_LOCK_NAME = ".api_keys.lock"


class KeyRecord(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    key_id: Annotated[str, Field(pattern=rf"^{KEY_ID_PATTERN}$")]
    hash: Annotated[str, Field(pattern=rf"^{HASH_PATTERN}$")]
    workers: tuple[str, ...] | None
    label: str = ""
    created_at: AwareDatetime
    revoked_at: AwareDatetime | None = None


class _KeyFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int
    keys: tuple[KeyRecord, ...] = ()


def read_key_file(path: Path) -> tuple[KeyRecord, ...]:
    """The records in `path`; none when it does not exist. Raises KeyFileError naming the file."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return ()
    except OSError as exc:
        raise KeyFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise KeyFileError(f"{path}: not valid JSON: {exc}") from None
    version = data.get("schema_version") if isinstance(data, dict) else None
    if version != SCHEMA_VERSION:
        raise KeyFileError(f"{path}: schema_version {version!r} is not supported (this build reads {SCHEMA_VERSION})")
    try:
        records = _KeyFile.model_validate(data).keys
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise KeyFileError(f"{path}: {where}: {first['msg']} ({exc.error_count()} errors)") from None
    seen: set[str] = set()
    for record in records:
        if record.key_id in seen:
            raise KeyFileError(f"{path}: key_id {record.key_id!r} appears twice")
        seen.add(record.key_id)
    return records


def write_key_file(path: Path, records: Sequence[KeyRecord]) -> None:
    """Replace `path` atomically (temp file, fsync, rename, fsync of the folder). Call under `locked`."""
    body = _KeyFile(schema_version=SCHEMA_VERSION, keys=tuple(records)).model_dump_json(indent=2) + "\n"
    write_atomic(path, body.encode("utf-8"))  # created 0600


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Exclusive lock for a read-modify-write of `path`, across threads and processes."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path.parent / _LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # also releases the lock
