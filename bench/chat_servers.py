"""Servers for bench/chat_http.py and bench/scaling.py, each run in its own process:

model     an OpenAI-compatible stub that always answers instantly: a tool call when the last
          message is the user's, a final text when it is a tool result. `GET /captured` gives the
          last request that opened a turn (messages and tools), so the bare endpoints can send the
          same
baseline  a bare FastAPI endpoint making the same two LiteLLM calls and streaming the text: the
          messages (system prompt, user turn) and tool list genworker sent, read once from the
          file the bench writes from `/captured`; with `close-early` as its last argument, it
          closes each stream once the finish reason and the usage came instead of reading it to
          its end
openai    the same endpoint making the same two calls with the `openai` client instead of LiteLLM:
          how far the two calls' own cost is from the plain HTTP client's
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import uvicorn

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def model_app() -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, StreamingResponse
    from starlette.routing import Route

    captured: dict[str, Any] = {}

    async def completions(request: Request) -> StreamingResponse:
        body = await request.json()
        last = body["messages"][-1]
        if last["role"] == "user":
            captured.update(messages=body["messages"], tools=body.get("tools", []))

        def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
            payload = {
                "id": "c",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": body["model"],
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
            return f"data: {json.dumps(payload)}\n\n"

        def stream() -> Any:
            yield chunk({"role": "assistant", "content": ""})
            if last["role"] == "tool":
                for word in ("The", " note", " says", " buy", " milk."):
                    yield chunk({"content": word})
                yield chunk({}, "stop")
            else:
                call = {
                    "index": 0,
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "file_read", "arguments": json.dumps({"path": "files/notes.md"})},
                }
                yield chunk({"tool_calls": [call]})
                yield chunk({}, "tool_calls")
            usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
            yield (
                "data: "
                + json.dumps(
                    {
                        "id": "c",
                        "object": "chat.completion.chunk",
                        "created": 0,
                        "model": body["model"],
                        "choices": [],
                        "usage": usage,
                    }
                )
                + "\n\n"
            )
            yield "data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    async def last_turn(request: Request) -> JSONResponse:
        return JSONResponse(captured)

    return Starlette(
        routes=[Route("/v1/chat/completions", completions, methods=["POST"]), Route("/captured", last_turn)]
    )


def litellm_completion(model_base: str, close_early: bool) -> Any:
    """The bare endpoints' model call through a LiteLLM Router, as the issue specified them."""
    from litellm.router import Router

    router = Router(
        model_list=[
            {
                "model_name": "standard",
                "litellm_params": {"model": "openai/bench", "api_base": model_base, "api_key": "k", "timeout": 60.0},
            }
        ],
        num_retries=0,
        disable_cooldowns=True,
    )
    options = {"stream": True, "stream_options": {"include_usage": True}, "timeout": 60.0}

    async def completion(messages: list[dict[str, Any]], tools: Any) -> Any:
        stream = await router.acompletion(model="standard", messages=messages, tools=tools, **options)
        finished = counted = False
        async for c in stream:
            yield c
            finished = finished or bool(c.choices and c.choices[0].finish_reason)
            counted = counted or bool(getattr(c, "usage", None))
            if close_early and finished and counted:
                await stream.aclose()
                return

    return completion


def openai_completion(model_base: str) -> Any:
    """The same call with the `openai` client (its stream ends at the provider's `[DONE]`)."""
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=model_base, api_key="k", max_retries=0, timeout=60.0)

    async def completion(messages: list[dict[str, Any]], tools: Any) -> Any:
        stream = await client.chat.completions.create(
            model="bench", messages=messages, tools=tools, stream=True, stream_options={"include_usage": True}
        )
        async for c in stream:
            yield c

    return completion


def chat_app(completion: Any, notes: Path, calls: Path) -> Any:
    """A bare chat endpoint: the captured turn's first call, the tool (the note read), the second call
    streamed as text."""
    from fastapi import FastAPI
    from sse_starlette import EventSourceResponse

    turn: dict[str, Any] = {}  # genworker's first call of a turn: {"messages": [...], "tools": [...]}
    app = FastAPI()

    @app.post("/chat")
    async def chat(body: dict[str, Any]) -> EventSourceResponse:  # parsed, as genworker parses its body
        if not turn:
            turn.update(json.loads(await asyncio.to_thread(calls.read_text, encoding="utf-8")))
        tools = turn["tools"]

        async def events() -> Any:
            messages: list[dict[str, Any]] = list(turn["messages"])
            calls: dict[int, dict[str, str]] = {}
            async for c in completion(messages, tools):
                for d in (c.choices[0].delta.tool_calls or ()) if c.choices else ():
                    slot = calls.setdefault(d.index, {"id": "", "name": "", "arguments": ""})
                    slot["id"] = d.id or slot["id"]
                    slot["name"] = (d.function.name if d.function else None) or slot["name"]
                    slot["arguments"] += (d.function.arguments if d.function else None) or ""
            call = calls[0]
            content = await asyncio.to_thread(notes.read_text, encoding="utf-8")
            yield {"data": json.dumps({"type": "tool_result", "content": content})}
            messages += [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": call["name"], "arguments": call["arguments"]},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": call["id"], "content": content},
            ]
            async for c in completion(messages, tools):
                if c.choices and c.choices[0].delta.content:
                    yield {"data": json.dumps({"type": "text", "delta": c.choices[0].delta.content})}
            yield {"data": json.dumps({"type": "done"})}

        return EventSourceResponse(events())

    return app


if __name__ == "__main__":
    kind, port = sys.argv[1], int(sys.argv[2])
    if kind == "model":
        app = model_app()
    else:
        base, notes, calls = sys.argv[3], Path(sys.argv[4]), Path(sys.argv[5])
        if kind == "openai":
            completion = openai_completion(base)
        else:
            completion = litellm_completion(base, close_early=sys.argv[6:] == ["close-early"])
        app = chat_app(completion, notes, calls)
    # The stub keeps idle connections for the whole run: a server reusing one as the stub closes it
    # (uvicorn's default is 5 s, shorter than a round of the other servers) would get a read error.
    keep_alive = 3600 if kind == "model" else 5
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", timeout_keep_alive=keep_alive)
