"""Memory values: scopes and bindings (which partitions a run reads), episodes as stored in
Markdown front matter, queries and hits.

An episode file is `memory/episodes/{episode_id}.md`: YAML front matter (schema_version 1) and
a Markdown body. The files are the source of truth; every index is derived from them.
"""

from __future__ import annotations

import json
import math
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from genworker.memory.errors import MemoryFileError

__all__ = [
    "EPISODE_SCHEMA_VERSION",
    "LAYER_ORDER",
    "Episode",
    "LayerBudget",
    "MemoryBinding",
    "MemoryHit",
    "MemoryItem",
    "MemoryQuery",
    "Provenance",
    "Scope",
    "ScopeKind",
    "decayed_weight",
    "new_episode_id",
    "parse_episode",
    "render_episode",
]

EPISODE_SCHEMA_VERSION = 1
_SafeLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_SafeDumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_EPISODE_ID = re.compile(r"^ep_[0-9]{14}_[0-9a-f]{8,32}$")


class ScopeKind(StrEnum):
    RUN = "run"
    DUTY = "duty"
    CONVERSATION = "conversation"
    WORKER = "worker"
    TENANT = "tenant"


LAYER_ORDER = (ScopeKind.RUN, ScopeKind.DUTY, ScopeKind.CONVERSATION, ScopeKind.WORKER, ScopeKind.TENANT)


@dataclass(frozen=True, slots=True, order=True)
class Scope:
    """One memory partition: a kind and the id of the run, duty, thread, worker or tenant."""

    kind: ScopeKind
    id: str

    def __str__(self) -> str:
        return f"{self.kind.value}:{self.id}"

    @classmethod
    def parse(cls, text: str) -> Scope:
        kind, sep, ident = text.partition(":")
        if not sep or not ident or kind not in ScopeKind.__members__.values():
            raise ValueError(f"scope {text!r} is not '<kind>:<id>' with kind one of {', '.join(ScopeKind)}")
        return cls(ScopeKind(kind), ident)


@dataclass(frozen=True, slots=True)
class MemoryItem:
    """One recalled memory (episode, preference, decision) offered to the context."""

    text: str
    source: str = ""  # where it came from, e.g. "episode:2024-05-01-invoice"


@dataclass(frozen=True, slots=True)
class MemoryBinding:
    """What one run may read: its own run, its duty, its conversation, its worker, its tenant.

    A run never names arbitrary partitions; the binding derives them from the run's provenance.
    """

    tenant_id: str
    worker_id: str
    run_id: str | None = None
    duty_id: str | None = None
    thread_id: str | None = None

    def scopes(self) -> tuple[Scope, ...]:
        ids = {
            ScopeKind.RUN: self.run_id,
            ScopeKind.DUTY: self.duty_id,
            ScopeKind.CONVERSATION: self.thread_id,
            ScopeKind.WORKER: self.worker_id,
            ScopeKind.TENANT: self.tenant_id,
        }
        return tuple(Scope(kind, ident) for kind in LAYER_ORDER if (ident := ids[kind]))


@dataclass(frozen=True, slots=True)
class LayerBudget:
    max_items: int = 3
    max_chars: int = 1_500


@dataclass(frozen=True, slots=True)
class MemoryQuery:
    text: str
    binding: MemoryBinding
    goal_id: str | None = None
    duty_id: str | None = None  # a metadata filter, separate from the duty scope
    kinds: tuple[str, ...] = ()  # "episode", "summary", ...
    since: datetime | None = None
    until: datetime | None = None
    limit: int = 10
    exclude_runs: tuple[str, ...] = ()  # runs whose turns are already in the context's history


@dataclass(frozen=True, slots=True)
class MemoryHit:
    episode_id: str
    scope: Scope
    kind: str
    title: str
    text: str
    score: float  # higher is better
    created_at: datetime
    provider: str = "local"
    conflict: bool = False
    metadata: Mapping[str, str] = field(default_factory=dict)


