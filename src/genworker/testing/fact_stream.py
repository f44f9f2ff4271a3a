"""A scripted stream of sensed facts about ten topics from six sources, with its labels, and an oracle
model for the context-space router's question: the test and bench material of docs/context-spaces.md.

`scripted_stream()` gives 200 facts (seeded, so every run is the same): eight about a warehouse
migration first, then, 35 days later, the other 192 interleaved — among them the fact that should
bring the archived warehouse space back. Some facts carry strong anchors (a repo issue, a chat
thread, a calendar topic, a goal), the others only words and people. A few are marked for the
oracle to answer below the router's min_confidence (`ambiguous`) or unusably (`garbled`).

`Oracle` answers the router's question (through `ScriptedModelServer` and `Respond`) the way a
perfect model would: the shown space that holds the fact's topic, else NEW — so what the stream
measures is whether the bounded workbench (anchors, retrieval, ranking, resurrection) puts the right
space in front of the model. `bcubed` scores the result against the labels.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from genworker.autonomy.inbox import InboxItem, new_item
from genworker.autonomy.spaces import SpaceService, SpaceSettings, event_from_item
from genworker.autonomy.spaces.lifecycle import new_space
from genworker.testing.model_server import Reply, ToolCallReply

__all__ = ["TOPICS", "Oracle", "ScriptedFact", "Stream", "Topic", "bcubed", "scripted_stream", "seed_spaces"]

TENANT: Final = "acme"
WORKER: Final = "alice"


@dataclass(frozen=True)
class Topic:
    label: str
    title: str
    words: tuple[str, ...]
    people: tuple[str, ...]
    repo: str | None = None
    issue: int | None = None
    thread: str | None = None
    calendar: str | None = None
    goal: str | None = None
    project: str | None = None


TOPICS: Final = (
    Topic("login", "Login outage", ("login", "outage", "sso", "tokens", "expired", "auth", "session", "okta"),
          ("bob", "dana"), "acme/auth", 101, "T-login"),
    Topic("billing", "Invoice errors", ("invoice", "billing", "stripe", "refunds", "ledger", "charges", "vat"),
          ("erin",), "acme/billing", 220),
    Topic("release", "Mobile release 4.2", ("release", "android", "ios", "build", "testflight", "store", "rollout"),
          ("gina", "hank"), calendar="Mobile release sync", project="mobile"),
    Topic("hiring", "Q3 hiring", ("candidate", "interview", "recruiter", "offer", "backend", "hiring", "onsite"),
          ("ivy",), goal="hiring-q3"),
    Topic("warehouse", "Warehouse migration", ("warehouse", "migration", "snowflake", "dbt", "pipelines", "models",
          "backfill", "failing"), ("jack",), project="warehouse"),
    Topic("renewal", "Globex renewal", ("renewal", "contract", "globex", "pricing", "procurement", "discount"),
          ("frank", "kate")),
    Topic("audit", "SOC2 audit", ("audit", "soc2", "controls", "questionnaire", "auditor", "policies"),
          ("liam",), thread="T-audit"),
    Topic("website", "Homepage redesign", ("homepage", "redesign", "figma", "landing", "copy", "hero", "mockups"),
          ("mona",), "acme/web", 77),
    Topic("offsite", "Team offsite", ("offsite", "venue", "travel", "agenda", "hotel", "flights", "dinner"),
          ("nina",), calendar="Team offsite"),
    Topic("latency", "API latency", ("latency", "p99", "database", "index", "slow", "queries", "timeouts"),
          ("omar", "bob"), "acme/api", 350),
)  # fmt: skip
_FILLER: Final = ("status", "blocked", "question", "review", "follow", "note", "check", "urgent", "draft", "plan")
_NOISE_WORDS: Final = tuple(
    f"{a}{b}" for a in ("zor", "quin", "vel", "mar", "tek", "pol", "dra", "sil") for b in ("ax", "eon", "ith", "umo")
)
RESURRECTION_TEXT: Final = "Warehouse migration: dbt models failing again in snowflake pipelines backfill"


@dataclass(frozen=True)
class ScriptedFact:
    n: int
    label: str
    item: InboxItem
    at: datetime  # when it is routed
    ambiguous: bool = False  # the oracle answers below min_confidence
    garbled: bool = False  # the oracle answers with prose, every time
    resurrects: bool = False  # the fact that should bring the archived warehouse space back

    @property
    def summary(self) -> str:
        return event_from_item(self.item, self.at).summary


@dataclass(frozen=True)
class Stream:
    facts: tuple[ScriptedFact, ...]
    start: datetime
    jump: datetime  # when the 192 later facts begin (35 days after the warehouse's first eight)

    @property
    def sources(self) -> set[str]:
        return {event_from_item(f.item, f.at).source for f in self.facts}


def _fact(topic: Topic, rnd: random.Random, text: str) -> InboxItem:
    person = rnd.choice(topic.people)
    kinds = ["chat", "email", "local", "screen"]
    kinds += ["github"] * 3 if topic.repo else []
    kinds += ["calendar"] * 2 if topic.calendar else []
    kinds += ["goal"] * 2 if topic.goal else []
    kinds += ["thread"] * 2 if topic.thread else []
    kind = rnd.choice(kinds)
    t, w = TENANT, WORKER
    payload: dict[str, Any]
    match kind:
        case "github":
            payload = {"source": "github", "repo": topic.repo, "issue": topic.issue, "title": text, "actor": person}
            return new_item(t, w, "webhook", "github", "github.issue_comment", payload)
        case "calendar":
            payload = {"source": "calendar", "topic": topic.calendar, "title": text, "attendees": [person]}
            return new_item(t, w, "webhook", "calendar", "calendar.event_updated", payload)
        case "goal":
            return new_item(t, w, "goal", str(topic.goal), "goal.progress", {"goal_id": topic.goal, "text": text})
        case "thread" | "chat":
            payload = {"text": text, "sender_name": person, "platform": "slack"}
            if kind == "thread":
                payload["thread_id"] = str(topic.thread)
            return new_item(t, w, "channel", "acme~alice~slack", "channel.group_message", payload)
        case "email":
            return new_item(t, w, "email", "mailbox", "email.received", {"subject": text, "from": person})
        case "local":
            payload = {"path": f"notes/{topic.project or topic.label}.md", "text": text}
            return new_item(t, w, "workspace_file", "notes", "file.modified", payload)
        case _:
            payload = {"source": "screen", "text": text, "confidence": 0.4}
            return new_item(t, w, "webhook", "screen", "screen.text", payload)


def _text(topic: Topic, rnd: random.Random, seen: set[str]) -> str:
    while True:
        words = rnd.sample(topic.words, 4)
        text = f"{topic.title}: {' '.join(words)} {rnd.choice(_FILLER)}"
        if text not in seen:
            seen.add(text)
            return text


def scripted_stream(seed: int = 31, *, start: datetime) -> Stream:
    """200 facts: the warehouse's first eight from `start`, the other 192 from 35 days later."""
    rnd = random.Random(seed)
    seen: set[str] = set()
    by_label = {t.label: t for t in TOPICS}
    warehouse = by_label["warehouse"]
    early = [("warehouse", _fact(warehouse, rnd, _text(warehouse, rnd, seen))) for _ in range(8)]
    late_labels = [t.label for t in TOPICS if t.label != "warehouse" for _ in range(20)] + ["warehouse"] * 11
    rnd.shuffle(late_labels)
    late: list[tuple[str, InboxItem, bool]] = []
    for label in late_labels:
        topic = by_label[label]
        late.append((label, _fact(topic, rnd, _text(topic, rnd, seen)), False))
    first_warehouse = next(i for i, (label, _, _) in enumerate(late) if label == "warehouse")
    revival = new_item(TENANT, WORKER, "email", "mailbox", "email.received",
                       {"subject": RESURRECTION_TEXT, "from": "jack"})  # fmt: skip
    late.insert(first_warehouse, ("warehouse", revival, True))
    jump = start + timedelta(days=35)
    facts = [ScriptedFact(n, label, item, start + timedelta(minutes=5 * n)) for n, (label, item) in enumerate(early)]
    unanchored = [i for i, (_, item, _) in enumerate(late) if not event_from_item(item, jump).anchors]
    flagged = [i for i in rnd.sample(unanchored, 8) if not late[i][2]][:7]
    for i, (label, item, resurrects) in enumerate(late):
        at = jump + timedelta(minutes=3 * i)
        ambiguous, garbled = i in flagged[:6], i in flagged[6:]
        facts.append(ScriptedFact(len(facts), label, item, at, ambiguous, garbled, resurrects))
    return Stream(tuple(facts), start, jump)


