"""Cross-channel recall (seed §2.3 note): a message that looks like it continues an earlier matter
is searched for in the worker's other channels' history. A match becomes an *offer*: the worker
asks first, and only an accepted offer's compressed summary enters the conversation's memory."""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from genworker.memory.index import MemoryIndex, SearchFilters, fts_text
from genworker.memory.jsonl import JsonlFile
from genworker.memory.models import MemoryHit

__all__ = [
    "CONTINUATION",
    "CrossChannelOffer",
    "OfferStore",
    "find_continuation",
    "looks_like_continuation",
    "offer_answer",
]

CONTINUATION = re.compile(
    r"\b(as (we )?discussed|continu\w*|follow(ing)?[- ]?up|last time|earlier|previous(ly)?|"
    r"that (issue|matter|ticket|thing|topic)|where were we|any (news|update)s?)\b|上次|之前|继续|接着|刚才|跟进|那件事",
    re.I,
)
_SUMMARY_CHARS = 600
_CJK_CHAR = re.compile(r"[\u3400-\u9fff]")
_STOP = frozenset((
    "the", "and", "for", "was", "what", "when", "where", "who", "how", "any", "about", "that", "this",
    "with", "from", "have", "has", "had", "you", "your", "our", "are", "is", "it", "of", "on",
    "in", "to", "do", "did", "does", "please", "can", "could", "would", "will", "update", "news",
))  # fmt: skip


_YES = re.compile(r"^\s*(yes|yeah|yep|sure|ok(ay)?|please( do)?|go ahead|do it|是的|是|好的|好|可以|需要|要)\b", re.I)
_NO = re.compile(r"^\s*(no|nope|not now|don'?t|do not|skip|不用|不要|不需要|算了)\b", re.I)


def offer_answer(text: str) -> Literal["accept", "decline"] | None:
    """A reply that answers a pending offer's question: yes, no, or neither (None)."""
    if _NO.match(text):
        return "decline"
    if _YES.match(text):
        return "accept"
    return None


def looks_like_continuation(text: str) -> bool:
    return CONTINUATION.search(text) is not None


class CrossChannelOffer(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    offer_id: str
    thread_id: str  # where the question was asked
    other_thread_id: str
    other_channel: str
    summary: str
    question: str
    status: Literal["pending", "accepted", "declined"] = "pending"
    created_at: datetime


def _terms(text: str) -> set[str]:
    words = {
        w for w in re.findall(r"\w+", CONTINUATION.sub(" ", fts_text(text).lower())) if len(w) > 2 or _CJK_CHAR.match(w)
    }
    return words - _STOP


def find_continuation(
    index: MemoryIndex, text: str, thread_id: str, channel: str, *, min_shared: int = 2
) -> CrossChannelOffer | None:
    """An offer when `text` continues a matter found in another channel's history (sharing at
    least `min_shared` content words with it), else None."""
    if not looks_like_continuation(text):
        return None
    hits = index.search(
        text, SearchFilters(scopes=(), doc_type="message", exclude_thread=thread_id, any_scope=True), limit=8
    )
    wanted = _terms(text)
    hits = [h for h in hits if h.metadata.get("channel") != channel and len(wanted & _terms(h.text)) >= min_shared]
    if not hits:
        return None
    other = hits[0].metadata.get("thread_id", "")
    same_thread = [h for h in hits if h.metadata.get("thread_id") == other]
    summary = _summary(same_thread)
    other_channel = hits[0].metadata.get("channel", "another channel")
    when = hits[0].created_at.strftime("%Y-%m-%d")
    return CrossChannelOffer(
        offer_id=f"xco_{secrets.token_hex(6)}",
        thread_id=thread_id,
        other_thread_id=other,
        other_channel=other_channel,
        summary=summary,
        question=f"This sounds like what we discussed on {other_channel} on {when}. "
        "Shall I bring a short summary of that conversation in here?",
        created_at=datetime.now(UTC),
    )


def _summary(hits: Sequence[MemoryHit]) -> str:
    lines = []
    for hit in sorted(hits, key=lambda h: h.created_at):
        first = re.split(r"(?<=[.!?。！？])\s", hit.text.strip(), maxsplit=1)[0]
        lines.append(f"{hit.kind}: {first[:200]}")
    return "\n".join(lines)[:_SUMMARY_CHARS]


class OfferStore:
    def __init__(self, memory_dir: Path) -> None:
        self.file: JsonlFile[CrossChannelOffer] = JsonlFile(
            memory_dir / "cross_channel_offers.jsonl", CrossChannelOffer
        )

    def add(self, offer: CrossChannelOffer) -> None:
        self.file.update(lambda records: records.append(offer))

    def pending(self, thread_id: str) -> list[CrossChannelOffer]:
        return [o for o in self.file.load() if o.thread_id == thread_id and o.status == "pending"]

    def decide(self, offer_id: str, decision: Literal["accept", "decline"]) -> CrossChannelOffer:
        found: list[CrossChannelOffer] = []

        def change(records: list[CrossChannelOffer]) -> None:
            for o in records:
                if o.offer_id == offer_id:
                    if o.status != "pending":
                        raise ValueError(f"cross-channel offer {offer_id!r} was already {o.status}")
                    o.status = "accepted" if decision == "accept" else "declined"
                    found.append(o.model_copy())
                    return
            raise LookupError(f"no cross-channel offer {offer_id!r}")

        self.file.update(change)
        return found[0]
