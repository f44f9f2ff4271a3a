"""The model layer through real LiteLLM over HTTP to the scripted local model server."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import litellm
import pytest
from litellm.integrations.custom_logger import CustomLogger

from genworker.llm.bookkeeping import defer_bookkeeping, deferred_count, restore_task_factory
from genworker.llm.client import LLMClient, StreamDone, TextChunk, ToolCallChunk, recording
from genworker.llm.config_source import load_model_config
from genworker.llm.errors import ModelNotConfiguredError, ProviderError
from genworker.llm.intent import LLMCallIntent, Purpose
from genworker.settings import SettingsError, load_settings
from genworker.testing import Fail, Hang, Reply, ScriptedModelServer, ToolCallReply

pytestmark = pytest.mark.anyio
HI = [{"role": "user", "content": "hi"}]


def client_for(tmp_path: Path, server: ScriptedModelServer, **env: str) -> LLMClient:
    base = {
        "GENWORKER_LLM_MODEL": "openai/scripted-standard",
        "GENWORKER_LLM_API_BASE": server.base_url,
        "GENWORKER_LLM_API_KEY": "test-key",
        **env,
    }
    return LLMClient(load_model_config(load_settings(tmp_path, base)))


async def test_completion_records_purpose_tier_group_model_and_tokens(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply("hello", prompt_tokens=7, completion_tokens=3))
    client = client_for(tmp_path, model_server, GENWORKER_LLM_FAST_MODEL="openai/scripted-fast")
    with recording() as calls:
        completion = await client.complete(LLMCallIntent(Purpose.SUMMARIZE), HI)
    assert completion.text == "hello"
    record = completion.record
    assert (record.purpose, record.tier, record.requested_group) == ("summarize", "fast", "fast")
    assert record.actual_model == "scripted-fast"
    assert (record.prompt_tokens, record.completion_tokens) == (7, 3)
    assert record.latency_ms > 0 and record.fallbacks == ()
    assert calls == [record]
    assert model_server.requests[0]["model"] == "scripted-fast"


async def test_fast_with_tools_is_raised_to_standard(tmp_path: Path, model_server: ScriptedModelServer) -> None:
    model_server.expect(Reply("ok"))
    client = client_for(tmp_path, model_server, GENWORKER_LLM_FAST_MODEL="openai/scripted-fast")
    completion = await client.complete(LLMCallIntent(Purpose.CLASSIFY, requires_tools=True), HI)
    assert completion.record.tier == "standard"
    assert model_server.requests[0]["model"] == "scripted-standard"


@pytest.mark.parametrize("failure", [Fail(429, "slow down"), Fail(500), Fail(503), Fail(502)])
async def test_fallback_to_the_next_tier_on_429_and_5xx(
    tmp_path: Path, model_server: ScriptedModelServer, failure: Fail
) -> None:
    model_server.expect(failure, Reply("from strong"))
    client = client_for(tmp_path, model_server, GENWORKER_LLM_REASONING_MODEL="openai/scripted-reasoning")
    completion = await client.complete(LLMCallIntent(Purpose.REASON), HI)
    assert completion.text == "from strong"
    assert completion.record.requested_group == "default"  # strong, standard and fast share the generic model
    assert completion.record.fallbacks[0].startswith("reasoning: ")
    assert [r["model"] for r in model_server.requests] == ["scripted-reasoning", "scripted-standard"]


async def test_fallback_on_timeout(tmp_path: Path, model_server: ScriptedModelServer) -> None:
    model_server.expect(Hang(), Reply("after timeout"))
    client = client_for(
        tmp_path, model_server, GENWORKER_LLM_TIMEOUT="1", GENWORKER_LLM_STRONG_MODEL="openai/scripted-strong"
    )
    completion = await client.complete(LLMCallIntent(Purpose.PLAN), HI)
    assert completion.text == "after timeout"
    assert completion.record.fallbacks == ("strong: timeout",)
    assert [r["model"] for r in model_server.requests] == ["scripted-strong", "scripted-standard"]


async def test_every_tier_failing_is_an_error_not_content(tmp_path: Path, model_server: ScriptedModelServer) -> None:
    model_server.expect(Fail(429), Fail(429), Fail(429), Fail(429))
    tiers = {f"GENWORKER_LLM_{t}_MODEL": f"openai/scripted-{t.lower()}" for t in ("FAST", "STRONG", "REASONING")}
    client = client_for(tmp_path, model_server, **tiers)
    with pytest.raises(ProviderError) as caught:
        await client.complete(LLMCallIntent(Purpose.REASON), HI)
    assert caught.value.kind == "rate_limited"
    assert len(caught.value.tried) == 4


async def test_one_model_for_every_tier_is_one_deployment_and_is_not_retried(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    env = {"GENWORKER_LLM_MODEL": "openai/m", "GENWORKER_LLM_API_KEY": "k"}
    config = load_model_config(load_settings(tmp_path, env))
    assert [m["model_name"] for m in config.model_list] == ["default"]
    assert set(config.tier_groups.values()) == {"default"} and len(config.tier_groups) == 4
    model_server.expect(Fail(429))
    with pytest.raises(ProviderError) as caught:
        await client_for(tmp_path, model_server).complete(LLMCallIntent(Purpose.REASON), HI)
    assert caught.value.tried == ("default: rate_limited",)  # a fallback goes to a different model, not the same one
    assert len(model_server.requests) == 1


async def test_bad_request_does_not_fall_back(tmp_path: Path, model_server: ScriptedModelServer) -> None:
    model_server.expect(Fail(400, "bad tools"))
    client = client_for(tmp_path, model_server)
    with pytest.raises(ProviderError) as caught:
        await client.complete(LLMCallIntent(Purpose.REASON), HI)
    assert caught.value.kind == "bad_request"


async def test_streaming_text_and_tool_calls(tmp_path: Path, model_server: ScriptedModelServer) -> None:
    model_server.expect(Reply("one two three"), Reply(tool_calls=(ToolCallReply("file_read", {"path": "a.md"}, "c1"),)))
    client = client_for(tmp_path, model_server)
    events: list[Any] = [e async for e in client.stream(LLMCallIntent(Purpose.CHAT), HI)]
    assert "".join(e.text for e in events if isinstance(e, TextChunk)) == "one two three"
    assert len([e for e in events if isinstance(e, TextChunk)]) == 3
    tools = [
        {"type": "function", "function": {"name": "file_read", "parameters": {"type": "object", "properties": {}}}}
    ]
    events = [e async for e in client.stream(LLMCallIntent(Purpose.TASK), HI, tools)]
    chunks = [e for e in events if isinstance(e, ToolCallChunk)]
    assert chunks[0].id == "c1" and chunks[0].name == "file_read"
    done = events[-1]
    assert isinstance(done, StreamDone)
    assert done.completion.tool_calls[0].arguments == '{"path": "a.md"}'
    assert model_server.requests[1]["tools"][0]["function"]["name"] == "file_read"


async def test_a_stream_is_closed_once_it_has_the_finish_reason_and_the_usage(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    """Not read past the usage: LiteLLM would assemble the response again and start its success
    logging, whose tasks the deferring task factory counts (llm/bookkeeping.py)."""
    loop = asyncio.get_running_loop()
    defer_bookkeeping(loop)
    try:
        model_server.expect(Reply("hello", prompt_tokens=7, completion_tokens=3), Reply("again"))
        client = client_for(tmp_path, model_server)
        before = deferred_count()
        first = await client.complete(LLMCallIntent(Purpose.CHAT), HI)
        second = await client.complete(LLMCallIntent(Purpose.CHAT), HI)
        assert (first.text, first.finish_reason, second.text) == ("hello", "stop", "again")
        assert len(set(model_server.client_ports)) == 1  # the closed stream's connection served the second call
        assert (first.record.prompt_tokens, first.record.completion_tokens) == (7, 3)
        assert deferred_count() == before
    finally:
        restore_task_factory(loop)


async def test_a_callback_configured_through_litellm_still_gets_the_whole_response(
    tmp_path: Path, model_server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a success callback in LiteLLM's own settings, the stream is read to its end so it runs."""
    logged: list[Any] = []

    class Listener(CustomLogger):
        async def async_log_success_event(self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any) -> None:
            logged.append(response_obj)

    for copied in ("success_callback", "_async_success_callback", "failure_callback", "_async_failure_callback"):
        monkeypatch.setattr(litellm, copied, [])  # LiteLLM copies the callback there: not left to later tests
    monkeypatch.setattr(litellm, "callbacks", [Listener()])
    model_server.expect(Reply("hello", prompt_tokens=7, completion_tokens=3))
    completion = await client_for(tmp_path, model_server).complete(LLMCallIntent(Purpose.CHAT), HI)
    assert (completion.record.prompt_tokens, completion.record.completion_tokens) == (7, 3)
    for _ in range(200):  # bounded: LiteLLM logs in a task of its own
        if logged:
            break
        await asyncio.sleep(0.01)
    assert logged[0].choices[0].message.content == "hello"


