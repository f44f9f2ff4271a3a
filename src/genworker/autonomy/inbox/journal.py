"""The file inbox's write-ahead journal: ``runtime/inbox/journal.jsonl``, one line per accepted item.

A write is acknowledged once its line is on disk (one `write` and one `fdatasync` for a whole batch
of concurrent writes); the file store turns the lines into item files later, in the background or
before any read, and then removes the journal. The first line is a header,
``{"schema_version": 1, "journal_id": "<hex>"}``; every other line is one item as `encode_item`
writes it. A last line without its newline is a write that never completed, so never acknowledged:
it is ignored. The header's `journal_id` tells a process whether the journal it sees is the one it
has been appending to (see `JournalMark`).
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from genworker.autonomy.inbox.errors import InboxCorruptError, InboxSchemaError
from genworker.fsutil import fsync_dir

__all__ = ["JOURNAL_NAME", "SCHEMA_VERSION", "JournalMark", "append", "mark_of", "read_lines", "remove", "write_all"]

SCHEMA_VERSION: Final = 1
JOURNAL_NAME: Final = "journal.jsonl"
_HEADER_MAX: Final = 200


@dataclass(frozen=True, slots=True)
class JournalMark:
    """Which journal file, and how far it goes: equal marks mean no one else has touched it."""

    journal_id: str
    size: int


def mark_of(path: Path) -> JournalMark | None:
    """The journal's mark, None when there is no journal (or only a header that never reached the disk)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        size = os.fstat(fd).st_size
        head = os.pread(fd, _HEADER_MAX, 0)
    finally:
        os.close(fd)
    line, newline, _ = head.partition(b"\n")
    if not newline:
        return None
    return JournalMark(_journal_id(line, path), size)


def append(path: Path, mark: JournalMark | None, lines: list[bytes]) -> JournalMark:
    """Append `lines` (each without its newline) and fsync; `mark` is the caller's mark of the file
    (None: there is none, create it). On failure the file is cut back to `mark`."""
    data = b"".join(line + b"\n" for line in lines)
    if mark is None:
        journal_id = uuid.uuid4().hex
        header = json.dumps({"schema_version": SCHEMA_VERSION, "journal_id": journal_id}).encode("ascii") + b"\n"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            write_all(fd, header + data, 0)
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(path.parent)
        return JournalMark(journal_id, len(header) + len(data))
    fd = os.open(path, os.O_WRONLY)
    try:
        write_all(fd, data, mark.size)
        os.fdatasync(fd)
    except BaseException:
        os.ftruncate(fd, mark.size)
        raise
    finally:
        os.close(fd)
    return JournalMark(mark.journal_id, mark.size + len(data))


def read_lines(path: Path) -> list[bytes] | None:
    """The complete item lines of the journal; None when there is no journal."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    lines = raw.split(b"\n")
    complete = lines[:-1]  # the last part is b"" or a write that never completed
    if not complete:
        return []
    _journal_id(complete[0], path)
    return [line for line in complete[1:] if line]


def remove(path: Path) -> None:
    """Drop the journal once every item in it is a durable file."""
    try:
        path.unlink()
    except FileNotFoundError:
        return
    fsync_dir(path.parent)


def _journal_id(header: bytes, path: Path) -> str:
    try:
        data = json.loads(header)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InboxCorruptError(str(path), f"the journal header is not valid JSON ({exc})") from None
    version = data.get("schema_version") if isinstance(data, dict) else None
    if type(version) is not int or version != SCHEMA_VERSION:
        raise InboxSchemaError(str(path), version, SCHEMA_VERSION)
    journal_id = data.get("journal_id")
    if not isinstance(journal_id, str) or not journal_id:
        raise InboxCorruptError(str(path), "the journal header has no journal_id")
    return journal_id


def write_all(fd: int, data: bytes, offset: int) -> None:
    """`data` at `offset` of `fd`, however many `pwrite` calls it takes."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written