class Provenance(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str | None = None
    task_id: str | None = None
    goal_id: str | None = None
    duty_id: str | None = None
    thread_id: str | None = None
    channel: str | None = None  # chat, feishu, slack, schedule ...


class Episode(BaseModel):
    """An episode's front matter plus its body."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal[1] = 1
    episode_id: str
    tenant_id: str
    worker_id: str
    scope: str  # "<kind>:<id>"
    kind: Literal["episode", "summary"] = "episode"
    title: str = ""
    created_at: datetime
    source: str = "run"  # run | consolidation | promotion | import
    provenance: Provenance = Provenance()
    weight: float = Field(default=1.0, ge=0)
    reinforced_at: datetime | None = None
    recall_count: int = Field(default=0, ge=0)
    consolidated_from: tuple[str, ...] = ()
    body: str = ""

    @field_validator("episode_id")
    @classmethod
    def _episode_id(cls, value: str) -> str:
        if not _EPISODE_ID.fullmatch(value):
            raise ValueError(f"{value!r} is not an episode id like ep_20240501120000_1a2b3c4d")
        return value

    @field_validator("scope")
    @classmethod
    def _scope(cls, value: str) -> str:
        Scope.parse(value)
        return value

    @field_validator("created_at", "reinforced_at")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("timestamps must carry a timezone (e.g. 2024-05-01T12:00:00+00:00)")
        return value

    @property
    def scope_value(self) -> Scope:
        return Scope.parse(self.scope)


def new_episode_id(now: datetime | None = None) -> str:
    now = now or datetime.now(UTC)
    return f"ep_{now.astimezone(UTC):%Y%m%d%H%M%S}_{secrets.token_hex(6)}"


def decayed_weight(weight: float, since: datetime, now: datetime, half_life_days: float) -> float:
    """`weight` halved for every `half_life_days` since the episode was written or last reinforced."""
    age_days = max((now - since).total_seconds(), 0.0) / 86_400
    return weight * math.pow(0.5, age_days / half_life_days) if half_life_days > 0 else weight


def render_episode(episode: Episode) -> str:
    meta = episode.model_dump(mode="json", exclude={"body"}, exclude_defaults=False)
    return f"---\n{_front_matter(meta)}---\n{episode.body.rstrip()}\n"


# Characters YAML 1.1 reads differently inside a double-quoted scalar than JSON writes them: line
# breaks it folds (NEL, LS, PS) and characters it refuses (C1 controls, surrogates, U+FFFE/U+FFFF).
_NOT_JSON_AS_YAML = re.compile("[\x7f-\x9f\u2028\u2029\ud800-\udfff\ufffe\uffff]")


def _front_matter(meta: dict[str, Any]) -> str:
    """One `key: value` line per field, the value written as JSON: a JSON value is a YAML flow value,
    and this is much faster than PyYAML's representer. A
    value YAML would read differently (see above, or a float JSON writes without a point) goes through
    PyYAML instead."""
    lines = []
    for key, value in meta.items():
        text = json.dumps(value, ensure_ascii=False)
        if _NOT_JSON_AS_YAML.search(text) or (isinstance(value, float) and "." not in text):
            return str(yaml.dump(meta, Dumper=_SafeDumper, sort_keys=False, allow_unicode=True))
        lines.append(f"{key}: {text}\n")
    return "".join(lines)


def parse_episode(text: str, path: Path | str) -> Episode:
    """An episode from its file text; a clear error names the file and field at fault."""
    if not text.startswith("---\n"):
        raise MemoryFileError(path, "an episode starts with a '---' front matter block")
    head, sep, body = text[4:].partition("\n---\n")
    if not sep:
        raise MemoryFileError(path, "the front matter block is not closed with '---'")
    try:
        meta = yaml.load(head, Loader=_SafeLoader)
    except yaml.YAMLError as exc:
        raise MemoryFileError(path, f"front matter is not valid YAML: {exc}") from None
    if not isinstance(meta, dict):
        raise MemoryFileError(path, "front matter must be a mapping")
    version = meta.get("schema_version")
    if version != EPISODE_SCHEMA_VERSION:
        raise MemoryFileError(path, f"schema_version: {version!r} is not supported (expected {EPISODE_SCHEMA_VERSION})")
    try:
        return Episode.model_validate({**meta, "body": body.strip("\n")})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "front matter"
        raise MemoryFileError(path, f"{where}: {first['msg']}") from None
