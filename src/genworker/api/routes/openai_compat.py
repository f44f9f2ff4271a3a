"""OpenAI-compatible `/v1/chat/completions` and `/v1/models`: `model` names a worker
(`worker` or `tenant/worker`); the key's tenant is the only tenant reachable."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse
from pydantic import ConfigDict, Field
from sse_starlette import EventSourceResponse

from genworker.api.auth import principal_worker, require_principal
from genworker.api.bodies import RequestBody
from genworker.api.deps import get_runtime
from genworker.api.errors import ApiError, error_responses
from genworker.api.openai_messages import history_from_openai
from genworker.api.runs import RunHandle, start_run
from genworker.auth import Principal
from genworker.engine.base import RunResult
from genworker.engine.events import RunError, TextDelta
from genworker.runtime.composition import Runtime
from genworker.worker.router import RouteDone, RouteRequest, RouterEvent, run_to_end

router = APIRouter(prefix="/v1", tags=["openai-compatible"])


class StreamOptions(RequestBody):
    include_usage: bool = False


class ContentPart(RequestBody):
    model_config = ConfigDict(extra="allow")

    type: str = "text"
    text: str = ""


class ChatMessage(RequestBody):
    model_config = ConfigDict(extra="allow")  # name, tool_calls, tool_call_id ... are passed on as history

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = Field(None, description="text, or parts whose `text` is read")


class CompletionRequest(RequestBody):
    model_config = ConfigDict(extra="allow")  # temperature, top_p ... are accepted and ignored

    model: str = Field(description="worker id or tenant/worker", examples=["assistant"])
    messages: list[ChatMessage] = Field(
        min_length=1,
        description="the last user message is the task, the ones before it its history",
        json_schema_extra={"contains": {"type": "object", "properties": {"role": {"const": "user"}}}},
    )
    stream: bool = False
    stream_options: StreamOptions | None = None
    tools: list[dict[str, Any]] | None = Field(
        None, description="not accepted (400): the worker uses its own tools", json_schema_extra={"maxItems": 0}
    )


Auth = Annotated[Principal, Depends(require_principal)]
RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


@router.get("/models", summary="The caller's workers, as models")
async def list_models(principal: Auth, runtime: RuntimeDep) -> dict[str, Any]:
    state = runtime.registry.tenant(principal.tenant_id)
    workers = [w for w in (state.workers.values() if state else ()) if principal.can_use(w.worker_id)]
    data = [
        {
            "id": w.worker_id,
            "object": "model",
            "created": 0,
            "owned_by": principal.tenant_id,
            "name": w.persona.identity.name,
        }
        for w in sorted(workers, key=lambda w: w.worker_id)
    ]
    return {"object": "list", "data": data}


@router.post(
    "/chat/completions",
    summary="OpenAI-compatible chat completion with a worker",
    responses={
        200: {
            "description": "a chat.completion, or with `stream: true` chat.completion.chunk events ending in [DONE]",
            "content": {"application/json": {}, "text/event-stream": {}},
        },
        **error_responses(400, 404, 502, 503),
    },
)
async def chat_completions(body: CompletionRequest, principal: Auth, runtime: RuntimeDep) -> Any:
    if body.tools:
        raise ApiError(400, "unsupported_parameter", "tools are not accepted: the worker uses its own tools")
    tenant_id, worker_id = principal_worker(principal, body.model)
    text, history = history_from_openai([m.model_dump(exclude_unset=True) for m in body.messages])
    req = RouteRequest(tenant_id, worker_id, text, "openai", principal.key_id, conversational=False, history=history)
    handle = await start_run(runtime, req)
    created = int(time.time())
    completion_id = f"chatcmpl-{handle.accepted.run_id}"
    if body.stream:
        usage = bool(body.stream_options and body.stream_options.include_usage)
        return EventSourceResponse(_chunks(handle, body.model, completion_id, created, usage), ping=15)
    result = await _result(handle)
    if result.status == "failed":
        raise ApiError(502, result.error_code or "run_failed", result.error or "the run failed")
    prompt, completion = _usage(result)
    return JSONResponse(
        {
            "id": completion_id,
            "object": "chat.completion",
            "created": created,
            "model": body.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": result.output},
                    "finish_reason": _finish(result),
                }
            ],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
        }
    )


async def _result(handle: RunHandle) -> RunResult:
    errors: list[RunError] = []

    def keep_error(event: RouterEvent) -> None:
        if isinstance(event, RunError):
            errors.append(event)

    done = await run_to_end(handle.events(), on_event=keep_error)
    if done is not None:
        return done.result
    if errors:  # the run could not be recorded (api/runs.py): its error id, not a guess
        raise ApiError(500, errors[-1].code, errors[-1].message)
    raise ApiError(500, "internal_error", "the run ended without a result")


def _usage(result: RunResult) -> tuple[int, int]:
    return sum(c.prompt_tokens for c in result.llm_calls), sum(c.completion_tokens for c in result.llm_calls)


def _finish(result: RunResult) -> str:
    return "length" if result.status == "max_turns_exceeded" else "stop"


async def _chunks(handle: RunHandle, model: str, completion_id: str, created: int, usage: bool) -> AsyncIterator[str]:
    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        body = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [choice],
            **extra,
        }
        return json.dumps(body)

    yield chunk({"role": "assistant", "content": ""})
    async for event in handle.events():
        if isinstance(event, TextDelta) and event.text and not event.step_id:
            yield chunk({"content": event.text})
        elif isinstance(event, RunError):
            yield json.dumps({"error": {"code": event.code, "message": event.message, "type": "run_error"}})
            return
        elif isinstance(event, RouteDone):
            yield chunk({}, _finish(event.result))
            if usage:
                prompt, completion = _usage(event.result)
                totals = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
                yield json.dumps(
                    {
                        "id": completion_id,
                        "object": "chat.completion.chunk",
                        "created": created,
                        "model": model,
                        "choices": [],
                        "usage": totals,
                    }
                )
    yield "[DONE]"
