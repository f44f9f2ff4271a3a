"""Session values: ids, the message union, the one codec and its schema_version gate, history windows."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import TypeAdapter

from genworker.conversation import (
    SCHEMA_VERSION,
    AssistantMessage,
    ChatMessage,
    ConversationSession,
    SessionCorruptError,
    SessionSchemaError,
    SystemMessage,
    ToolCallRequest,
    ToolMessage,
    UserMessage,
    decode_session,
    encode_session,
    main_session_id,
    recent_messages,
    thread_session_id,
    to_model_messages,
    validate_thread_id,
)
from genworker.ids import InvalidIdError, validate_id

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


def session(**changes: Any) -> ConversationSession:
    base = ConversationSession(
        session_id="alice.t1",
        tenant_id="acme",
        worker_id="alice",
        kind="thread",
        thread_id="t1",
        created_at=T0,
        updated_at=T0,
    )
    return dataclasses.replace(base, **changes)


def full_session() -> ConversationSession:
    return session(
        ttl_s=60,
        version=3,
        metadata={"channel": "slack", "tags": ["a", "b"], "nested": {"k": 1}},
        messages=(
            SystemMessage("be brief", created_at=T0),
            UserMessage("hi", created_at=T0, run_id="r1", name="bob"),
            AssistantMessage(
                "", tool_calls=(ToolCallRequest("c1", "search", '{"q": "x"}'),), created_at=T0, run_id="r1"
            ),
            ToolMessage("found", "c1", name="search", created_at=T0, run_id="r1"),
            AssistantMessage("done", created_at=T0 + timedelta(seconds=1), run_id="r1"),
        ),
    )


# -- ids ---------------------------------------------------------------------------


def test_session_ids_are_validated_ids() -> None:
    assert thread_session_id("alice", "t1") == "alice.t1"
    assert main_session_id("alice") == "alice.main"
    assert validate_id(thread_session_id("sales.bot", "abc-1_2")) == "sales.bot.abc-1_2"


def test_ids_stay_one_to_one_for_worker_ids_with_dots() -> None:
    # "a.b" + "c" and "a" + "b.c" would both be "a.b.c"; thread ids may not contain '.'
    assert thread_session_id("a.b", "c") == "a.b.c"
    with pytest.raises(InvalidIdError, match=r"no '\.'"):
        thread_session_id("a", "b.c")


@pytest.mark.parametrize("bad", ["", "../x", "a/b", "main", "x" * 65, "-lead", "a b"])
def test_bad_thread_ids_are_refused(bad: str) -> None:
    with pytest.raises(InvalidIdError):
        validate_thread_id(bad)


def test_main_is_reserved_for_the_main_session() -> None:
    with pytest.raises(InvalidIdError, match="reserved"):
        thread_session_id("alice", "main")


def test_a_session_must_match_its_id() -> None:
    with pytest.raises(ValueError, match="does not match"):
        session(session_id="bob.t1")
    with pytest.raises(InvalidIdError):
        session(tenant_id="../etc")
    main = session(session_id="alice.main", kind="main", thread_id="main")
    assert main.kind == "main"


def test_naive_datetimes_are_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        session(updated_at=datetime(2025, 1, 1))  # noqa: DTZ001
    with pytest.raises(ValueError, match="timezone-aware"):
        UserMessage("x", created_at=datetime(2025, 1, 1))  # noqa: DTZ001


def test_sessions_are_frozen_values() -> None:
    value = full_session()
    with pytest.raises(dataclasses.FrozenInstanceError):
        value.version = 9  # type: ignore[misc]
    with pytest.raises(TypeError):
        value.metadata["channel"] = "x"  # type: ignore[index]
    assert value.metadata["tags"] == ("a", "b")
    assert isinstance(value.messages, tuple)


# -- codec -------------------------------------------------------------------------


def test_round_trip_keeps_every_field() -> None:
    value = full_session()
    raw = encode_session(value, indent=2)
    assert json.loads(raw)["schema_version"] == SCHEMA_VERSION
    assert decode_session(raw, "mem") == value


def test_messages_are_tagged_by_role() -> None:
    data = json.loads(encode_session(full_session()))
    assert [m["role"] for m in data["messages"]] == ["system", "user", "assistant", "tool", "assistant"]
    parsed = TypeAdapter(ChatMessage).validate_python(
        {"role": "tool", "content": "x", "tool_call_id": "c9", "created_at": "2025-01-01T00:00:00Z"}
    )
    assert isinstance(parsed, ToolMessage) and parsed.tool_call_id == "c9"


@pytest.mark.parametrize("version", [999, 0, "1", None, True])
def test_unknown_schema_version_is_rejected_naming_the_source(version: object) -> None:
    data = json.loads(encode_session(full_session()))
    data["schema_version"] = version
    with pytest.raises(SessionSchemaError) as caught:
        decode_session(json.dumps(data), "/ws/tenants/acme/sessions/alice.t1.json")
    message = str(caught.value)
    assert "/ws/tenants/acme/sessions/alice.t1.json" in message and repr(version) in message
    assert f"reads version {SCHEMA_VERSION}" in message


def test_missing_schema_version_is_rejected() -> None:
    data = json.loads(encode_session(full_session()))
    del data["schema_version"]
    with pytest.raises(SessionSchemaError, match="None"):
        decode_session(json.dumps(data), "f.json")


@pytest.mark.parametrize(
    ("raw", "detail"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        (b"\xff\xfe", "not valid JSON"),
    ],
)
def test_unreadable_documents_name_the_source(raw: str | bytes, detail: str) -> None:
    with pytest.raises(SessionCorruptError, match=f"f.json: unreadable session: {detail}"):
        decode_session(raw, "f.json")


def test_schema_mismatch_lists_the_bad_fields() -> None:
    data = json.loads(encode_session(full_session()))
    data["messages"][1]["role"] = "robot"
    data["created_at"] = "2025-01-01T00:00:00"
    with pytest.raises(SessionCorruptError) as caught:
        decode_session(json.dumps(data), "f.json")
    assert "created_at" in str(caught.value) and "messages.1" in str(caught.value)


# -- messages for the model ---------------------------------------------------------


def test_to_model_messages_is_openai_shaped() -> None:
    assert to_model_messages(full_session().messages) == (
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi", "name": "bob"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "search", "arguments": '{"q": "x"}'}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "found"},
        {"role": "assistant", "content": "done"},
    )


def test_history_window_drops_orphaned_tool_results() -> None:
    messages = full_session().messages
    assert recent_messages(messages, None) == messages
    assert recent_messages(messages, 5) == messages
    assert recent_messages(messages, 2) == (messages[4],)  # the tool result lost its call
    assert recent_messages(messages, 3) == messages[2:]
    assert recent_messages(messages, 0) == ()
