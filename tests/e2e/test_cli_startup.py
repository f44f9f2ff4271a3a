"""`genworker run` answers /health as soon as it listens, while the application, the model layer and the
runtime load in the background; /readiness says 503 with what is loading until the runtime has started
(issue #28). Requests that arrive meanwhile wait for it, within GENWORKER_STARTUP_WAIT_S.

Each server is the real command (uvicorn, uvloop) in its own process. To see a phase for certain, the
process is launched through a small wrapper that holds the start-up where a given module is first
imported (the application, LiteLLM, the tokenizer's tables) until the test writes a byte to a pipe —
an import hook in the server's own process, since no real peer can pause an import.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from slack_sdk.signature import SignatureVerifier

from genworker.testing import Reply, ScriptedModelServer
from genworker.testing.credentials import SLACK_SIGNING_SECRET
from genworker.testing.live_server import LiveServer
from genworker.testing.vendors import Vendor

LAUNCH = """
import importlib.abc, os, sys

class Hold(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == os.environ["HOLD_AT"]:
            sys.meta_path.remove(self)
            if os.read(int(os.environ["HOLD_FD"]), 1) == b"f":
                raise ImportError(f"{name}: failed on purpose by the test")
        return None

sys.meta_path.insert(0, Hold())
from genworker.cli import main
sys.exit(main(["run", *sys.argv[1:]]))
"""
STARTING = ("app_loading", "model_loading", "runtime_starting")
DEADLINE_S = 180  # a bound on waiting for a loaded 2-core machine, not a measurement


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Held:
    process: subprocess.Popen[str]
    url: str
    release_fd: int
    log: Path

    def release(self, byte: bytes = b"x") -> None:
        os.write(self.release_fd, byte)

    def get(self, path: str) -> httpx.Response:
        return httpx.get(self.url + path, timeout=DEADLINE_S)

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=DEADLINE_S)


def until(check: Callable[[], Any], what: str) -> Any:
    """Poll `check` until it returns something truthy; fail after DEADLINE_S."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        try:
            found = check()
        except httpx.TransportError:  # not listening yet
            found = None
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@contextmanager
def held_server(tmp_path: Path, workspace: Path, hold_at: str, **env: str) -> Iterator[Held]:
    """`genworker run` on `workspace`, its start-up held where `hold_at` is first imported."""
    port = free_port()
    configs = tmp_path / "configs"
    configs.mkdir(exist_ok=True)
    read_fd, write_fd = os.pipe()
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV")
    environ = {k: v for k, v in os.environ.items() if k in keep}
    environ |= {"GENWORKER_CONFIG_DIR": str(configs), "HOLD_AT": hold_at, "HOLD_FD": str(read_fd), **env}
    log = tmp_path / "server.log"
    with log.open("w", encoding="utf-8") as sink:
        process = subprocess.Popen(
            [sys.executable, "-c", LAUNCH, "--port", str(port), "--workspace", str(workspace)],
            env=environ, stdout=sink, stderr=subprocess.STDOUT, pass_fds=(read_fd,), text=True, encoding="utf-8",
        )  # fmt: skip
    os.close(read_fd)
    held = Held(process, f"http://127.0.0.1:{port}", write_fd, log)
    try:
        yield held
    finally:
        os.close(write_fd)  # an unreleased hold lets go (the read sees the end of the pipe)
        if process.poll() is None:
            process.kill()
            process.wait(timeout=60)


def model_env(model: str) -> dict[str, str]:
    return {"GENWORKER_LLM_MODEL": "openai/scripted", "GENWORKER_LLM_API_BASE": model, "GENWORKER_LLM_API_KEY": "k"}


def reason_codes(response: httpx.Response) -> list[str]:
    return [r["code"] for r in response.json()["reasons"]]


@pytest.mark.parametrize(
    ("hold_at", "phase"),
    [
        ("genworker.api.app", "app_loading"),
        ("litellm", "model_loading"),
        ("tiktoken_ext.openai_public", "runtime_starting"),  # the tokenizer's tables, loaded by the runtime's start
    ],
)
def test_health_answers_while_each_phase_loads_and_readiness_says_which(
    hold_at: str, phase: str, tmp_path: Path, demo_workspace: Path
) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}/v1"  # a model is configured (LiteLLM loads); no call is answered
    with held_server(tmp_path, demo_workspace, hold_at, **model_env(nowhere)) as server:
        health = until(lambda: server.get("/health").json()["reasons"][0]["code"] == phase, f"/health in {phase}")
        assert health
        health_body = server.get("/health")
        assert health_body.status_code == 200 and health_body.json()["status"] == "starting"
        readiness = server.get("/readiness")
        assert readiness.status_code == 503 and readiness.headers["retry-after"] == "1"
        assert readiness.json()["status"] == "not_ready" and reason_codes(readiness) == [phase]
        assert readiness.headers["x-request-id"]  # the same request ids as the application's answers
        server.release()
        until(lambda: server.get("/readiness").status_code == 200, "/readiness 200")
        assert server.get("/health").json() == {"status": "ok", "reasons": []}  # the application's own route
        assert server.stop() == 0
    text = server.log.read_text(encoding="utf-8")
    listening, started = text.index("Listening on http://"), text.index("Application startup complete")
    assert listening < started < text.index("Uvicorn running on") and "Traceback" not in text


def test_a_request_before_the_runtime_has_started_waits_for_it_or_gets_503_with_retry_after(
    tmp_path: Path, demo_workspace: Path
) -> None:
    with held_server(tmp_path, demo_workspace, "genworker.api.app", GENWORKER_STARTUP_WAIT_S="0") as server:
        until(lambda: server.get("/health").status_code == 200, "/health 200")
        early = server.get("/api/v1/debug/runtime")
        assert early.status_code == 503 and early.headers["retry-after"] == "2"
        assert (
            early.json()["error"]["code"] == "starting"
            and "loading the application" in early.json()["error"]["message"]
        )
        server.release()
        until(lambda: server.get("/api/v1/debug/runtime").status_code == 200, "the debug route")
        assert reason_codes(server.get("/readiness")) == ["model_not_configured"]  # the runtime's own reasons now
        assert server.stop() == 0


def test_a_sigterm_while_the_application_loads_exits_0_without_waiting_for_it(
    tmp_path: Path, demo_workspace: Path
) -> None:
    with held_server(tmp_path, demo_workspace, "genworker.api.app") as server:
        until(lambda: server.get("/health").status_code == 200, "/health 200")
        assert server.stop() == 0  # the import is still held: nothing of the runtime ran
    text = server.log.read_text(encoding="utf-8")
    assert "Application startup" not in text and "Traceback" not in text


def test_an_application_that_fails_to_load_ends_the_process_with_status_3(tmp_path: Path, demo_workspace: Path) -> None:
    with held_server(tmp_path, demo_workspace, "genworker.api.app") as server:
        until(lambda: server.get("/health").status_code == 200, "/health 200")
        server.release(b"f")
        assert server.process.wait(timeout=DEADLINE_S) == 3
    text = server.log.read_text(encoding="utf-8")
    assert "[Runtime] the application failed to load" in text and "failed on purpose by the test" in text


def slack_request(host: str, text: str, ts: str) -> bytes:
    event = {"type": "message", "user": "U_PEER", "text": text, "channel": "D1", "channel_type": "im", "ts": ts}
    body = json.dumps({"type": "event_callback", "event_id": f"Ev{ts}", "event": event}).encode()
    stamp = str(int(time.time()))
    signature = SignatureVerifier(SLACK_SIGNING_SECRET).generate_signature(timestamp=stamp, body=body)
    head = (
        f"POST /api/v1/channel/acme~alice~slack/webhook HTTP/1.1\r\nHost: {host}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n"
        f"X-Slack-Request-Timestamp: {stamp}\r\nX-Slack-Signature: {signature}\r\n\r\n"
    )
    return head.encode() + body


def test_an_im_message_sent_while_the_server_starts_is_acknowledged_and_answered_once_it_has_started(
    tmp_path: Path, small_workspace: Callable[..., Path], model_server: ScriptedModelServer
) -> None:
    persona = "---\nidentity: {name: Alice, worker_id: alice}\nchannels:\n  - {type: slack}\n---\nYou are alice.\n"
    credentials = json.dumps({"slack": {"bot_token": "xoxb-test", "signing_secret": SLACK_SIGNING_SECRET}})
    workspace = small_workspace(
        {"acme": ["alice"]},
        {
            "tenants/acme/workers/alice/PERSONA.md": persona,
            "tenants/acme/workers/alice/CHANNEL_CREDENTIALS.json": credentials,
        },
    )
    model_server.expect(Reply("The Q3 numbers are in the shared folder."))
    vendor = Vendor()  # Slack's API, stood in over HTTP
    with (
        LiveServer(vendor.app()) as slack,
        held_server(
            tmp_path,
            workspace,
            "genworker.api.app",
            **model_env(model_server.base_url),
            GENWORKER_SLACK_API_BASE=slack.url,
            GENWORKER_HOT_RELOAD="false",
            GENWORKER_HEARTBEAT_ENABLED="false",
            GENWORKER_STARTUP_WAIT_S=str(DEADLINE_S),
        ) as server,
    ):
        until(lambda: server.get("/health").status_code == 200, "/health 200")
        host, port = server.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=DEADLINE_S) as sock:
            sock.sendall(slack_request(f"{host}:{port}", "where are the Q3 numbers?", "1700000300.000100"))
            assert reason_codes(server.get("/readiness")) == ["app_loading"]  # sent before the runtime started
            server.release()
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 200 "), answer
        [reply] = vendor.wait_for("/chat.postMessage", 1)
        assert server.stop() == 0
    assert reply.body["text"] == "The Q3 numbers are in the shared folder." and reply.body["channel"] == "D1"
    assert len(vendor.calls("/chat.postMessage")) == 1 and len(model_server.requests) == 1