async def test_no_model_configured_names_the_files(tmp_path: Path) -> None:
    client = LLMClient(load_model_config(load_settings(tmp_path, {})))
    assert not client.configured
    with pytest.raises(ModelNotConfiguredError, match=r"config_local\.env.*litellm_local\.json"):
        await client.complete(LLMCallIntent(Purpose.CHAT), HI)


async def test_first_use_loads_the_model_layer_with_the_first_call(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    client = client_for(tmp_path, model_server, GENWORKER_LLM_LOAD="first_use")
    assert client.configured and not client.loaded  # ready to serve; LiteLLM's groups not built yet
    model_server.expect(Reply("one"), Reply("two"))
    first, second = await asyncio.gather(*(client.complete(LLMCallIntent(Purpose.CHAT), HI) for _ in range(2)))
    assert client.loaded and {first.text, second.text} == {"one", "two"}  # built once, by either call


async def test_first_use_of_a_model_list_litellm_refuses_is_not_configured_and_says_why(tmp_path: Path) -> None:
    (tmp_path / "litellm_local.json").write_text(
        '{"model_list": [{"model_name": "standard", "litellm_params": {"model": "no-such-provider/x"}}]}',
        encoding="utf-8",
    )
    client = LLMClient(load_model_config(load_settings(tmp_path, {"GENWORKER_LLM_LOAD": "first_use"})))
    assert client.configured
    with pytest.raises(ModelNotConfiguredError, match="LiteLLM rejected the model configuration"):
        await client.complete(LLMCallIntent(Purpose.CHAT), HI)
    assert not client.configured and client.config.state.error  # /readiness now says model_config_invalid


def test_an_unknown_load_mode_names_the_setting(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"GENWORKER_LLM_LOAD='lazy': must be one of start, first_use"):
        load_model_config(load_settings(tmp_path, {"GENWORKER_LLM_LOAD": "lazy"}))


async def test_litellm_file_with_tier_aliases(tmp_path: Path, model_server: ScriptedModelServer) -> None:
    (tmp_path / "litellm_local.json").write_text(
        '{"model_list": [{"model_name": "cheap", "litellm_params": {"model": "openai/from-file", '
        f'"api_base": "{model_server.base_url}", "api_key": "k"}}}}], "tier_aliases": {{"fast": "cheap"}}}}',
        encoding="utf-8",
    )
    config = load_model_config(load_settings(tmp_path, {}))
    assert config.state.configured, config.state.reason
    model_server.expect(Reply("file ok"))
    completion = await LLMClient(config).complete(LLMCallIntent(Purpose.REASON), HI)  # only fast exists
    assert completion.text == "file ok" and completion.record.requested_group == "cheap"


def test_litellm_file_errors_are_named(tmp_path: Path) -> None:
    path = tmp_path / "litellm_local.json"
    path.write_text(
        '{"model_list": [{"model_name": "fast", "litellm_params": {"model": "x"}}], "tier_aliases": {"turbo": "fast"}}',
        encoding="utf-8",
    )
    state = load_model_config(load_settings(tmp_path, {})).state
    assert state.error and "tier_aliases: unknown tiers ['turbo']" in state.reason
    path.write_text('{"model_list": [{"model_name": "fast", "litellm_params": {}}]}', encoding="utf-8")
    assert (
        "model_list[0].litellm_params.model is required" in load_model_config(load_settings(tmp_path, {})).state.reason
    )


async def test_every_failed_model_call_is_a_warning_with_the_providers_words(
    tmp_path: Path, model_server: ScriptedModelServer, caplog: pytest.LogCaptureFixture
) -> None:
    """LiteLLM's own lines stop at WARNING and say nothing of a failed call: the operator learns
    from ours which group failed, why, and whether another was left to try."""
    model_server.expect(Fail(429, "slow down"), Fail(400, "bad tools"))
    client = client_for(tmp_path, model_server, GENWORKER_LLM_REASONING_MODEL="openai/scripted-reasoning")
    caplog.set_level("INFO", logger="genworker.llm")
    with pytest.raises(ProviderError):
        await client.complete(LLMCallIntent(Purpose.REASON), HI)
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "genworker.llm"]
    assert [level for level, _ in lines] == ["WARNING", "WARNING"]
    assert lines[0][1].startswith("model group 'reasoning' failed (rate_limited), 1 left: RateLimitError: ")
    assert "slow down" in lines[0][1]
    assert lines[1][1].startswith("model group 'default' failed: BadRequestError: ") and "bad tools" in lines[1][1]
