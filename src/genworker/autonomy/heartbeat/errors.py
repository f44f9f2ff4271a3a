"""Heartbeat errors: unreadable state files (naming the file) and misuse."""

from __future__ import annotations

from pathlib import Path

__all__ = ["HeartbeatError", "HeartbeatFileError"]


class HeartbeatError(Exception):
    """Base of every heartbeat failure."""


class HeartbeatFileError(HeartbeatError):
    """A heartbeat state file (ledger, meta) cannot be read; it is left as it is for a person to look at."""

    def __init__(self, path: Path, detail: str) -> None:
        self.path = path
        super().__init__(f"{path}: {detail}")
