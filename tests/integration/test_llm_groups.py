"""How a call reaches a model group (llm/groups.py): a group of one deployment straight through
`litellm.acompletion`, a group of several through LiteLLM's Router; the stream of a direct call is
read past the finish reason from the provider's stream, so LiteLLM does not assemble it again. All
through real LiteLLM over HTTP to local model servers."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import litellm
import pytest
from fastapi import FastAPI, Request
from litellm.integrations.custom_logger import CustomLogger
from litellm.litellm_core_utils.streaming_handler import CustomStreamWrapper
from starlette.responses import StreamingResponse

from genworker.llm.client import LLMClient
from genworker.llm.config_source import load_model_config
from genworker.llm.errors import ProviderError
from genworker.llm.groups import ModelGroups
from genworker.llm.intent import LLMCallIntent, Purpose
from genworker.settings import load_settings
from genworker.testing import Fail, Reply, ScriptedModelServer
from genworker.testing.live_server import LiveServer

pytestmark = pytest.mark.anyio
HI = [{"role": "user", "content": "hi"}]
REQUEST = {"messages": HI, "stream": True, "stream_options": {"include_usage": True}, "timeout": 30.0}


@pytest.fixture(autouse=True)
def no_litellm_callbacks(monkeypatch: pytest.MonkeyPatch) -> None:
    """LiteLLM copies a callback set in `litellm.callbacks` into lists of its own at the first call, where
    it stays: each test here starts with none (an earlier test's would keep streams read to their end)."""
    for name in ("callbacks", "success_callback", "_async_success_callback", "failure_callback", "input_callback"):
        monkeypatch.setattr(litellm, name, [])
    monkeypatch.setattr(litellm, "_async_failure_callback", [])


def deployment(server: ScriptedModelServer, model: str = "openai/scripted") -> dict[str, Any]:
    return {"model": model, "api_base": server.base_url, "api_key": "k"}


def client_for(tmp_path: Path, model: str, api_base: str) -> LLMClient:
    env = {"GENWORKER_LLM_MODEL": model, "GENWORKER_LLM_API_BASE": api_base, "GENWORKER_LLM_API_KEY": "k"}
    return LLMClient(load_model_config(load_settings(tmp_path, env)))


async def _drain(stream: Any) -> None:
    async for _ in stream:
        pass


async def test_a_one_deployment_group_is_called_directly_and_sends_what_the_router_sends(
    model_server: ScriptedModelServer,
) -> None:
    groups = ModelGroups(
        [
            {"model_name": "one", "litellm_params": deployment(model_server)},
            {"model_name": "two", "litellm_params": deployment(model_server)},
            {"model_name": "two", "litellm_params": deployment(model_server)},
        ]
    )
    assert groups.direct("one") and not groups.direct("two")
    model_server.expect(Reply("a"), Reply("b"))
    await _drain(await groups.open("one", REQUEST))
    await _drain(await groups.open("two", REQUEST))
    direct, routed = model_server.requests
    assert direct == routed


def test_a_deployment_with_a_rate_or_concurrency_limit_goes_through_the_router(
    model_server: ScriptedModelServer,
) -> None:
    """Only the Router enforces a deployment's rpm, tpm and max_parallel_requests."""
    groups = ModelGroups(
        [
            {"model_name": "free", "litellm_params": deployment(model_server)},
            {"model_name": "rpm", "litellm_params": {**deployment(model_server), "rpm": 60}},
            {"model_name": "parallel", "litellm_params": {**deployment(model_server), "max_parallel_requests": 2}},
            {"model_name": "tpm", "litellm_params": deployment(model_server), "tpm": 1000},
        ]
    )
    assert [groups.direct(g) for g in ("free", "rpm", "parallel", "tpm")] == [True, False, False, False]


async def test_a_direct_call_is_not_retried_by_litellm(model_server: ScriptedModelServer) -> None:
    """The fallback is genworker's, between groups: a 429 fails the group at once, as through the Router."""
    groups = ModelGroups([{"model_name": "one", "litellm_params": deployment(model_server)}])
    model_server.expect(Fail(429, "slow down"))
    with pytest.raises(litellm.RateLimitError):
        await groups.open("one", REQUEST)
    assert len(model_server.requests) == 1


async def test_litellm_does_not_assemble_a_streamed_answer_again_unless_a_callback_listens(
    tmp_path: Path, model_server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tokens come from the provider's usage chunk, read past LiteLLM's wrapper; with a success
    callback in LiteLLM's settings the stream is read through the wrapper to its end, which assembles
    it (the count proves the spy sees that step)."""
    assembled: list[int] = []
    finalize = CustomStreamWrapper._finalize_completed_stream

    async def counting(self: CustomStreamWrapper, cache_hit: bool) -> Any:
        assembled.append(1)
        return await finalize(self, cache_hit)

    monkeypatch.setattr(CustomStreamWrapper, "_finalize_completed_stream", counting)
    model_server.expect(Reply("hello", prompt_tokens=7, completion_tokens=3), Reply("again", prompt_tokens=4))
    client = client_for(tmp_path, "openai/scripted", model_server.base_url)
    first = await client.complete(LLMCallIntent(Purpose.CHAT), HI)
    assert (first.text, first.finish_reason) == ("hello", "stop")
    assert (first.record.prompt_tokens, first.record.completion_tokens) == (7, 3)
    assert assembled == []

    monkeypatch.setattr(litellm, "callbacks", [CustomLogger()])
    second = await client.complete(LLMCallIntent(Purpose.CHAT), HI)
    assert (second.text, second.record.prompt_tokens) == ("again", 4)
    assert assembled
    assert len(set(model_server.client_ports)) == 1  # the first stream's connection served the second call


async def test_the_cost_of_a_priced_model_is_recorded(tmp_path: Path, model_server: ScriptedModelServer) -> None:
    model_server.expect(Reply("hello", prompt_tokens=1000, completion_tokens=200))
    client = client_for(tmp_path, "openai/gpt-4o-mini", model_server.base_url)
    record = (await client.complete(LLMCallIntent(Purpose.CHAT), HI)).record
    prompt_cost, completion_cost = litellm.cost_per_token(
        model="gpt-4o-mini", prompt_tokens=1000, completion_tokens=200
    )
    assert record.actual_model == "gpt-4o-mini"
    assert record.cost_usd == pytest.approx(prompt_cost + completion_cost) and record.cost_usd > 0


def usage_with_the_finish_reason() -> FastAPI:
    """A provider whose last chunk carries both the finish reason and the usage, and no usage chunk
    of its own (as some OpenAI-compatible servers stream)."""
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def completions(request: Request) -> StreamingResponse:
        body = await request.json()
        base = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": body["model"]}

        async def chunks() -> AsyncIterator[str]:
            for delta, finish in (({"role": "assistant", "content": "all"}, None), ({"content": " done"}, "stop")):
                choice = {"index": 0, "delta": delta, "finish_reason": finish}
                usage = {"usage": {"prompt_tokens": 11, "completion_tokens": 2, "total_tokens": 13}} if finish else {}
                yield f"data: {json.dumps({**base, 'choices': [choice], **usage})}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(chunks(), media_type="text/event-stream")

    return app


async def test_usage_that_comes_with_the_finish_reason_is_recorded(tmp_path: Path) -> None:
    with LiveServer(usage_with_the_finish_reason()) as server:
        client = client_for(tmp_path, "openai/together", server.url + "/v1")
        completion = await client.complete(LLMCallIntent(Purpose.CHAT), HI)
    assert (completion.text, completion.finish_reason) == ("all done", "stop")
    assert (completion.record.prompt_tokens, completion.record.completion_tokens) == (11, 2)


async def test_a_group_of_several_deployments_goes_through_the_router_and_falls_back(
    tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    reasoning = deployment(model_server, "openai/scripted-reasoning")
    model_list = [
        {"model_name": "reasoning", "litellm_params": reasoning},
        {"model_name": "reasoning", "litellm_params": reasoning},
        {"model_name": "standard", "litellm_params": deployment(model_server, "openai/scripted-standard")},
    ]
    (tmp_path / "litellm_local.json").write_text(json.dumps({"model_list": model_list}), encoding="utf-8")
    client = LLMClient(load_model_config(load_settings(tmp_path, {})))
    model_server.expect(Fail(429), Reply("from standard", prompt_tokens=6), Reply("from reasoning", prompt_tokens=8))
    first = await client.complete(LLMCallIntent(Purpose.REASON), HI)
    assert (first.text, first.record.fallbacks, first.record.prompt_tokens) == (
        "from standard",
        ("reasoning: rate_limited",),
        6,
    )
    second = await client.complete(LLMCallIntent(Purpose.REASON), HI)
    assert (second.text, second.record.requested_group, second.record.prompt_tokens) == (
        "from reasoning",
        "reasoning",
        8,
    )
    model_server.expect(Fail(429), Fail(503))
    with pytest.raises(ProviderError) as caught:
        await client.complete(LLMCallIntent(Purpose.REASON), HI)
    assert caught.value.tried == ("reasoning: rate_limited", "standard: server_error")
