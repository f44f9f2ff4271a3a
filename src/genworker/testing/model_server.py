"""ScriptedModelServer: a real local OpenAI-compatible HTTP server answering from a script.

Tests reach it through LiteLLM exactly like a provider. Every request is recorded; a request
with no step left, or steps left at the end (`assert_done`), fails the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import socket
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

__all__ = [
    "Fail", "Hang", "Reply", "Respond", "ScriptedModelServer", "ToolCallReply", "When", "loopback_listener",
]  # fmt: skip


def loopback_listener() -> socket.socket:
    """A socket already listening on a free loopback port, to hand to `uvicorn.Server.run(sockets=…)`:
    no window in which the port is free for someone else or refuses connections."""
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say they are TCP, and without it
    # each answer on a kept-alive connection waits ~40 ms for the client's delayed ACK
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    return sock


@dataclass(frozen=True)
class ToolCallReply:
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    id: str = ""


@dataclass(frozen=True)
class Reply:
    text: str = ""
    tool_calls: tuple[ToolCallReply, ...] = ()
    prompt_tokens: int = 10
    completion_tokens: int = 5
    # assertions on the request body: an AssertionError, or a False result, fails the test at assert_done
    check: Callable[[dict[str, Any]], object] | None = None


@dataclass(frozen=True)
class Fail:
    status: int
    message: str = "scripted failure"


@dataclass(frozen=True)
class Hang:
    """Never answer (until the server stops): the client's timeout must fire."""


@dataclass(frozen=True)
class When:
    """`step` answers the first request whose messages contain `text`, wherever it is in the script:
    for requests whose order is not fixed (branches running at the same time). With `meet`, the answer
    waits until a request containing `meet` has arrived too (so both were in flight at once)."""

    text: str
    step: Reply | Fail
    meet: str = ""


@dataclass(frozen=True)
class Respond:
    """A standing step (like pydantic-ai's FunctionModel): every request whose messages contain `text`
    is answered by `answer(body)`, wherever the step is in the script, and it is never used up nor
    left over. For many calls whose answers depend on what the request shows (an oracle for a
    routing question). An AssertionError from `answer` fails the test at assert_done."""

    answer: Callable[[dict[str, Any]], Reply]
    text: str = ""


Step = Reply | Fail | Hang | When | Respond


