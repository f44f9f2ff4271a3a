"""File tools confined to the worker's own folder (`ToolScope.worker_dir`).

Every path is relative to the worker folder; absolute paths, `..` components, backslashes and
NUL are refused, and the path, with symlinks resolved, must stay inside the folder.
Reads may look anywhere in the folder except CHANNEL_CREDENTIALS.json; writes go only under
`files/`: the definition files (PERSONA.md, duties/, goals/, rules/ ...) change through their
own aggregates, never through a raw write. Blocking I/O runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Iterator
from fnmatch import fnmatchcase
from pathlib import Path, PurePosixPath
from typing import Literal

from genworker.fsutil import write_atomic as replace_file
from genworker.ids import is_inside
from genworker.tools.base import Effect, RiskLevel, ToolResult
from genworker.tools.context import ToolContext
from genworker.tools.tool import Tool, function_tool

__all__ = [
    "MAX_READ_BYTES",
    "MAX_READ_LINES",
    "MAX_WRITE_BYTES",
    "PROTECTED_NAMES",
    "WRITE_ROOT",
    "FileToolError",
    "confine",
    "file_list",
    "file_read",
    "file_search",
    "file_tools",
    "file_write",
    "list_dir",
    "read_lines",
    "search_files",
    "write_atomic",
]

WRITE_ROOT = "files"
PROTECTED_NAMES = frozenset({"channel_credentials.json"})  # never read, listed or searched (lower case)
MAX_READ_BYTES = 256 * 1024
MAX_READ_LINES = 2000
MAX_WRITE_BYTES = 1024 * 1024
MAX_APPEND_TARGET_BYTES = 4 * 1024 * 1024
MAX_LIST_ENTRIES = 500
MAX_SEARCH_HITS = 100
MAX_SEARCH_FILES = 5000
MAX_SEARCH_FILE_BYTES = 2 * 1024 * 1024
_BINARY_PROBE = 8192


class FileToolError(ValueError):
    """A refused or failed file operation; the message is fed back to the model."""


def confine(worker_dir: Path, raw: str, *, write: bool = False) -> Path:
    """The real path for `raw` inside `worker_dir`, or FileToolError saying why not."""
    root = worker_dir.resolve()
    if not root.is_dir():
        raise FileToolError("the worker folder does not exist")
    if not isinstance(raw, str) or not raw.strip():
        raise FileToolError("path must be a non-empty relative path")
    if "\x00" in raw:
        raise FileToolError("path contains a NUL character")
    if "\\" in raw:
        raise FileToolError(f"path {raw!r}: use '/' as the separator")
    pure = PurePosixPath(raw)
    if pure.is_absolute() or (len(raw) > 1 and raw[1] == ":"):
        raise FileToolError(f"path {raw!r} is absolute; use a path relative to the worker folder")
    if ".." in pure.parts:
        raise FileToolError(f"path {raw!r} contains '..'; paths must stay inside the worker folder")
    real = (root / pure).resolve()
    if not is_inside(root, real):
        raise FileToolError(f"path {raw!r} leads outside the worker folder")
    rel = real.relative_to(root)
    if any(part.lower() in PROTECTED_NAMES for part in (*pure.parts, *rel.parts)):
        raise FileToolError(f"path {raw!r} is protected")
    if write and (not rel.parts or rel.parts[0] != WRITE_ROOT or len(rel.parts) < 2):
        raise FileToolError(f"path {raw!r}: files may only be written under {WRITE_ROOT}/")
    return real


def _display(worker_dir: Path, path: Path) -> str:
    return path.relative_to(worker_dir.resolve()).as_posix() or "."


def _open_regular(path: Path) -> int:
    """An fd for a regular file; O_NOFOLLOW because `path` is already resolved (a symlink now is a race)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise FileToolError("no such file") from None
    except IsADirectoryError:
        raise FileToolError("is a directory; use file_list") from None
    except OSError as exc:
        raise FileToolError(f"cannot open: {exc.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise FileToolError("is a directory; use file_list" if path.is_dir() else "not a regular file")
    return fd


def read_lines(worker_dir: Path, raw: str, offset: int, limit: int) -> tuple[str, int, bool]:
    """(text of lines [offset, offset+limit), index after the last line returned, truncated?)."""
    if offset < 0:
        raise FileToolError("offset must be >= 0")
    if not 1 <= limit <= MAX_READ_LINES:
        raise FileToolError(f"limit must be between 1 and {MAX_READ_LINES}")
    path = confine(worker_dir, raw)
    with os.fdopen(_open_regular(path), "rb") as fh:
        if b"\x00" in fh.read(_BINARY_PROBE):
            raise FileToolError(f"{raw} looks like a binary file")
        fh.seek(0)
        chunks: list[bytes] = []
        used = line_no = 0
        truncated = False
        while line := fh.readline(MAX_READ_BYTES):
            if line_no >= offset:
                if len(chunks) >= limit or used + len(line) > MAX_READ_BYTES:
                    truncated = True
                    break
                chunks.append(line)
                used += len(line)
            line_no += 1
    return b"".join(chunks).decode("utf-8", errors="replace"), offset + len(chunks), truncated


def write_atomic(worker_dir: Path, raw: str, content: str, mode: str) -> tuple[str, int]:
    data = content.encode("utf-8")
    if len(data) > MAX_WRITE_BYTES:
        raise FileToolError(f"content is {len(data)} bytes; the limit is {MAX_WRITE_BYTES}")
    path = confine(worker_dir, raw, write=True)
    if path.is_dir():
        raise FileToolError(f"{raw} is a directory")
    path.parent.mkdir(parents=True, exist_ok=True)
    if not is_inside(worker_dir, path.parent):
        raise FileToolError(f"path {raw!r} leads outside the worker folder")
    if mode == "append" and path.exists():
        with os.fdopen(_open_regular(path), "rb") as fh:
            old = fh.read(MAX_APPEND_TARGET_BYTES + 1)
        if len(old) > MAX_APPEND_TARGET_BYTES:
            raise FileToolError(f"{raw} is over {MAX_APPEND_TARGET_BYTES} bytes; cannot append")
        data = old + data
    replace_file(path, data, mode=0o644)
    return _display(worker_dir, path), len(data)


def _shown(name: str) -> bool:
    return not name.startswith(".") and name.lower() not in PROTECTED_NAMES


def _check_glob(pattern: str) -> None:
    pure = PurePosixPath(pattern)
    if "\x00" in pattern or pure.is_absolute() or ".." in pure.parts:
        raise FileToolError(f"pattern {pattern!r} must be a relative glob without '..'")


def _matches(rel: PurePosixPath, pattern: str) -> bool:
    return fnmatchcase(rel.as_posix() if "/" in pattern else rel.name, pattern)


def _walk(root: Path, base: Path) -> Iterator[tuple[Path, bool]]:
    """(path, is_dir) below `base`, sorted, skipping hidden and protected names and anything
    whose real path leaves `root`; symlinked folders are listed but not entered."""
    for folder, dirs, files in os.walk(base, followlinks=False):
        dirs[:] = sorted(d for d in dirs if _shown(d))
        here = Path(folder)
        entries = [(here / d, True) for d in dirs] + [(here / f, False) for f in sorted(files) if _shown(f)]
        for path, is_dir in entries:
            if is_inside(root, path):
                yield path, is_dir


def _folder(worker_dir: Path, raw: str) -> Path:
    base = confine(worker_dir, raw)
    if not base.is_dir():
        raise FileToolError(f"{raw} is not a folder")
    return base


def list_dir(worker_dir: Path, raw: str, pattern: str | None) -> list[str]:
    """Paths relative to the worker folder (folders end in '/'): children of `raw`, or with a
    pattern every path below it that matches."""
    root, base = worker_dir.resolve(), _folder(worker_dir, raw)
    if pattern is None:
        found = ((p, p.is_dir()) for p in sorted(base.iterdir()) if _shown(p.name) and is_inside(root, p))
    else:
        _check_glob(pattern)
        found = ((p, d) for p, d in _walk(root, base) if _matches(PurePosixPath(p.relative_to(base)), pattern))
    lines: list[str] = []
    for path, is_dir in found:
        if len(lines) == MAX_LIST_ENTRIES:
            lines.append(f"[more than {MAX_LIST_ENTRIES} entries; narrow the path or pattern]")
            break
        rel = path.relative_to(root).as_posix()
        lines.append(f"{rel}/" if is_dir else f"{rel} ({path.stat().st_size} bytes)")
    return lines


def search_files(worker_dir: Path, raw: str, query: str, glob: str | None) -> list[str]:
    """`path:line: text` for lines containing `query` (case-insensitive), capped."""
    if not query or len(query) > 500:
        raise FileToolError("query must be 1 to 500 characters")
    if glob is not None:
        _check_glob(glob)
    root, base = worker_dir.resolve(), _folder(worker_dir, raw)
    needle = query.casefold()
    hits: list[str] = []
    scanned = 0
    for path, is_dir in _walk(root, base):
        if is_dir or (glob is not None and not _matches(PurePosixPath(path.relative_to(base)), glob)):
            continue
        scanned += 1
        if scanned > MAX_SEARCH_FILES:
            hits.append(f"[stopped after {MAX_SEARCH_FILES} files; narrow the path or glob]")
            break
        if _grep(path, path.relative_to(root).as_posix(), needle, hits):
            hits.append(f"[stopped at {MAX_SEARCH_HITS} matches]")
            break
    return hits


def _grep(path: Path, shown: str, needle: str, hits: list[str]) -> bool:
    """Append matches of one file to `hits`; True when the cap is reached."""
    try:
        fd = _open_regular(path)
    except FileToolError:
        return False
    with os.fdopen(fd, "rb") as fh:
        if os.fstat(fh.fileno()).st_size > MAX_SEARCH_FILE_BYTES or b"\x00" in fh.read(_BINARY_PROBE):
            return False
        fh.seek(0)
        for number, line in enumerate(fh, start=1):
            text = line.decode("utf-8", errors="replace")
            if needle in text.casefold():
                hits.append(f"{shown}:{number}: {text.strip()[:200]}")
                if len(hits) >= MAX_SEARCH_HITS:
                    return True
    return False


@function_tool(effect=Effect.READ)
async def file_read(ctx: ToolContext, path: str, offset: int = 0, limit: int = MAX_READ_LINES) -> ToolResult:
    """Read a text file in your worker folder, by lines.

    Args:
        path: Path relative to your worker folder, e.g. files/report.md.
        offset: Number of lines to skip from the start.
        limit: Maximum number of lines to return (at most 2000).
    """
    text, end, truncated = await asyncio.to_thread(read_lines, ctx.scope.worker_dir, path, offset, limit)
    if truncated:
        text += f"\n[truncated: call file_read with offset={end} to continue]"
    return ToolResult(text, data={"path": path, "offset": offset, "next_offset": end, "truncated": truncated})


@function_tool(effect=Effect.WRITE, risk_level=RiskLevel.MEDIUM)
async def file_write(
    ctx: ToolContext, path: str, content: str, mode: Literal["overwrite", "append"] = "overwrite"
) -> ToolResult:
    """Write a text file under files/ in your worker folder (created if missing, replaced atomically).

    Args:
        path: Path relative to your worker folder; must start with files/.
        content: The text to write.
        mode: overwrite replaces the file; append adds to its end.
    """
    if mode not in ("overwrite", "append"):
        raise FileToolError("mode must be overwrite or append")
    shown, size = await asyncio.to_thread(write_atomic, ctx.scope.worker_dir, path, content, mode)
    return ToolResult(f"wrote {shown} ({size} bytes)", data={"path": shown, "bytes": size})


@function_tool(effect=Effect.READ)
async def file_list(ctx: ToolContext, path: str = ".", pattern: str | None = None) -> ToolResult:
    """List a folder in your worker folder. With a pattern, search below it for matching paths.

    Args:
        path: Folder relative to your worker folder.
        pattern: Optional glob such as *.md (matches names) or duties/*.md (matches relative paths).
    """
    lines = await asyncio.to_thread(list_dir, ctx.scope.worker_dir, path, pattern)
    return ToolResult("\n".join(lines) if lines else "(empty)", data=lines)


@function_tool(effect=Effect.READ)
async def file_search(ctx: ToolContext, query: str, path: str = ".", glob: str | None = None) -> ToolResult:
    """Search text files in your worker folder for a plain text (case-insensitive); results are capped.

    Args:
        query: The text to look for.
        path: Folder to search, relative to your worker folder.
        glob: Optional glob limiting which files are searched, e.g. *.md.
    """
    hits = await asyncio.to_thread(search_files, ctx.scope.worker_dir, path, query, glob)
    return ToolResult("\n".join(hits) if hits else f"no matches for {query!r}", data=hits)


def file_tools() -> list[Tool]:
    return [file_read, file_write, file_list, file_search]
