"""Where a worker's context spaces live: ``tenants/{t}/workers/{w}/runtime/spaces/`` (ids validated,
inside the workspace), with its lock."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from genworker.autonomy.spaces.errors import SpaceNotFound
from genworker.fsutil import file_lock
from genworker.ids import safe_join, validate_id

__all__ = ["SPACE_ID", "checked_space_id", "locked", "spaces_dir"]

SPACE_ID: Final = re.compile(r"^SPACE_([1-9][0-9]{0,11})$")


def checked_space_id(space_id: str) -> str:
    """`space_id` when it is one (``SPACE_{n}``); anything else is a space that does not exist."""
    if not SPACE_ID.match(validate_id(space_id, "space id")):
        raise SpaceNotFound(space_id)
    return space_id


def spaces_dir(workspace: Path, tenant_id: str, worker_id: str) -> Path:
    folder = safe_join(
        workspace, "tenants", validate_id(tenant_id, "tenant id"), "workers", validate_id(worker_id, "worker id")
    )
    return folder / "runtime" / "spaces"


@contextlib.contextmanager
def locked(workspace: Path, tenant_id: str, worker_id: str) -> Iterator[None]:
    """Exclusive over the worker's spaces, across threads and processes sharing the workspace."""
    folder = spaces_dir(workspace, tenant_id, worker_id)
    folder.mkdir(parents=True, exist_ok=True)
    with file_lock(folder / ".lock"):
        yield
