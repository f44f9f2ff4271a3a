"""Striped lock files: a bounded set per folder, reused, and still mutually exclusive."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from genworker.fsutil import LOCK_STRIPES, striped_lock


def test_locking_many_objects_reuses_a_bounded_set_of_files(tmp_path: Path) -> None:
    for i in range(500):
        with striped_lock(tmp_path, f"run_{i:04d}"):
            pass
    made = list((tmp_path / ".locks").iterdir())
    assert 1 < len(made) <= LOCK_STRIPES  # not one file per run, thread or session


def test_a_held_stripe_keeps_every_other_opener_out(tmp_path: Path) -> None:
    with striped_lock(tmp_path, "session_a"):
        (stripe,) = (tmp_path / ".locks").iterdir()
        fd = os.open(stripe, os.O_RDWR)  # another open file, as another thread or process has
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
    fd = os.open(stripe, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released with the block
    finally:
        os.close(fd)
