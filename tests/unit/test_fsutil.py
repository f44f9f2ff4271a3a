"""fsutil.write_atomic replaces an existing file by exchanging it (renameat2), falling back to rename."""

from __future__ import annotations

import ctypes
import errno
import stat
from pathlib import Path
from typing import Any

import pytest

from genworker import fsutil

needs_exchange = pytest.mark.skipif(fsutil._RENAMEAT2 is None, reason="no renameat2 in this C library")


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    calls: list[tuple[Any, ...]] = []
    real = fsutil._RENAMEAT2
    assert real is not None

    def renameat2(*args: Any) -> int:
        calls.append(args)
        return int(real(*args))

    monkeypatch.setattr(fsutil, "_RENAMEAT2", renameat2)
    return calls


@needs_exchange
@pytest.mark.parametrize("durable", [True, False])
def test_an_existing_file_is_exchanged_and_the_old_one_deleted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durable: bool
) -> None:
    target = tmp_path / "run.json"
    fsutil.write_atomic(target, b"old", durable=durable)
    old_inode = target.stat().st_ino
    calls = _counting(monkeypatch)

    fsutil.write_atomic(target, b"new", mode=0o640, durable=durable)

    assert len(calls) == 1
    assert target.read_bytes() == b"new"
    assert target.stat().st_ino != old_inode
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]  # no temp file left holding "old"


@needs_exchange
def test_a_new_file_is_renamed_into_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _counting(monkeypatch)
    fsutil.write_atomic(tmp_path / "new.json", b"first", durable=False)
    assert len(calls) == 1  # tried, found nothing to exchange with, renamed
    assert (tmp_path / "new.json").read_bytes() == b"first"
    assert fsutil._RENAMEAT2 is not None  # a missing target does not turn exchanges off
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.json"]


@pytest.mark.parametrize("code", [errno.EINVAL, errno.ENOSYS])
def test_a_system_that_cannot_exchange_falls_back_to_rename_for_good(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    target = tmp_path / "session.json"
    target.write_bytes(b"old")
    calls: list[tuple[Any, ...]] = []

    def unsupported(*args: Any) -> int:
        calls.append(args)
        ctypes.set_errno(code)
        return -1

    monkeypatch.setattr(fsutil, "_RENAMEAT2", unsupported)
    fsutil.write_atomic(target, b"new", durable=False)
    fsutil.write_atomic(target, b"newer", durable=False)

    assert target.read_bytes() == b"newer"
    assert len(calls) == 1  # not asked again
    assert fsutil._RENAMEAT2 is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["session.json"]


def test_an_exchange_that_fails_otherwise_raises_and_leaves_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "run.json"
    target.write_bytes(b"kept")

    def denied(*args: Any) -> int:
        ctypes.set_errno(errno.EACCES)
        return -1

    monkeypatch.setattr(fsutil, "_RENAMEAT2", denied)
    with pytest.raises(OSError, match="exchange"):
        fsutil.write_atomic(target, b"lost", durable=False)
    assert target.read_bytes() == b"kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]  # the temp file is cleaned up
