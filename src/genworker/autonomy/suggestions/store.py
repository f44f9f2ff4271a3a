"""Suggestions and feedback on disk, per worker under ``runtime/``.

A suggestion's id is derived from its fingerprint (what it is about), and it is created with an
exclusive create: a detector running again, in this process or another, cannot suggest the same
thing twice — not even after a person rejected it.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal

from genworker.fsutil import create_exclusive, file_lock, striped_lock, write_atomic
from genworker.ids import safe_join, validate_id

__all__ = [
    "SCHEMA_VERSION",
    "FeedbackStore",
    "Suggestion",
    "SuggestionDecided",
    "SuggestionKind",
    "SuggestionNotFound",
    "SuggestionStatus",
    "SuggestionStore",
    "suggestion_id",
]

log = logging.getLogger("genworker.suggestions")

SCHEMA_VERSION: Final = 1
SuggestionKind = Literal["skill", "rule", "goal_completion", "duty_drift", "duty", "policy"]
SuggestionStatus = Literal["pending", "approved", "rejected"]


class SuggestionNotFound(LookupError):
    pass


class SuggestionDecided(ValueError):
    pass


def suggestion_id(fingerprint: str) -> str:
    return "sg_" + hashlib.sha256(fingerprint.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Suggestion:
    suggestion_id: str
    tenant_id: str
    worker_id: str
    kind: SuggestionKind
    title: str
    detail: str
    fingerprint: str
    source: str  # the detector: repeated_task | goal_completion | duty_drift | rule_crystallizer | ...
    created_at: str
    payload: dict[str, Any] = field(default_factory=dict)
    status: SuggestionStatus = "pending"
    decided_at: str | None = None
    decided_by: str | None = None
    result: str | None = None  # what approving did (e.g. the SKILL.md written)
    schema_version: int = SCHEMA_VERSION


_FIELDS: Final = frozenset(f.name for f in fields(Suggestion))


class SuggestionStore:
    def __init__(self, workspace_root: Path) -> None:
        self.root = workspace_root

    def _folder(self, tenant_id: str, worker_id: str) -> Path:
        return safe_join(self.root, "tenants", tenant_id, "workers", worker_id) / "runtime" / "suggestions"

    def _path(self, tenant_id: str, worker_id: str, sid: str) -> Path:
        return self._folder(tenant_id, worker_id) / f"{validate_id(sid, 'suggestion id')}.json"

    def create(
        self,
        tenant_id: str,
        worker_id: str,
        kind: SuggestionKind,
        title: str,
        detail: str,
        fingerprint: str,
        source: str,
        payload: dict[str, Any] | None = None,
    ) -> Suggestion | None:
        """The new pending suggestion, or None when this fingerprint was already suggested."""
        suggestion = Suggestion(
            suggestion_id=suggestion_id(f"{kind}:{fingerprint}"),
            tenant_id=tenant_id,
            worker_id=worker_id,
            kind=kind,
            title=title,
            detail=detail,
            fingerprint=fingerprint,
            source=source,
            created_at=datetime.now(UTC).isoformat(),
            payload=dict(payload or {}),
        )
        path = self._path(tenant_id, worker_id, suggestion.suggestion_id)
        return suggestion if create_exclusive(path, _encode(suggestion)) else None

    def get(self, tenant_id: str, worker_id: str, sid: str) -> Suggestion:
        path = self._path(tenant_id, worker_id, sid)
        if not path.is_file():
            raise SuggestionNotFound(f"no suggestion {sid!r} for {tenant_id}/{worker_id}")
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"{path}: unsupported schema_version {data.get('schema_version')!r}")
        unknown = sorted(data.keys() - _FIELDS)
        if unknown:
            raise ValueError(f"{path}: unknown fields {unknown}")
        return Suggestion(**data)

    def list(self, tenant_id: str, worker_id: str, status: SuggestionStatus | None = None) -> list[Suggestion]:
        folder = self._folder(tenant_id, worker_id)
        found = []
        for path in sorted(folder.glob("sg_*.json")) if folder.is_dir() else []:
            try:
                item = self.get(tenant_id, worker_id, path.stem)
            except (ValueError, OSError) as exc:
                log.warning("[Suggestions] skipped %s: %s", path, exc)
                continue
            if status is None or item.status == status:
                found.append(item)
        return sorted(found, key=lambda s: s.created_at, reverse=True)

    def lock(self, tenant_id: str, worker_id: str, sid: str) -> Any:
        return striped_lock(self._folder(tenant_id, worker_id), validate_id(sid, "suggestion id"))

    def save_decision(
        self, suggestion: Suggestion, status: SuggestionStatus, by: str, result: str | None
    ) -> Suggestion:
        """Caller holds `lock`."""
        decided = replace(
            suggestion, status=status, decided_at=datetime.now(UTC).isoformat(), decided_by=by, result=result
        )
        write_atomic(self._path(suggestion.tenant_id, suggestion.worker_id, suggestion.suggestion_id), _encode(decided))
        return decided


def _encode(suggestion: Suggestion) -> bytes:
    return json.dumps(asdict(suggestion), ensure_ascii=False, indent=2, default=str).encode("utf-8")


class FeedbackStore:
    """Free-text feedback from people, one JSON line each (``runtime/feedback/feedback.jsonl``)."""

    def __init__(self, workspace_root: Path) -> None:
        self.root = workspace_root

    def _path(self, tenant_id: str, worker_id: str) -> Path:
        return (
            safe_join(self.root, "tenants", tenant_id, "workers", worker_id) / "runtime" / "feedback" / "feedback.jsonl"
        )

    def add(self, tenant_id: str, worker_id: str, text: str, by: str) -> dict[str, Any]:
        if not text.strip():
            raise ValueError("feedback text must not be empty")
        entry = {"schema_version": SCHEMA_VERSION, "at": datetime.now(UTC).isoformat(), "by": by, "text": text.strip()}
        path = self._path(tenant_id, worker_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        with file_lock(path.with_suffix(".lock")), path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry, ensure_ascii=False) + "\n")
            fh.flush()
        return entry

    def list(self, tenant_id: str, worker_id: str, limit: int = 100) -> list[dict[str, Any]]:
        path = self._path(tenant_id, worker_id)
        if not path.is_file():
            return []
        text = path.read_text(encoding="utf-8")
        lines = [line for line in text.split("\n") if line.strip()]  # not splitlines(): U+2028 may be in a text
        return [json.loads(line) for line in lines[-limit:]][::-1]
