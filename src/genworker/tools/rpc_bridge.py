"""The script channel: scripts run in the sandbox and call the run's tools through the ToolPipeline.

`run_script` is the one runner behind execute_code (L1), pre_scripts (L2) and script tools (L3).

One bridge per sandboxed call. The parent keeps one end of a Unix socket pair and the child
inherits the other as a file descriptor (no path: it works the same under a uid drop and under
bubblewrap). The child learns the fd and a per-run random token from its environment; the tiny
client module (`CLIENT_SOURCE`, importable in the sandbox as `genworker_tools`) speaks the protocol:

    request  (one JSON line): {"v": 1, "id": <n>, "token": "...", "tool": "<name>", "arguments": {...}}
    reply    (one JSON line): {"id": <n>, "ok": true, "content": "..."}
                           or {"id": <n>, "ok": false, "kind": "...", "code": "...", "error": "..."}

`kind` is denied | approval_required | failed | tool_error | limit | protocol | auth. A wrong
token ends the connection. Each accepted request becomes
`executor.execute(scope, ToolCall(f"{call_id}.rpc{n}", tool, arguments), caller="script")`, so
policy, hooks, schema checks, audit and redaction apply exactly as for the model's own calls.
"""

from __future__ import annotations

import asyncio
import contextvars
import hmac
import json
import logging
import os
import secrets
import shutil
import socket
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Protocol, assert_never

from genworker.tools.base import ToolCall
from genworker.tools.context import Caller, ToolScope
from genworker.tools.outcomes import ToolCompleted, ToolDenied, ToolFailed, ToolNeedsApproval, ToolOutcome
from genworker.tools.sandbox import (
    SandboxError,
    SandboxLimits,
    SandboxResult,
    prepare_scratch,
    run_sandboxed,
    sandbox_python,
)

__all__ = [
    "CLIENT_MODULE",
    "CLIENT_SOURCE",
    "DEFAULT_MAX_CALLS",
    "MAX_MESSAGE_BYTES",
    "MAX_REJECTED",
    "MAX_SCRIPT_DEPTH",
    "RpcBridge",
    "ScriptLanguage",
    "ScriptNestingError",
    "ToolExecutor",
    "run_script",
    "script_depth",
]

DEFAULT_MAX_CALLS = 50
MAX_MESSAGE_BYTES = 1024 * 1024
MAX_REJECTED = 20  # malformed or refused requests before the bridge hangs up
MAX_SCRIPT_DEPTH = 2  # a script may call a script tool, whose calls may not start another script
CLIENT_MODULE = "genworker_tools"
FD_VAR = "GENWORKER_RPC_FD"
TOKEN_VAR = "GENWORKER_RPC_TOKEN"

ScriptLanguage = Literal["python", "bash"]

# Loads the client and runs the staged program by relative path only: without bwrap, the folders
# above the scratch folder may be closed to the sandbox uid, and the import system would need them.
_PYTHON_BOOT = """\
import sys, types
def _code(path):
    with open(path, encoding="utf-8") as f:
        return compile(f.read(), path, "exec")
tools = types.ModuleType("genworker_tools")
tools.__file__ = sys.argv[1] + "/genworker_tools.py"
exec(_code(tools.__file__), tools.__dict__)
sys.modules["genworker_tools"] = tools
sys.argv = sys.argv[2:]
main = {"__name__": "__main__", "__file__": sys.argv[0], "__builtins__": __builtins__, "tools": tools}
exec(_code(sys.argv[0]), main)
"""


class ScriptNestingError(RuntimeError):
    """A script started from a script started from a script...: refused past MAX_SCRIPT_DEPTH."""


_depth: contextvars.ContextVar[int] = contextvars.ContextVar("genworker_script_depth", default=0)


def script_depth() -> int:
    """How many bridges the current call is nested in (0: called by the model or a workflow)."""
    return _depth.get()


class ToolExecutor(Protocol):
    """What the bridge needs from the ToolPipeline."""

    async def execute(self, scope: ToolScope, call: ToolCall, caller: Caller = "llm") -> ToolOutcome: ...


