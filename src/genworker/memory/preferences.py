"""Preferences and decisions: `memory/preferences.jsonl` and `memory/decisions.jsonl`.

A newer statement on the same key and scope that says it replaces the old one supersedes it
explicitly: the old record stays, marked `superseded`, pointing at its successor and keeping its
own evidence. A decision always supersedes its predecessor. Two preferences that disagree without
one replacing the other are both kept and flagged as a conflict for the context assembler.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from genworker.memory.jsonl import JsonlFile
from genworker.memory.models import MemoryBinding, MemoryHit, MemoryQuery, Scope

__all__ = ["Evidence", "Statement", "StatementStore", "StatementsProvider", "normalise_key"]

StatementKind = Literal["preference", "decision"]


def normalise_key(key: str) -> str:
    return re.sub(r"\s+", " ", key.strip().lower())


class Evidence(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str | None = None
    thread_id: str | None = None
    quote: str = ""  # what the person said that shows it


class Statement(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    id: str
    kind: StatementKind
    key: str = Field(min_length=1)
    value: str = Field(min_length=1)
    scope: str
    status: Literal["active", "superseded"] = "active"
    created_at: datetime
    evidence: Evidence = Evidence()
    supersedes: str | None = None
    superseded_by: str | None = None
    superseded_at: datetime | None = None
    conflict_with: tuple[str, ...] = ()


class StatementStore:
    def __init__(self, memory_dir: Path, kind: StatementKind) -> None:
        self.kind = kind
        self.file: JsonlFile[Statement] = JsonlFile(memory_dir / f"{kind}s.jsonl", Statement)

    def all(self) -> list[Statement]:
        return self.file.load()

    def active(self, scopes: Sequence[Scope] | None = None) -> list[Statement]:
        wanted = None if scopes is None else {str(s) for s in scopes}
        return [s for s in self.all() if s.status == "active" and (wanted is None or s.scope in wanted)]

    def add(
        self,
        key: str,
        value: str,
        scope: Scope,
        *,
        replaces: bool = False,
        evidence: Evidence | None = None,
        now: datetime | None = None,
    ) -> Statement:
        """Record a statement; returns the stored one (the existing one when nothing changed)."""
        now = now or datetime.now(UTC)
        new = Statement(
            id=f"{self.kind[:4]}_{now:%Y%m%d%H%M%S}_{secrets.token_hex(4)}",
            kind=self.kind,
            key=normalise_key(key),
            value=value.strip(),
            scope=str(scope),
            created_at=now,
            evidence=evidence or Evidence(),
        )
        result: list[Statement] = [new]

        def change(records: list[Statement]) -> None:
            current = [r for r in records if r.status == "active" and r.key == new.key and r.scope == new.scope]
            same = next((r for r in current if r.value.casefold() == new.value.casefold()), None)
            if same is not None:
                result[0] = same
                return
            stored = new
            for old in current:
                if replaces or self.kind == "decision":
                    old.status, old.superseded_by, old.superseded_at = "superseded", new.id, now
                    stored = stored.model_copy(update={"supersedes": old.id})
                else:
                    old.conflict_with = (*old.conflict_with, new.id)
                    stored = stored.model_copy(update={"conflict_with": (*stored.conflict_with, old.id)})
            records.append(stored)
            result[0] = stored

        self.file.update(change)
        return result[0]


class StatementsProvider:
    """Active preferences and decisions of the run's bound scopes, as memory hits."""

    name = "statements"

    def __init__(self, stores_for: Callable[[MemoryBinding], Sequence[StatementStore]]) -> None:
        self.stores_for = stores_for

    async def recall(self, query: MemoryQuery) -> Sequence[MemoryHit]:
        return self._recall(query)  # two small JSONL files: cheaper read here than a thread hop

    def _recall(self, query: MemoryQuery) -> list[MemoryHit]:
        words = set(re.findall(r"\w+", query.text.lower()))
        hits = []
        for store in self.stores_for(query.binding):
            for s in store.active(query.binding.scopes()):
                overlap = len(words & set(re.findall(r"\w+", f"{s.key} {s.value}".lower())))
                hits.append(
                    MemoryHit(
                        episode_id=s.id,
                        scope=Scope.parse(s.scope),
                        kind=s.kind,
                        title=f"{s.kind} on {s.key}",
                        text=s.value,
                        score=1.0 + overlap,
                        created_at=s.created_at,
                        provider=self.name,
                        conflict=bool(s.conflict_with),
                        metadata={"key": s.key},
                    )
                )
        return hits
