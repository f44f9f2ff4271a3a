"""Durable file primitives every store uses: atomic replace, exclusive create, move, flock.

A write is complete when the function returns: data fsynced, renamed into place, and the
folder fsynced so the rename itself survives a power loss. `durable=False` does the same
operation without the fsyncs, for a caller that makes it durable another way (`write_journal.py`).

On Linux a file that already exists is replaced by exchanging it with the new one
(`renameat2(RENAME_EXCHANGE)`) and then deleting the old one under the temporary name. Readers
see the same thing as with a rename over it, but ext4 does not force the new file's blocks to be
allocated and written out on the spot as it does for a rename over an existing file
(`auto_da_alloc`), so a replace costs much less.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import itertools
import os
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = [
    "LOCK_STRIPES",
    "Signature",
    "create_exclusive",
    "file_lock",
    "file_signature",
    "fsync_dir",
    "move_file",
    "remove_file",
    "striped_lock",
    "write_atomic",
]


Signature = tuple[int, int, int, int]


def file_signature(path: Path) -> Signature | None:
    """(inode, mtime, ctime, size), or None when there is no file: every atomic replace makes a new
    inode, so a cache keyed by it reads again a file another process or a person rewrote."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_TEMP_NUMBERS = itertools.count()


def _temp_file(path: Path) -> tuple[int, Path]:
    """A new 0600 file next to `path`, named after it (cheaper than `tempfile.mkstemp`)."""
    while True:
        name = path.parent / f".{path.name}.{os.getpid()}-{next(_TEMP_NUMBERS)}.tmp"
        try:
            return _open_in(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL), name
        except FileExistsError:  # left by an earlier process with the same pid
            continue


def _open_in(path: Path, flags: int) -> int:
    """`os.open(path, flags, 0o600)`, making the folder only when it is missing (the usual case
    costs no `mkdir`)."""
    try:
        return os.open(path, flags, 0o600)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, flags, 0o600)


def _temp_copy(path: Path, data: bytes, mode: int | None, durable: bool = True) -> Path:
    fd, name = _temp_file(path)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        if mode is not None:
            name.chmod(mode)
    except BaseException:
        name.unlink(missing_ok=True)
        raise
    return name


def write_atomic(path: Path, data: bytes, *, mode: int | None = None, durable: bool = True) -> None:
    """Replace `path` with `data`: readers see the old file or the new one, never a partial one.
    The file is created 0600 unless `mode` says otherwise."""
    tmp = _temp_copy(path, data, mode, durable)
    try:
        if not _exchange(tmp, path):
            tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(path.parent)


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _renameat2() -> Callable[..., int] | None:
    try:
        return getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    except OSError:  # no C library to load: plain renames
        return None


_RENAMEAT2 = _renameat2()


def _exchange(tmp: Path, path: Path) -> bool:
    """Swap `tmp` and an existing `path`, then delete `tmp` (the old file). False when `path` does
    not exist yet or the system cannot exchange; the caller renames instead."""
    global _RENAMEAT2
    if _RENAMEAT2 is None:
        return False
    if _RENAMEAT2(_AT_FDCWD, os.fsencode(tmp), _AT_FDCWD, os.fsencode(path), _RENAME_EXCHANGE) != 0:
        error = ctypes.get_errno()
        if error in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV):
            _RENAMEAT2 = None  # this kernel or filesystem cannot exchange: rename from now on
        elif error not in (errno.ENOENT,):  # ENOENT: no file to replace yet
            raise OSError(error, f"exchange {tmp} with {path}: {os.strerror(error)}")
        return False
    tmp.unlink()
    return True


def create_exclusive(path: Path, data: bytes, *, mode: int | None = None, durable: bool = True) -> bool:
    """Create `path` with `data` only if it does not exist; False when it already does.

    The complete file is linked into place (`link` fails on an existing name, like O_EXCL), so a
    reader never sees it half-written and two racing creators cannot both win.
    """
    tmp = _temp_copy(path, data, mode, durable)
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)
    if durable:
        fsync_dir(path.parent)
    return True


def move_file(source: Path, target: Path, *, durable: bool = True) -> bool:
    """Move `source` to `target` atomically (same filesystem). When `source` is gone, True if
    `target` exists (moved before), False if neither does."""
    try:
        source.replace(target)
    except FileNotFoundError:
        if not source.exists():  # moved before, or never there
            return target.exists()
        target.parent.mkdir(parents=True, exist_ok=True)  # the target's folder was missing
        try:
            source.replace(target)
        except FileNotFoundError:
            return target.exists()
    if durable:
        fsync_dir(target.parent)
        fsync_dir(source.parent)
    return True


def remove_file(path: Path, *, durable: bool = True) -> bool:
    """Delete `path`; False if it was not there."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    if durable:
        fsync_dir(path.parent)
    return True


LOCK_STRIPES = 64


def striped_lock(folder: Path, key: str) -> contextlib.AbstractContextManager[None]:
    """The `file_lock` guarding `key` among `folder`'s objects: one of `LOCK_STRIPES` files in
    `folder/.locks/`, chosen by a hash of `key`. The files are made once and reused, so locking
    a new object creates no file (an inode per run or thread would pile up forever); two keys
    sharing a stripe only wait for each other. Never hold two stripes of one folder at once."""
    return file_lock(folder / ".locks" / f"{zlib.crc32(key.encode('utf-8')) % LOCK_STRIPES:02d}.lock")


@contextlib.contextmanager
def file_lock(lock_path: Path) -> Iterator[None]:
    """An exclusive `flock` on `lock_path`: serialises threads and processes sharing the workspace."""
    fd = _open_in(lock_path, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock
