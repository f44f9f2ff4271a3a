"""bash_execute and execute_code in a real `genworker run` (uvicorn on uvloop, as users run it): a
scripted model turn calls both tools over the chat API, with bubblewrap and on a host without it
(as root the sandbox then drops to a leased uid itself)."""

from __future__ import annotations

import json
import os
import queue
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest

from genworker.auth import ApiKeyStore
from genworker.testing import Reply, ScriptedModelServer, ToolCallReply, scripted_env
from genworker.tools.sandbox import sandbox_status

GENWORKER = Path(sys.executable).with_name("genworker")
ADMIN = "e2e-admin-token"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def genworker_run(workspace: Path, home: Path, env: dict[str, str]) -> Iterator[str]:
    """`genworker run` on a free port; yields its URL once uvicorn says start-up is complete."""
    port = free_port()
    (home / "configs").mkdir(parents=True)
    server = subprocess.Popen(
        [str(GENWORKER), "run", "--port", str(port), "--workspace", str(workspace)],
        cwd=home, env={**env, "GENWORKER_CONFIG_DIR": str(home / "configs")},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, encoding="utf-8",
    )  # fmt: skip
    lines: queue.Queue[str | None] = queue.Queue()
    log: list[str] = []

    def pump() -> None:
        assert server.stderr is not None
        for line in server.stderr:
            log.append(line)
            lines.put(line)
        lines.put(None)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        while True:
            line = lines.get(timeout=120)
            assert line is not None, "the server exited:\n" + "".join(log)
            if "Application startup complete" in line:
                break
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=60)
        reader.join(timeout=60)
        assert server.stderr is not None
        server.stderr.close()
    assert "Traceback" not in "".join(log), "".join(log)


def sse_events(response: httpx.Response) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in response.iter_lines() if line.startswith("data:")]


@pytest.mark.parametrize("host", ["bwrap", "no-bwrap"])
def test_a_chat_turn_runs_both_sandbox_tools(
    host: str, tmp_path: Path, small_workspace: Callable[..., Path], model_server: ScriptedModelServer
) -> None:
    env = {**os.environ, **scripted_env(model_server, GENWORKER_ADMIN_TOKEN=ADMIN)}
    if host == "bwrap":
        status = sandbox_status()
        if status["isolation"] != "bwrap":
            pytest.skip(f"bubblewrap not usable here: {status['reason']}")
        expected = "bwrap"
    else:
        env["PATH"] = str(tmp_path / "no-bwrap")  # the server finds no bwrap; sandboxed calls get their own PATH
        expected = "rlimits+uid" if os.geteuid() == 0 else "rlimits"
    workspace = small_workspace({"acme": ["alice"]})
    api_key = ApiKeyStore(workspace).create("acme")[1]
    model_server.expect(
        Reply(
            tool_calls=(
                ToolCallReply("bash_execute", {"command": "echo shell-$((6 * 7))"}, "c1"),
                ToolCallReply("execute_code", {"code": "print('python', 6 * 7)"}, "c2"),
            )
        ),
        Reply("Both ran."),
    )
    with genworker_run(workspace, tmp_path / "home", env) as url:
        debug = httpx.get(f"{url}/api/v1/debug/runtime", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=60)
        with httpx.stream(
            "POST", f"{url}/api/v1/chat/stream", json={"worker_id": "alice", "message": "run both"},
            headers={"Authorization": f"Bearer {api_key}"}, timeout=120,
        ) as response:  # fmt: skip
            assert response.status_code == 200, response.read()
            events = sse_events(response)
    assert debug.json()["components"]["sandbox"]["details"]["isolation"] == expected
    results = {e["toolCallId"]: e["content"] for e in events if e["type"] == "TOOL_CALL_RESULT"}
    assert results == {"c1": "shell-42", "c2": "python 42"}
    tool_messages = [m for m in model_server.requests[1]["messages"] if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["content"]) for m in tool_messages] == [("c1", "shell-42"), ("c2", "python 42")]
    assert "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT").endswith("Both ran.")
