"""FileSpaceStore: a worker's spaces as files, ``runtime/spaces/{space_id}.md`` (Markdown + front matter,
readable and greppable), replaced atomically; and the counter that numbers new spaces
(``SPACE_1``, ``SPACE_2`` ..., in ``next_space.json``). Writers hold the worker's spaces lock
(`locked`); the index beside them is shared by every process on the volume. Blocking.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from genworker.autonomy.spaces.document import parse_space, render_space
from genworker.autonomy.spaces.errors import SpaceFileError, SpaceNotFound
from genworker.autonomy.spaces.index import INDEX_FILE
from genworker.autonomy.spaces.models import SCHEMA_VERSION, ContextSpace
from genworker.autonomy.spaces.paths import SPACE_ID, checked_space_id, locked, spaces_dir
from genworker.fsutil import Signature, file_signature, write_atomic

__all__ = ["FileSpaceStore"]

log = logging.getLogger("genworker.spaces")

_COUNTER: Final = "next_space.json"
_CACHED: Final = 2_000  # parsed spaces kept (the oldest kept goes first)


class FileSpaceStore:
    def __init__(self, workspace: Path, *, durable: bool = True) -> None:
        self.workspace = workspace
        self.durable = durable
        # parsed spaces by path and file signature: every save makes a new inode, so a file someone
        # else rewrote (a person, another process) is read again; the values are immutable
        self._parsed: dict[Path, tuple[Signature, ContextSpace]] = {}

    def folder(self, tenant_id: str, worker_id: str) -> Path:
        return spaces_dir(self.workspace, tenant_id, worker_id)

    def path(self, tenant_id: str, worker_id: str, space_id: str) -> Path:
        return self.folder(tenant_id, worker_id) / f"{checked_space_id(space_id)}.md"

    def exists(self, tenant_id: str, worker_id: str, space_id: str) -> bool:
        return self.path(tenant_id, worker_id, space_id).is_file()

    def has_spaces(self, tenant_id: str, worker_id: str) -> bool:
        return self.folder(tenant_id, worker_id).is_dir()

    def locked(self, tenant_id: str, worker_id: str) -> contextlib.AbstractContextManager[None]:
        return locked(self.workspace, tenant_id, worker_id)

    def index_path(self, tenant_id: str, worker_id: str) -> Path:
        return self.folder(tenant_id, worker_id) / INDEX_FILE

    def changed_since(self, tenant_id: str, worker_id: str, mark: int | None) -> tuple[int, list[str]] | None:
        return None  # the index lives beside the files and every writer updates it

    def close(self) -> None:
        self._parsed.clear()

    def load(self, tenant_id: str, worker_id: str, space_id: str) -> ContextSpace:
        path = self.path(tenant_id, worker_id, space_id)
        signature = file_signature(path)
        cached = self._parsed.get(path)
        if cached is not None and signature is not None and cached[0] == signature:
            return cached[1]
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise SpaceNotFound(space_id) from None
        space = parse_space(text, str(path))
        if (space.space_id, space.tenant_id, space.worker_id) != (space_id, tenant_id, worker_id):
            raise SpaceFileError(str(path), f"holds {space.tenant_id}/{space.worker_id}/{space.space_id}")
        if signature is not None and signature == file_signature(path):  # not replaced while it was read
            self._remember(path, signature, space)
        return space

    def _remember(self, path: Path, signature: Signature, space: ContextSpace) -> None:
        if len(self._parsed) >= _CACHED and path not in self._parsed:
            self._parsed.pop(next(iter(self._parsed)))
        self._parsed[path] = (signature, space)

    def save(self, space: ContextSpace) -> None:
        path = self.path(space.tenant_id, space.worker_id, space.space_id)
        write_atomic(path, render_space(space).encode("utf-8"), durable=self.durable)
        signature = file_signature(path)
        if signature is not None:
            self._remember(path, signature, space)

    def all(self, tenant_id: str, worker_id: str) -> Iterator[ContextSpace]:
        """Every readable space; an unreadable file is logged and skipped (it stays for a person)."""
        folder = self.folder(tenant_id, worker_id)
        if not folder.is_dir():
            return
        for path in sorted(folder.glob("SPACE_*.md")):
            try:
                yield self.load(tenant_id, worker_id, path.stem)
            except (SpaceFileError, SpaceNotFound, OSError) as exc:
                log.error("[Spaces] %s skipped: %s", path, exc)

    def next_id(self, tenant_id: str, worker_id: str) -> str:
        """A new space id; the caller holds the worker's spaces lock. The counter is derived: a lost,
        unreadable or other-version one is recomputed from the space files."""
        folder = self.folder(tenant_id, worker_id)
        counter = folder / _COUNTER
        try:
            data = json.loads(counter.read_bytes())
            if data.get("schema_version") != SCHEMA_VERSION or not isinstance(data.get("next"), int):
                raise ValueError(f"{counter}: not a counter of schema_version {SCHEMA_VERSION}")
            number = data["next"]
        except (FileNotFoundError, ValueError, AttributeError):
            numbers = [int(m.group(1)) for p in folder.glob("SPACE_*.md") if (m := SPACE_ID.match(p.stem))]
            number = max(numbers, default=0) + 1
        while (folder / f"SPACE_{number}.md").exists():  # a counter older than the files
            number += 1
        record = json.dumps({"schema_version": SCHEMA_VERSION, "next": number + 1}) + "\n"
        write_atomic(counter, record.encode("utf-8"), durable=self.durable)
        return f"SPACE_{number}"