class ScriptedModelServer:
    def __init__(self) -> None:
        self._steps: deque[Step] = deque()
        self.requests: list[dict[str, Any]] = []
        self.client_ports: list[int] = []  # the client's port of each request: one per connection
        self.unexpected: list[dict[str, Any]] = []
        self.failures: list[str] = []
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._started = threading.Event()
        self._release: asyncio.Event | None = None
        self._met: asyncio.Condition | None = None  # created on the server's loop
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self.port = 0

    # -- script ------------------------------------------------------------------

    def expect(self, *steps: Step) -> ScriptedModelServer:
        with self._lock:
            self._steps.extend(steps)
        return self

    def wait_for_requests(self, count: int, timeout: float = 60) -> None:
        """Block until `count` requests have arrived (a step such as Hang may still be answering)."""
        with self._arrived:
            if not self._arrived.wait_for(lambda: len(self.requests) >= count, timeout):
                raise AssertionError(f"{len(self.requests)} model requests arrived within {timeout} s, not {count}")

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def assert_done(self) -> None:
        with self._lock:
            left = [s for s in self._steps if not isinstance(s, Respond)]
        problems = []
        if left:
            problems.append(f"{len(left)} scripted model steps were never requested: {left}")
        if self.unexpected:
            problems.append(f"{len(self.unexpected)} model requests had no scripted step")
        problems.extend(self.failures)
        if problems:
            raise AssertionError("; ".join(problems))

    # -- lifecycle ---------------------------------------------------------------

    def start(self) -> ScriptedModelServer:
        # Listening before the thread starts: the first request waits in the backlog instead of
        # being refused while uvicorn still runs its lifespan (which comes before its own bind).
        self._socket = loopback_listener()
        self.port = self._socket.getsockname()[1]
        routes = [
            Route("/v1/chat/completions", self._completions, methods=["POST"]),
            Route("/chat/completions", self._completions, methods=["POST"]),
        ]
        app = Starlette(routes=routes, lifespan=self._lifespan)
        # asyncio's loop, as LiveServer's (uvloop fails to close a loop in a thread with connections open)
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on", loop="asyncio"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, name="scripted-model", daemon=True
        )
        self._thread.start()
        if not self._started.wait(30):
            raise RuntimeError("scripted model server did not start")
        return self

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        self._loop = asyncio.get_running_loop()
        self._release = asyncio.Event()
        self._started.set()
        yield

    def stop(self) -> None:
        if self._loop is not None and self._release is not None:
            self._loop.call_soon_threadsafe(self._release.set)
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(30)
        if self._socket is not None:
            self._socket.close()

    def __enter__(self) -> ScriptedModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- HTTP --------------------------------------------------------------------

    async def _completions(self, request: Request) -> Response:
        body = await request.json()
        with self._lock:
            self.requests.append(body)
            self.client_ports.append(request.client.port if request.client is not None else 0)
            step = self._take(body)
            self._arrived.notify_all()
        await self._meet(body)
        if step is None:
            self.unexpected.append(body)
            return JSONResponse({"error": {"message": "no scripted step left", "type": "test_error"}}, status_code=500)
        match step:
            case Fail(status=status, message=message):
                kind = "rate_limit_exceeded" if status == 429 else "server_error"
                return JSONResponse({"error": {"message": message, "type": kind, "code": kind}}, status_code=status)
            case Hang():
                assert self._release is not None
                await self._release.wait()
                return JSONResponse({"error": {"message": "released"}}, status_code=503)
            case Reply():
                if step.check is not None:
                    try:
                        if step.check(body) is False:
                            raise AssertionError(f"check {getattr(step.check, '__qualname__', step.check)} was false")
                    except AssertionError as exc:
                        self.failures.append(f"request {len(self.requests)}: {exc}")
                if body.get("stream"):
                    return StreamingResponse(self._stream(body, step), media_type="text/event-stream")
                return JSONResponse(self._completion(body, step))

    def _take(self, body: dict[str, Any]) -> Reply | Fail | Hang | None:
        """The first step that answers `body` (a When only if its text is in the messages)."""
        text = json.dumps(body.get("messages", []), ensure_ascii=False)
        for index, step in enumerate(self._steps):
            if isinstance(step, When | Respond) and step.text not in text:
                continue
            if isinstance(step, Respond):
                try:
                    return step.answer(body)
                except AssertionError as exc:
                    self.failures.append(f"request {len(self.requests)}: {exc}")
                    return None
            del self._steps[index]
            if isinstance(step, When):
                if step.meet:
                    body["_meet"] = step.meet  # read (and dropped) by _meet before answering
                return step.step
            return step
        return None

    async def _meet(self, body: dict[str, Any]) -> None:
        """Hold a When's answer until a request containing its `meet` text has arrived."""
        if self._met is None:
            self._met = asyncio.Condition()
        async with self._met:
            self._met.notify_all()
            meet = body.pop("_meet", "")
            if not meet:
                return

            def arrived() -> bool:
                return any(meet in json.dumps(r.get("messages", []), ensure_ascii=False) for r in list(self.requests))

            try:
                await asyncio.wait_for(self._met.wait_for(arrived), 30)
            except TimeoutError:
                self.failures.append(f"no request with {meet!r} arrived while one with it waited")

    def _tool_calls(self, step: Reply) -> list[dict[str, Any]]:
        return [
            {
                "id": call.id or f"call_{next(self._ids)}",
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
            }
            for call in step.tool_calls
        ]

    def _usage(self, step: Reply) -> dict[str, int]:
        total = step.prompt_tokens + step.completion_tokens
        return {"prompt_tokens": step.prompt_tokens, "completion_tokens": step.completion_tokens, "total_tokens": total}

    def _completion(self, body: dict[str, Any], step: Reply) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": step.text or None}
        if step.tool_calls:
            message["tool_calls"] = self._tool_calls(step)
        return {
            "id": f"chatcmpl-{next(self._ids)}",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", "scripted"),
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if step.tool_calls else "stop"}],
            "usage": self._usage(step),
        }

    async def _stream(self, body: dict[str, Any], step: Reply) -> AsyncIterator[str]:
        base = {
            "id": f"chatcmpl-{next(self._ids)}",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": body.get("model", "scripted"),
        }

        def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
            return (
                "data: "
                + json.dumps({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
                + "\n\n"
            )

        yield chunk({"role": "assistant", "content": ""})
        words = step.text.split(" ") if step.text else []
        for i, word in enumerate(words):
            yield chunk({"content": word if i == 0 else " " + word})
        for index, call in enumerate(self._tool_calls(step)):
            args = call["function"]["arguments"]
            head = {
                "index": index,
                "id": call["id"],
                "type": "function",
                "function": {"name": call["function"]["name"], "arguments": ""},
            }
            yield chunk({"tool_calls": [head]})
            half = len(args) // 2
            for piece in (args[:half], args[half:]):
                yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        yield chunk({}, "tool_calls" if step.tool_calls else "stop")
        if (body.get("stream_options") or {}).get("include_usage"):
            yield "data: " + json.dumps({**base, "choices": [], "usage": self._usage(step)}) + "\n\n"
        yield "data: [DONE]\n\n"


def scripted_env(model: ScriptedModelServer, **extra: str) -> dict[str, str]:
    """Settings for a runtime whose every tier is `model`, with hot reload and the heartbeat off
    (tests start them explicitly); `extra` adds or overrides settings."""
    return {
        "GENWORKER_LLM_MODEL": "openai/scripted",
        "GENWORKER_LLM_API_BASE": model.base_url,
        "GENWORKER_LLM_API_KEY": "k",
        "GENWORKER_HOT_RELOAD": "false",
        "GENWORKER_HEARTBEAT_ENABLED": "false",
        **extra,
    }
