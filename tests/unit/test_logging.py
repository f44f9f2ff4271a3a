"""Structured log lines: ids from contextvars, secrets redacted, one line per decision."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import SecretStr

from genworker.observability.logging import bind, configure_logging, current_ids, log_decision, redact, redact_text
from genworker.observability.request_id import request_id_of

log = logging.getLogger("genworker.test.logging")


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    out = io.StringIO()
    configure_logging("json", "INFO", out)
    try:
        yield out
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved[0]:
            root.addHandler(handler)
        root.setLevel(saved[1])


def parsed(out: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_json_lines_carry_the_bound_ids_and_tasks_inherit_them(lines: io.StringIO) -> None:
    async def in_a_task() -> None:
        log.info("inside the run")

    with bind(request_id="req-1", tenant_id="acme"), bind(worker_id="alice", run_id="run_1", task_id="task_1"):
        log.info("hello %s", "world")
        asyncio.run(in_a_task())
    log.info("outside")
    first, second, third = parsed(lines)
    assert first["msg"] == "hello world" and first["level"] == "INFO" and first["logger"] == log.name
    ids = {"request_id": "req-1", "tenant_id": "acme", "worker_id": "alice", "run_id": "run_1", "task_id": "task_1"}
    assert {k: first[k] for k in ids} == ids
    assert {k: second[k] for k in ids} == ids
    assert not set(ids) & set(third)
    assert first["ts"].endswith("+00:00")


def test_secrets_are_redacted_in_messages_fields_and_tracebacks(lines: io.StringIO) -> None:
    key = "gwk_0123456789ab_" + "S" * 43
    log.info(
        "calling with Authorization: Bearer abcdefghijklmnop and %s and sk-%s",
        key,
        "x" * 40,
        extra={"password": "hunter2", "config": {"api_key": "k-123", "user": "ann"}, "secret": SecretStr("s3")},
    )
    try:
        raise RuntimeError("token=tok_live_123456 leaked")
    except RuntimeError:
        log.exception("failed")
    text = lines.getvalue()
    for secret in ("abcdefghijklmnop", key, "x" * 40, "hunter2", "k-123", 's3"', "tok_live_123456"):
        assert secret not in text, secret
    first, second = parsed(lines)
    assert first["password"] == "***" and first["config"] == {"api_key": "***", "user": "ann"}
    assert first["secret"] == "***"
    assert "Bearer ***" in first["msg"] and "gwk_***" in first["msg"]
    assert "RuntimeError" in second["exc"] and "token=***" in second["exc"]


def test_one_line_per_decision_with_structured_fields(lines: io.StringIO) -> None:
    with bind(tenant_id="acme", worker_id="alice", run_id="run_9"):
        log_decision(log, "gate", "confirm", reasons=["external effect", "trust level 1"], tool="send_email")
    (line,) = parsed(lines)
    assert line["decision"] == "gate" and line["outcome"] == "confirm"
    assert line["reasons"] == ["external effect", "trust level 1"] and line["tool"] == "send_email"
    assert line["run_id"] == "run_9" and line["msg"] == "gate: confirm"


def test_text_format_appends_ids_and_redacts() -> None:
    out = io.StringIO()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        configure_logging("text", "INFO", out)
        with bind(run_id="run_2"):
            log.warning("retry with password=pw123 soon")
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved[0]:
            root.addHandler(handler)
        root.setLevel(saved[1])
    line = out.getvalue().strip()
    assert line.endswith("[run_id=run_2]") and "WARNING genworker.test.logging" in line
    assert "pw123" not in line and "password=***" in line


def test_misuse_is_refused_with_what_is_allowed() -> None:
    with pytest.raises(ValueError, match="GENWORKER_LOG_FORMAT='yaml': expected text or json"):
        configure_logging("yaml")
    with pytest.raises(ValueError, match=r"unknown log id field.*user_id"), bind(user_id="u"):  # type: ignore[arg-type]
        pass
    assert current_ids() == {}


def test_redaction_helpers() -> None:
    assert redact({"token": "", "nested": [{"client_secret": "abc"}], "n": 3}) == {
        "token": "",
        "nested": [{"client_secret": "***"}],
        "n": 3,
    }
    assert redact_text("https://x.test/cb?access_token=abc123&page=2") == "https://x.test/cb?access_token=***&page=2"
    assert redact_text("slack xoxb-1234567890-abcdef") == "slack xox-***"
    assert redact_text("nothing secret here") == "nothing secret here"


def test_request_ids_are_kept_only_when_well_formed() -> None:
    assert request_id_of("edge-7f3a.b:c") == "edge-7f3a.b:c"
    for bad in (None, "", "has space", "x" * 129, "semi;colon"):
        fresh = request_id_of(bad)
        assert fresh != bad and len(fresh) == 32


def test_litellm_lines_come_out_once_in_our_format_and_only_from_warning_up(
    lines: io.StringIO, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """LiteLLM's own handler printed every line a second time, with colour codes; its per-call INFO
    lines ("200 OK") were noise at the default level."""
    from genworker.llm import loader

    monkeypatch.delenv("LITELLM_LOG", raising=False)
    loader._logs_through_ours()  # as when LiteLLM is loaded
    router = logging.getLogger("LiteLLM Router")
    router.info("litellm.acompletion(model=openai/x) 200 OK")
    router.warning("falling back to the standard tier")
    assert [(line["logger"], line["msg"]) for line in parsed(lines)] == [
        ("LiteLLM Router", "falling back to the standard tier")
    ]
    out, err = capfd.readouterr()
    assert "falling back" not in out + err  # not written a second time by LiteLLM's handler
