"""A `ContextEvent` from an inbox item: its source, actor, one-line summary, perception confidence,
entities (kind:value), strong anchors and hints, read from well-known payload fields and the text.

=====================  =====================================================================
anchor                 from
=====================  =====================================================================
issue:{repo}#{n}       ``repo`` + ``issue`` / ``issue_number`` / ``pr`` / ``number``, or
                       ``owner/repo#n`` in the text
thread:{where}:{id}    ``thread_id`` / ``conversation_id`` (``where``: platform or source)
goal:{id}              ``goal_id``
calendar:{topic}       ``calendar_topic``, or a calendar fact's ``topic`` / ``title``
=====================  =====================================================================

An explicit ``anchors`` / ``entities`` list in the payload is taken as it is (``kind:value``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, Final

from genworker.autonomy.inbox import InboxItem
from genworker.autonomy.spaces.models import SUMMARY_CHARS, ContextEvent, Hints, Priority, RiskLevel

__all__ = ["DEFAULT_CONFIDENCE", "event_from_item", "event_id_of", "source_of"]

DEFAULT_CONFIDENCE: Final[Mapping[str, float]] = {
    "screen": 0.4,  # evidence only: never a task on its own
    "chat": 0.6,
    "email": 0.6,
    "local": 0.5,
    "calendar": 0.7,
    "github": 0.7,
    "webhook": 0.7,
    "goal": 0.8,
}
_SOURCES: Final = {"channel": "chat", "git": "local", "workspace_file": "local"}
_TEXT_FIELDS: Final = ("summary", "title", "subject", "text", "message", "body", "description")
_ACTOR_FIELDS: Final = ("actor", "author", "sender_name", "sender", "from", "user", "login", "sender_id")
_REF_FIELDS: Final = ("message_id", "event_id", "id", "sha", "url", "path")
_TIME_FIELDS: Final = ("occurred_at", "received_at", "created_at", "timestamp")
_PEOPLE_FIELDS: Final = ("assignee", "reporter", "people", "participants", "attendees", "to", "cc", "owner")
_ISSUE_FIELDS: Final = ("issue", "issue_id", "issue_number", "pr", "pull_request", "number")
_FILE_FIELDS: Final = ("file", "files", "path", "paths")
_REPO_ISSUE = re.compile(r"\b([A-Za-z0-9][\w.-]*/[\w.-]+)#(\d+)\b")
_MENTION = re.compile(r"(?<![\w@])@([A-Za-z0-9][\w.-]{1,38})")
_FILE_NAME = re.compile(r"\b[\w./-]*\w\.(?:py|md|ts|tsx|js|go|rs|java|json|ya?ml|toml|sql|css|html|txt|csv)\b")
_SEVERITY: Final[Mapping[str, Priority]] = {
    "critical": "P0", "sev0": "P0", "sev1": "P0", "urgent": "P0", "blocker": "P0",
    "high": "P1", "sev2": "P1", "major": "P1",
    "medium": "P2", "normal": "P2", "sev3": "P2",
    "low": "P3", "minor": "P3", "sev4": "P3",
}  # fmt: skip
_MAX_ENTITIES: Final = 24


def source_of(item: InboxItem) -> str:
    given = item.payload.get("source")
    if isinstance(given, str) and given.strip():
        return given.strip().lower()[:32]
    return _SOURCES.get(item.source_type, item.source_type)


def event_id_of(item: InboxItem) -> str:
    """Derived from the item, so routing the same item again finds the event it already made."""
    return "cev_" + item.item_id.removeprefix("ibx_")


def event_from_item(item: InboxItem, now: datetime) -> ContextEvent:
    payload = item.payload
    source = source_of(item)
    text = _summary(item)
    anchors = tuple(dict.fromkeys(_anchors(payload, source, text)))
    entities = tuple(dict.fromkeys([*anchors, *_entities(payload, text)]))[:_MAX_ENTITIES]
    confidence = payload.get("confidence")
    if isinstance(confidence, bool) or not isinstance(confidence, int | float) or not 0 <= confidence <= 1:
        confidence = DEFAULT_CONFIDENCE.get(source, 0.6)
    return ContextEvent(
        event_id=event_id_of(item),
        tenant_id=item.tenant_id,
        worker_id=item.worker_id,
        source=source,
        source_ref=_first_text(payload, _REF_FIELDS) or item.dedupe_key or item.item_id,
        occurred_at=_first_time(payload, _TIME_FIELDS) or item.created_at,
        actor=_first_text(payload, _ACTOR_FIELDS) or "",
        summary=text,
        confidence=float(confidence),
        raw_ref=f"inbox:{item.item_id}",
        entities=entities,
        anchors=anchors,
        hints=_hints(payload),
        recorded_at=now,
    )


def _summary(item: InboxItem) -> str:
    parts = [v.strip() for k in _TEXT_FIELDS if isinstance(v := item.payload.get(k), str) and v.strip()]
    text = " — ".join(dict.fromkeys(parts[:2])) or item.event_type
    text = " ".join(text.split())
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"


def _first_text(payload: Mapping[str, Any], names: Iterable[str]) -> str | None:
    for name in names:
        value = payload.get(name)
        if isinstance(value, str | int) and not isinstance(value, bool) and str(value).strip():
            return str(value).strip()[:200]
        if isinstance(value, Mapping):  # {"name": ..., "email": ...}
            inner = _first_text(value, ("name", "login", "email", "id"))
            if inner:
                return inner
    return None


def _first_time(payload: Mapping[str, Any], names: Iterable[str]) -> datetime | None:
    for name in names:
        found = _time(payload.get(name))
        if found is not None:
            return found
    return None


def _time(value: Any) -> datetime | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return datetime.fromtimestamp(value / 1000 if value > 1e11 else value, UTC)
    if isinstance(value, str) and value.strip():
        try:
            parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            return None
        return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
    return None


def _slug(value: str) -> str:
    return re.sub(r"[^\w#/.@-]+", "-", value.strip().lower()).strip("-")[:120]


def _repo(payload: Mapping[str, Any]) -> str | None:
    repo = payload.get("repo") or payload.get("repository")
    if isinstance(repo, Mapping):
        repo = repo.get("full_name") or repo.get("name")
    return _slug(repo) if isinstance(repo, str) and repo.strip() else None


def _anchors(payload: Mapping[str, Any], source: str, text: str) -> Iterator[str]:
    yield from _listed(payload.get("anchors"))
    repo = _repo(payload)
    number = _first_text(payload, _ISSUE_FIELDS)
    if repo and number and number.lstrip("#").isdigit():
        yield f"issue:{repo}#{number.lstrip('#')}"
    for owner_repo, n in _REPO_ISSUE.findall(text):
        yield f"issue:{_slug(owner_repo)}#{n}"
    thread = _first_text(payload, ("thread_id", "conversation_id"))
    if thread:
        where = payload.get("platform") if isinstance(payload.get("platform"), str) else source
        yield f"thread:{_slug(str(where))}:{_slug(thread)}"
    goal = payload.get("goal_id")
    if isinstance(goal, str) and goal.strip():
        yield f"goal:{_slug(goal)}"
    topic = payload.get("calendar_topic")
    if not (isinstance(topic, str) and topic.strip()) and source == "calendar":
        topic = payload.get("topic") or payload.get("title")
    if isinstance(topic, str) and topic.strip():
        yield f"calendar:{_slug(topic)}"


def _listed(value: Any) -> Iterator[str]:
    if isinstance(value, list | tuple):
        for entry in value:
            if isinstance(entry, str) and entry.strip():
                kind, sep, rest = entry.strip().partition(":")
                yield f"{kind.lower()}:{_slug(rest)}" if sep and rest.strip() else f"term:{_slug(entry)}"


def _named(payload: Mapping[str, Any], kind: str, names: Iterable[str]) -> Iterator[str]:
    """`kind:value` for each non-empty string of these fields, a single value or a list."""
    for name in names:
        value = payload.get(name)
        for one in value if isinstance(value, list | tuple) else [value]:
            if isinstance(one, str) and one.strip():
                yield f"{kind}:{_slug(one)}"


def _entities(payload: Mapping[str, Any], text: str) -> Iterator[str]:
    yield from _listed(payload.get("entities"))
    actor = _first_text(payload, _ACTOR_FIELDS)
    if actor:
        yield f"person:{_slug(actor)}"
    yield from _named(payload, "person", _PEOPLE_FIELDS)
    repo = _repo(payload)
    if repo:
        yield f"repo:{repo}"
    yield from _named(payload, "project", ("project",))
    yield from _named(payload, "file", _FILE_FIELDS)
    for mention in _MENTION.findall(text):
        yield f"person:{_slug(mention)}"
    for path in _FILE_NAME.findall(text):
        yield f"file:{_slug(path)}"


def _hints(payload: Mapping[str, Any]) -> Hints:
    due = _first_time(payload, ("due_at", "due", "deadline"))
    starts = _first_time(payload, ("starts_at", "start", "start_time", "start_at"))
    done = payload.get("commitment_done") is True or payload.get("commitment_status") == "done"
    opened = isinstance(payload.get("commitment"), str) and bool(payload["commitment"].strip())
    waiting = _first_text(payload, ("waiting_on", "blocking_on"))
    risk = payload.get("risk") or payload.get("risk_level")
    intent = payload.get("intent")
    return Hints(
        due_at=due,
        starts_at=starts,
        commitment="done" if done else "open" if opened or payload.get("commitment") is True else None,
        waiting_on=waiting,
        waiting_resolved=payload.get("waiting_resolved") is True or payload.get("resolved") is True,
        priority=_priority(payload),
        intent=intent.strip().lower()[:40] if isinstance(intent, str) and intent.strip() else None,
        risk=_risk(risk),
    )


def _priority(payload: Mapping[str, Any]) -> Priority | None:
    for name in ("priority", "severity"):
        value = payload.get(name)
        if not isinstance(value, str):
            continue
        word = value.strip().lower()
        if word.upper() in ("P0", "P1", "P2", "P3"):
            found: Priority = word.upper()  # type: ignore[assignment]
            return found
        if word in _SEVERITY:
            return _SEVERITY[word]
    return None


_RISKS: Final[Mapping[str, RiskLevel]] = {"low": "low", "medium": "medium", "high": "high"}


def _risk(value: Any) -> RiskLevel | None:
    return _RISKS.get(value) if isinstance(value, str) else None
