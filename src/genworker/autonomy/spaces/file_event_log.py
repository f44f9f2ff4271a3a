"""FileEventLog: the immutable record of every sensed fact a worker's spaces saw, one `ContextEvent` per
line of ``runtime/spaces/events.jsonl``. Lines are only ever appended (one write, then fsync);
nothing rewrites or removes one. Blocking: call from a worker thread.

A last line without its newline is an append a crash cut short and is ignored; any other line that
does not decode is skipped with a warning naming ``file:line``.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from pydantic import ValidationError

from genworker.autonomy.spaces.models import ContextEvent
from genworker.autonomy.spaces.paths import spaces_dir

__all__ = ["EVENT_LOG", "FileEventLog"]

log = logging.getLogger("genworker.spaces")

EVENT_LOG = "events.jsonl"


class FileEventLog:
    def __init__(self, workspace: Path, *, durable: bool = True) -> None:
        self.workspace = workspace
        self.durable = durable  # False: no fdatasync (benchmarks and tests of routing only)

    def path(self, tenant_id: str, worker_id: str) -> Path:
        return spaces_dir(self.workspace, tenant_id, worker_id) / EVENT_LOG

    def append(self, event: ContextEvent) -> None:
        path = self.path(event.tenant_id, event.worker_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        line = (event.model_dump_json() + "\n").encode("utf-8")
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)
            if self.durable:
                os.fdatasync(fd)
        finally:
            os.close(fd)

    def read(self, tenant_id: str, worker_id: str, event_ids: Iterable[str] | None = None) -> list[ContextEvent]:
        """The events with these ids (all of them when None), oldest first."""
        wanted = set(event_ids) if event_ids is not None else None
        return [e for e in self.events(tenant_id, worker_id) if wanted is None or e.event_id in wanted]

    def events(self, tenant_id: str, worker_id: str) -> Iterator[ContextEvent]:
        path = self.path(tenant_id, worker_id)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return
        lines = data.split(b"\n")
        for number, raw in enumerate(lines[:-1], start=1):  # the last piece has no newline: never complete
            if not raw.strip():
                continue
            try:
                yield ContextEvent.model_validate(json.loads(raw))
            except (ValueError, ValidationError) as exc:
                log.warning("[Spaces] %s:%d: unreadable event skipped: %s", path, number, _first(exc))


def _first(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        error = exc.errors()[0]
        return f"{'.'.join(map(str, error['loc'])) or '(line)'}: {error['msg']}"
    return str(exc)