def seed_spaces(service: SpaceService, count: int, now: datetime, *, seed: int = 7, pinned_every: int = 6) -> int:
    """`count` unrelated spaces, written straight to the store and the index (no routing): the
    crowd the router must find the right space in. Every `pinned_every`-th is due in two days."""
    rnd = random.Random(seed)
    settings = SpaceSettings(enabled=True)
    index = service.index(TENANT, WORKER)
    made = []
    with service.store.locked(TENANT, WORKER):
        for n in range(count):
            words = " ".join(rnd.sample(_NOISE_WORDS, 4))
            payload: dict[str, Any] = {"subject": f"{words} {rnd.choice(_FILLER)} {n}", "from": f"p{n % 40}"}
            if pinned_every and n % pinned_every == 0:
                payload["due_at"] = (now + timedelta(days=2)).isoformat()
            event = event_from_item(new_item(TENANT, WORKER, "email", "noise", "email.received", payload), now)
            made.append(new_space(service.store.next_id(TENANT, WORKER), event, now, settings))
            if len(made) == 500:
                _flush(service, made)
        _flush(service, made)
    service.counts(TENANT, WORKER)
    return index.counts()["active"]


def _flush(service: SpaceService, made: list[Any]) -> None:
    for space in made:
        service.store.save(space)
    service.index(TENANT, WORKER).put(made)
    made.clear()


