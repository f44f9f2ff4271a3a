"""The texts the heartbeat sends through the router: the summary turn, a task, an isolated run.

Every item is rendered within a token budget, and a run takes at most the batch size of items, so a
prompt never grows with the inbox. Task and isolated texts go through skill matching like any task,
so their own wording avoids skill keywords ("summary", "help" ...): only the item should pick a skill.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Final

from genworker.autonomy.heartbeat.answer import ANSWER_SHAPE
from genworker.autonomy.heartbeat.meta import OpenConcern
from genworker.autonomy.inbox import InboxItem
from genworker.worker.context.tokens import truncate_tokens
from genworker.workspace.models.base import thaw

__all__ = ["DEFAULT_ITEM_TOKENS", "describe_item", "isolated_prompt", "summary_prompt", "task_prompt", "title_of"]

DEFAULT_ITEM_TOKENS: Final = 400
_OPEN_CONCERNS_SHOWN: Final = 5
_TITLE_FIELDS: Final = ("title", "subject", "summary", "path", "message", "branch")


def title_of(item: InboxItem, limit: int = 120) -> str:
    """A one-line label: the payload's title-like field, else the event type."""
    for name in _TITLE_FIELDS:
        value = item.payload.get(name)
        if isinstance(value, str) and value.strip():
            text = " ".join(value.split())
            label = f"{item.event_type}: {text}"
            return label if len(label) <= limit else label[: limit - 1] + "…"
    return item.event_type


def describe_item(item: InboxItem, max_tokens: int = DEFAULT_ITEM_TOKENS) -> str:
    stamp = item.created_at.strftime("%Y-%m-%d %H:%M %Z").strip()
    head = f"[{item.item_id}] {item.event_type} from {item.source_type}/{item.source_id} at {stamp}"
    if item.route:
        head += f" (route: {item.route})"
    payload = json.dumps(thaw(item.payload), ensure_ascii=False, sort_keys=True, default=str)
    return f"{head}\n{truncate_tokens(payload, max_tokens, keep='middle', what='payload')}"


def summary_prompt(
    items: Sequence[InboxItem], open_concerns: Sequence[OpenConcern] = (), *, item_tokens: int = DEFAULT_ITEM_TOKENS
) -> str:
    listed = "\n\n".join(f"{n}. {describe_item(item, item_tokens)}" for n, item in enumerate(items, start=1))
    concerns = ""
    if open_concerns:
        shown = open_concerns[-_OPEN_CONCERNS_SHOWN:]
        lines = "\n".join(f"- {c.title} ({c.action}, since {c.opened_at:%Y-%m-%d %H:%M})" for c in shown)
        concerns = f"\n\nStill open from earlier heartbeats:\n{lines}"
    return (
        f"Heartbeat check. {len(items)} new item(s) arrived in your inbox since the last check:\n\n"
        f"{listed}{concerns}\n\n"
        "Decide whether anything here needs the user's attention now. Most checks need none: stay silent "
        "unless something is new, relevant to the user and worth interrupting them for; do not repeat what "
        "your earlier heartbeat reports already said.\n"
        f"Answer with exactly one JSON object and nothing else: {ANSWER_SHAPE}. "
        'Use "attention": false and an empty message when there is nothing to report; otherwise write the '
        "message to the user, short and specific."
    )


def task_prompt(item: InboxItem, reason: str, *, item_tokens: int = DEFAULT_ITEM_TOKENS) -> str:
    return (
        f"Work on this item from your inbox ({reason}):\n\n{describe_item(item, item_tokens)}\n\n"
        "Do what it calls for within your duties and finish with a short account of what you did."
    )


def isolated_prompt(
    item: InboxItem, reason: str, main_session_key: str, *, item_tokens: int = DEFAULT_ITEM_TOKENS
) -> str:
    return (
        f"Handle this item from your inbox on your own, in a separate run ({reason}); your result goes back "
        f"to your main session {main_session_key}:\n\n{describe_item(item, item_tokens)}\n\n"
        "Investigate and act within your duties, then end with the outcome in a few sentences."
    )