class RpcBridge:
    """`async with RpcBridge(...) as bridge:` then start the child with `pass_fds=[bridge.child_fd]`
    and `extra_env=bridge.child_env()`. Leaving the block closes the channel."""

    def __init__(
        self,
        executor: ToolExecutor,
        scope: ToolScope,
        *,
        call_id: str,
        max_calls: int = DEFAULT_MAX_CALLS,
    ) -> None:
        self._executor = executor
        self._scope = scope
        self._call_id = call_id
        self._max_calls = max_calls
        self._token = secrets.token_urlsafe(32)
        self._parent: socket.socket | None = None
        self._child: socket.socket | None = None
        self._task: asyncio.Task[None] | None = None
        self._writer: asyncio.StreamWriter | None = None
        self.calls = 0  # accepted requests so far
        self.rejected = 0  # requests refused before reaching the pipeline

    @property
    def child_fd(self) -> int:
        if self._child is None:
            raise RuntimeError("the bridge is not open")
        return self._child.fileno()

    def child_env(self) -> dict[str, str]:
        return {FD_VAR: str(self.child_fd), TOKEN_VAR: self._token}

    async def __aenter__(self) -> RpcBridge:
        self._parent, self._child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        reader, self._writer = await asyncio.open_unix_connection(sock=self._parent, limit=MAX_MESSAGE_BYTES)
        self._task = asyncio.create_task(self._serve(reader, self._writer), name=f"rpc-bridge {self._call_id}")
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._child is not None:
            self._child.close()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._writer is not None:
            self._writer.close()
            await asyncio.gather(self._writer.wait_closed(), return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    line = await reader.readline()
                except ValueError:  # longer than MAX_MESSAGE_BYTES
                    await _send(writer, _error(None, "protocol", "too_large", "request line is too long"))
                    return
                if not line:
                    return
                reply, keep_open = await self._handle(line)
                await _send(writer, reply)
                if not keep_open or self.rejected >= MAX_REJECTED:
                    return
        except OSError:  # the child went away mid-reply
            return
        finally:
            writer.close()

    async def _handle(self, line: bytes) -> tuple[dict[str, Any], bool]:
        try:
            request = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError):
            self.rejected += 1
            return _error(None, "protocol", "bad_json", "request is not a JSON line"), True
        if not isinstance(request, dict):
            self.rejected += 1
            return _error(None, "protocol", "bad_request", "request must be a JSON object"), True
        rid = request.get("id")
        token = request.get("token")
        if not isinstance(token, str) or not hmac.compare_digest(token.encode(), self._token.encode()):
            self.rejected += 1
            return _error(rid, "auth", "bad_token", "wrong or missing bridge token; closing"), False
        if request.get("v", 1) != 1:
            self.rejected += 1
            return _error(rid, "protocol", "bad_version", f"unsupported protocol version {request['v']!r}"), True
        name, arguments = request.get("tool"), request.get("arguments", {})
        if not isinstance(name, str) or not isinstance(arguments, dict):
            self.rejected += 1
            return _error(rid, "protocol", "bad_request", "'tool' must be a string and 'arguments' an object"), True
        if self.calls >= self._max_calls:
            self.rejected += 1
            return _error(rid, "limit", "too_many_calls", f"at most {self._max_calls} tool calls per script"), True
        self.calls += 1
        call = ToolCall(f"{self._call_id}.rpc{self.calls}", name, arguments)
        depth = _depth.set(_depth.get() + 1)
        try:
            outcome = await self._executor.execute(self._scope, call, caller="script")
        finally:
            _depth.reset(depth)
        return _reply(rid, outcome), True


def _reply(rid: Any, outcome: ToolOutcome) -> dict[str, Any]:
    match outcome:
        case ToolCompleted(result=result) if result.is_error:
            return _error(rid, "tool_error", "error", result.content)
        case ToolCompleted(result=result):
            return {"id": rid, "ok": True, "content": result.content}
        case ToolDenied(code=code, reason=reason):
            return _error(rid, "denied", code, reason)
        case ToolNeedsApproval(reason=reason):
            return _error(rid, "approval_required", "approval", f"{reason} (scripts cannot wait for approval)")
        case ToolFailed(code=code, error=error):
            return _error(rid, "failed", code, error)
        case _:
            assert_never(outcome)


def _error(rid: Any, kind: str, code: str, message: str) -> dict[str, Any]:
    return {"id": rid, "ok": False, "kind": kind, "code": code, "error": message}


async def _send(writer: asyncio.StreamWriter, reply: Mapping[str, Any]) -> None:
    writer.write(json.dumps(reply, ensure_ascii=False).encode("utf-8") + b"\n")
    await writer.drain()


