"""The heartbeat's part of a worker's main session: its reports, kept bounded by rolling up.

The heartbeat speaks in the main session (``{worker}.main``) with assistant messages named
``heartbeat``: summaries that need attention and isolated-run results. Only the newest
`keep_recent` stay verbatim; older ones fold into one system message named ``heartbeat_rollup``
holding at most `rollup_lines` one-line digests (the lines themselves live in the session's
metadata under ``heartbeat_rollup``; the message renders them). Every message is capped in tokens,
so what a heartbeat turn reads back — and what the session file holds — stays the same size however
many days the worker runs. Other messages in the main session are left as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Final

from genworker.conversation import (
    AssistantMessage,
    ChatMessage,
    ConversationSession,
    SessionManager,
    SystemMessage,
    main_session_id,
    to_model_messages,
)
from genworker.worker.context.tokens import truncate_tokens

__all__ = [
    "HEARTBEAT_NAME",
    "ROLLUP_KEY",
    "ROLLUP_NAME",
    "HistoryLimits",
    "MainSessionHeartbeat",
    "heartbeat_messages",
    "roll_up",
]

HEARTBEAT_NAME: Final = "heartbeat"
ROLLUP_NAME: Final = "heartbeat_rollup"
ROLLUP_KEY: Final = "heartbeat_rollup"  # session metadata: {"lines": [...], "omitted": n}


@dataclass(frozen=True, slots=True)
class HistoryLimits:
    keep_recent: int = 8  # heartbeat messages kept verbatim
    rollup_lines: int = 24  # digests of older ones kept in the roll-up
    line_tokens: int = 48  # per digest line
    message_tokens: int = 300  # per heartbeat message

    def __post_init__(self) -> None:
        if min(self.keep_recent, self.rollup_lines, self.line_tokens, self.message_tokens) < 1:
            raise ValueError("every history limit must be at least 1")


def _is_heartbeat(message: ChatMessage) -> bool:
    return message.name == HEARTBEAT_NAME


def _is_rollup(message: ChatMessage) -> bool:
    return message.name == ROLLUP_NAME


def _digest(message: ChatMessage, limits: HistoryLimits) -> str:
    text = " ".join(message.content.split())
    stamp = message.created_at.strftime("%Y-%m-%d %H:%M %Z").strip()
    return f"- {stamp}: {truncate_tokens(text, limits.line_tokens, what='report')}".replace("\n", " ")


def _render(lines: Sequence[str], omitted: int) -> str:
    dropped = f"; {omitted} older ones dropped" if omitted else ""
    return f"Earlier heartbeat reports, condensed (oldest first{dropped}):\n" + "\n".join(lines)


def roll_up(session: ConversationSession, limits: HistoryLimits, now: datetime) -> ConversationSession:
    """`session` with all but the newest `keep_recent` heartbeat messages folded into the roll-up."""
    messages = session.messages
    reports = [i for i, m in enumerate(messages) if _is_heartbeat(m)]
    surplus = len(reports) - limits.keep_recent
    if surplus <= 0:
        return session
    folded = set(reports[:surplus])
    old: Any = session.metadata.get(ROLLUP_KEY) or {}
    lines = [str(line) for line in old.get("lines", ())]
    omitted = int(old.get("omitted", 0))
    lines.extend(_digest(messages[i], limits) for i in sorted(folded))
    if len(lines) > limits.rollup_lines:
        omitted += len(lines) - limits.rollup_lines
        lines = lines[-limits.rollup_lines :]
    rollup = SystemMessage(_render(lines, omitted), name=ROLLUP_NAME, created_at=now)
    first = min([i for i, m in enumerate(messages) if _is_rollup(m)] + [min(folded)])
    kept: list[ChatMessage] = []
    for index, message in enumerate(messages):
        if index == first:
            kept.append(rollup)
        if index not in folded and not _is_rollup(message):
            kept.append(message)
    metadata = {**session.metadata, ROLLUP_KEY: {"lines": lines, "omitted": omitted}}
    return replace(session, messages=tuple(kept), metadata=metadata)


def heartbeat_messages(session: ConversationSession, limits: HistoryLimits) -> tuple[ChatMessage, ...]:
    """What a heartbeat turn reads back: the roll-up, then the newest heartbeat messages."""
    rollups = [m for m in session.messages if _is_rollup(m)][-1:]
    recent = [m for m in session.messages if _is_heartbeat(m)][-limits.keep_recent :]
    return (*rollups, *recent)


class MainSessionHeartbeat:
    """Reads and writes the heartbeat's messages in a worker's main session."""

    def __init__(self, sessions: SessionManager, limits: HistoryLimits | None = None) -> None:
        self.sessions = sessions
        self.limits = limits or HistoryLimits()

    @staticmethod
    def key(worker_id: str) -> str:
        """The main session key isolated runs are bound to."""
        return main_session_id(worker_id)

    async def history(self, tenant_id: str, worker_id: str) -> tuple[dict[str, Any], ...]:
        """The bounded heartbeat history as model messages."""
        session = await self.sessions.get(tenant_id, main_session_id(worker_id))
        if session is None:
            return ()
        return to_model_messages(heartbeat_messages(session, self.limits))

    async def say(self, tenant_id: str, worker_id: str, text: str, *, run_id: str | None, now: datetime) -> str:
        """Append one heartbeat message (capped), rolling up older ones; returns the text as stored."""
        capped = truncate_tokens(text.strip(), self.limits.message_tokens, what="report")
        message = AssistantMessage(capped, name=HEARTBEAT_NAME, run_id=run_id, created_at=now)
        session = await self.sessions.main_session(tenant_id, worker_id)

        def change(current: ConversationSession) -> ConversationSession:
            return roll_up(replace(current, messages=(*current.messages, message)), self.limits, now)

        await self.sessions.aggregate.apply(session, change)
        return capped
