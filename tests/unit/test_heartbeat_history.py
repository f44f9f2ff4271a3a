"""The heartbeat's messages in the main session: capped, rolled up, other messages untouched."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from genworker.autonomy.heartbeat import (
    HEARTBEAT_NAME,
    ROLLUP_NAME,
    HistoryLimits,
    MainSessionHeartbeat,
    heartbeat_messages,
    roll_up,
)
from genworker.conversation import (
    AssistantMessage,
    ChatMessage,
    ConversationSession,
    FileSessionStore,
    SessionManager,
    UserMessage,
    main_session_id,
)
from genworker.worker.context.tokens import count_tokens

T0 = datetime(2027, 3, 1, 9, 0, tzinfo=UTC)
LIMITS = HistoryLimits(keep_recent=3, rollup_lines=4, line_tokens=12, message_tokens=40)


def session(*messages: ChatMessage) -> ConversationSession:
    return ConversationSession(
        session_id=main_session_id("alice"),
        tenant_id="acme",
        worker_id="alice",
        kind="main",
        thread_id="main",
        created_at=T0,
        updated_at=T0,
        messages=messages,
    )


def report(n: int) -> AssistantMessage:
    return AssistantMessage(f"report {n}", name=HEARTBEAT_NAME, created_at=T0 + timedelta(hours=n))


def add(s: ConversationSession, message: ChatMessage) -> ConversationSession:
    return roll_up(replace(s, messages=(*s.messages, message)), LIMITS, T0)


def test_nothing_rolls_up_below_the_limit() -> None:
    s = session(report(1), report(2), report(3))
    assert roll_up(s, LIMITS, T0) is s


def test_older_reports_fold_into_one_rollup_in_their_place() -> None:
    hello = UserMessage("hello", created_at=T0)
    s = session(hello, report(1), report(2), AssistantMessage("chat answer", created_at=T0), report(3), report(4))
    rolled = roll_up(s, LIMITS, T0)
    assert [(m.name, m.content.splitlines()[0]) for m in rolled.messages] == [
        (None, "hello"),
        (ROLLUP_NAME, "Earlier heartbeat reports, condensed (oldest first):"),
        (HEARTBEAT_NAME, "report 2"),
        (None, "chat answer"),
        (HEARTBEAT_NAME, "report 3"),
        (HEARTBEAT_NAME, "report 4"),
    ]
    assert rolled.metadata["heartbeat_rollup"] == {"lines": ("- 2027-03-01 10:00 UTC: report 1",), "omitted": 0}


def test_the_rollup_keeps_its_newest_lines_and_counts_the_rest() -> None:
    s = session()
    for n in range(1, 21):
        s = add(s, report(n))
    names = [m.name for m in s.messages]
    assert names == [ROLLUP_NAME, HEARTBEAT_NAME, HEARTBEAT_NAME, HEARTBEAT_NAME]
    rollup = s.messages[0].content
    assert "13 older ones dropped" in rollup and "report 17" in rollup and "report 13:" not in rollup
    assert [m.content for m in s.messages[1:]] == ["report 18", "report 19", "report 20"]


def test_what_a_turn_reads_back_is_bounded() -> None:
    long = " ".join(f"word{i}" for i in range(400))
    s = session()
    sizes = []
    for n in range(60):
        message = AssistantMessage(f"{n} {long}", name=HEARTBEAT_NAME, created_at=T0)
        s = add(s, message)
        sizes.append(count_tokens([{"role": m.role, "content": m.content} for m in heartbeat_messages(s, LIMITS)]))
    assert sizes[20:] == [sizes[20]] * 40  # flat once full (here the messages are not capped: roll_up only)
    assert len(s.messages) == LIMITS.keep_recent + 1


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        HistoryLimits(keep_recent=0)


@pytest.mark.anyio
async def test_say_caps_the_message_and_persists_the_rollup(tmp_path: Path) -> None:
    main = MainSessionHeartbeat(SessionManager(FileSessionStore(tmp_path)), LIMITS)
    stored = await main.say("acme", "alice", " ".join(["alarm"] * 200), run_id="run_1", now=T0)
    assert count_tokens(stored) <= LIMITS.message_tokens and "trimmed" in stored
    for n in range(5):
        await main.say("acme", "alice", f"report {n}", run_id=None, now=T0)
    history = await main.history("acme", "alice")
    assert [m.get("name") for m in history] == [ROLLUP_NAME, HEARTBEAT_NAME, HEARTBEAT_NAME, HEARTBEAT_NAME]
    assert history[0]["role"] == "system" and [m["content"] for m in history[1:]] == [
        "report 2",
        "report 3",
        "report 4",
    ]
    assert await main.history("acme", "bob") == ()