async def run_script(
    language: ScriptLanguage,
    source: str,
    *,
    scope: ToolScope,
    executor: ToolExecutor | None,
    call_id: str,
    limits: SandboxLimits,
    stdin: bytes | None = None,
    max_calls: int = DEFAULT_MAX_CALLS,
) -> SandboxResult:
    """Run `source` in the run's scratch folder; with an `executor`, its tool calls go through it.

    Python code gets `tools` (the client module) as a global; bash reaches the client as
    `python3 "$GENWORKER_TOOLS" NAME '{json arguments}'`.
    """
    if script_depth() >= MAX_SCRIPT_DEPTH:
        raise ScriptNestingError(f"scripts may nest at most {MAX_SCRIPT_DEPTH} deep; this call would be deeper")
    python = sandbox_python()
    if language == "python" and python is None:
        logging.getLogger("genworker.sandbox").warning("no Python interpreter the sandbox user can run")
        raise SandboxError("no Python interpreter the sandbox user can run (see sandbox status)")
    scratch = await prepare_scratch(scope)
    stage = f".genworker-{secrets.token_hex(6)}"
    program = "main.py" if language == "python" else "main.sh"
    await asyncio.to_thread(_stage, scratch, stage, {CLIENT_MODULE + ".py": CLIENT_SOURCE, program: source})
    if language == "python":
        argv = [str(python), "-I", "-c", _PYTHON_BOOT, stage, f"{stage}/{program}"]
    else:
        argv = ["bash", "--noprofile", "--norc", f"{stage}/{program}"]
    env = {"GENWORKER_TOOLS": f"{stage}/{CLIENT_MODULE}.py"}
    try:
        if executor is None:
            return await run_sandboxed(argv, cwd=scratch, stdin=stdin, limits=limits, extra_env=env)
        async with RpcBridge(executor, scope, call_id=call_id, max_calls=max_calls) as bridge:
            return await run_sandboxed(
                argv, cwd=scratch, stdin=stdin, limits=limits,
                extra_env={**env, **bridge.child_env()}, pass_fds=[bridge.child_fd],
            )  # fmt: skip
    finally:
        await asyncio.to_thread(_unstage, scratch, stage)


def _stage(scratch: Path, stage: str, files: Mapping[str, str]) -> None:
    # A fresh directory under a random name, written through its fd: whatever earlier sandboxed
    # code left in the scratch folder (symlinks, hard links) is never written through.
    scratch_fd = os.open(scratch, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        os.mkdir(stage, 0o755, dir_fd=scratch_fd)
        stage_fd = os.open(stage, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=scratch_fd)
        try:
            os.fchmod(stage_fd, 0o755)
            for name, text in files.items():
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=stage_fd)
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    os.fchmod(fd, 0o644)
                    handle.write(text)
        finally:
            os.close(stage_fd)
    finally:
        os.close(scratch_fd)


def _unstage(scratch: Path, stage: str) -> None:
    shutil.rmtree(scratch / stage, ignore_errors=True)  # fd-based on Linux: does not follow symlinks


CLIENT_SOURCE = '''\
"""Call this run's tools from sandboxed code: `tools.call(name, **arguments) -> str`.

Every call goes through the runtime's ToolPipeline (policy, approval, audit). A refused or failed
call raises ToolError. From a shell: python3 "$GENWORKER_TOOLS" NAME '{"arg": 1}'
"""
import json
import os
import socket
import sys
import threading

__all__ = ["ToolError", "call"]


class ToolError(Exception):
    def __init__(self, kind, code, message):
        super().__init__(f"[{kind}:{code}] {message}")
        self.kind, self.code, self.message = kind, code, message


_TOKEN = os.environ.pop("GENWORKER_RPC_TOKEN", "")
_FD = os.environ.get("GENWORKER_RPC_FD", "")
_lock = threading.Lock()
_state = {"sock": None, "reader": None, "next": 0}


def _channel():
    if _state["sock"] is None:
        if not _FD or not _TOKEN:
            raise ToolError("unavailable", "no_bridge", "no tool bridge in this sandbox")
        sock = socket.socket(fileno=int(_FD))
        _state["sock"], _state["reader"] = sock, sock.makefile("rb")
    return _state["sock"], _state["reader"]


def call(name, /, **arguments):
    """Run tool `name` with `arguments`; return its text result or raise ToolError."""
    with _lock:
        sock, reader = _channel()
        _state["next"] += 1
        request = {"v": 1, "id": _state["next"], "token": _TOKEN, "tool": name, "arguments": arguments}
        try:
            sock.sendall(json.dumps(request).encode("utf-8") + b"\\n")
            line = reader.readline()
        except OSError as exc:
            raise ToolError("closed", "bridge_closed", str(exc)) from None
    if not line:
        raise ToolError("closed", "bridge_closed", "the tool bridge closed the connection")
    reply = json.loads(line)
    if reply.get("ok"):
        return reply["content"]
    raise ToolError(reply.get("kind", "failed"), reply.get("code", "error"), reply.get("error", ""))


if __name__ == "__main__":
    try:
        print(call(sys.argv[1], **(json.loads(sys.argv[2]) if len(sys.argv) > 2 else {})))
    except ToolError as exc:
        print(exc, file=sys.stderr)
        sys.exit(2)
'''
