"""Small JSONL record files (preferences, decisions, candidates, offers): read with errors naming
`file:line: field`, rewritten whole and atomically under a lock."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Generic, TypeVar

from pydantic import BaseModel, ValidationError

from genworker.fsutil import file_lock, write_atomic
from genworker.memory.errors import MemoryFileError

__all__ = ["JsonlFile"]

R = TypeVar("R", bound=BaseModel)


class JsonlFile(Generic[R]):
    def __init__(self, path: Path, model: type[R]) -> None:
        self.path = path
        self.model = model

    def load(self) -> list[R]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        records = []
        # "\n" only: splitlines() also splits on U+0085, U+2028 ..., which JSON strings hold unescaped
        for number, line in enumerate(text.split("\n"), start=1):
            if not line.strip():
                continue
            where = f"{self.path}:{number}"
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                raise MemoryFileError(where, f"not valid JSON: {exc.msg}") from None
            if not isinstance(data, dict) or data.get("schema_version") != 1:
                version = data.get("schema_version") if isinstance(data, dict) else None
                raise MemoryFileError(where, f"schema_version: {version!r} is not supported (expected 1)")
            try:
                records.append(self.model.model_validate(data))
            except ValidationError as exc:
                first = exc.errors()[0]
                raise MemoryFileError(where, f"{'.'.join(map(str, first['loc']))}: {first['msg']}") from None
        return records

    def save(self, records: Sequence[R]) -> None:
        body = "".join(r.model_dump_json() + "\n" for r in records)
        write_atomic(self.path, body.encode("utf-8"), mode=0o644)

    @contextmanager
    def editing(self) -> Iterator[list[R]]:
        """The records, locked against other writers; saved when the block ends without error."""
        with file_lock(self.path.with_name(f".{self.path.name}.lock")):
            records = self.load()
            yield records
            self.save(records)

    def update(self, change: Callable[[list[R]], None]) -> list[R]:
        with self.editing() as records:
            change(records)
        return records