@dataclass
class Oracle:
    """A perfect model for the router's question: the shown space holding the fact's topic, else NEW
    (at 0.9); below min_confidence (0.5) for an ambiguous fact; prose for a garbled one. It checks
    the question on the way: at most `shown_max` spaces, and the schema's choices are exactly them."""

    stream: Stream
    shown_max: int = 12
    space_label: dict[str, str] = field(default_factory=dict)
    shown: list[int] = field(default_factory=list)
    asked: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self._facts = {f.summary: f for f in self.stream.facts}

    def learned(self, space_id: str, label: str) -> None:
        self.space_label.setdefault(space_id, label)

    def __call__(self, body: dict[str, Any]) -> Reply:
        question = json.loads(body["messages"][1]["content"])
        ids = [s["id"] for s in question["spaces"]]
        choices = body["tools"][0]["function"]["parameters"]["properties"]["choice"]["enum"]
        assert choices == [*ids, "NEW"], choices
        assert 0 < len(ids) <= self.shown_max, f"the model was shown {len(ids)} spaces"
        self.shown.append(len(ids))
        fact = self._facts[question["event"]["summary"]]
        self.asked[fact.summary] += 1
        if fact.garbled:
            return Reply("It looks like the login one to me, probably.")
        right = [i for i in ids if self.space_label.get(i) == fact.label]
        answer = {
            "choice": right[0] if right else "NEW",
            "confidence": 0.5 if fact.ambiguous else 0.9,
            "reason": f"about {fact.label}" if right else "no shown space is about this",
        }
        return Reply(tool_calls=(ToolCallReply("choose_space", answer),))


def bcubed(assigned: Iterable[tuple[str, str]]) -> tuple[float, float]:
    """B-cubed precision and recall of (label, space) pairs: per fact, the share of its space's facts
    with its label, and the share of its label's facts in its space; averaged."""
    pairs: Sequence[tuple[str, str]] = list(assigned)
    per_space = Counter(space for _, space in pairs)
    per_label = Counter(label for label, _ in pairs)
    both = Counter(pairs)
    precision = sum(both[p] / per_space[p[1]] for p in pairs) / len(pairs)
    recall = sum(both[p] / per_label[p[0]] for p in pairs) / len(pairs)
    return precision, recall
