"""An acknowledged IM message whose server was killed (SIGKILL) while answering it is not lost.

Real server processes on one workspace, a Slack event signed by slack_sdk, LiteLLM to the scripted
model, replies to a stand-in Slack API over HTTP. The first server is killed while the model holds
its answer (or while a side-effecting tool call is under way); the second one starts on the same
workspace and owes the person exactly one answer: the run again, or one neutral notice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2 as httpx
import pytest
from slack_sdk.signature import SignatureVerifier

from genworker.auth import ApiKeyStore
from genworker.channels.interrupted import NOTICE_TEXT
from genworker.testing import Hang, Reply, ScriptedModelServer, ToolCallReply
from genworker.testing.credentials import SLACK_SIGNING_SECRET
from genworker.testing.live_server import LiveServer
from genworker.testing.vendors import Vendor

SERVER = """
import sys
from pathlib import Path
from genworker.api.app import create_app
from genworker.settings import load_settings
from genworker.testing.live_server import LiveServer

configs, workspace, model, vendor = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]
env = {
    "GENWORKER_LLM_MODEL": "openai/scripted", "GENWORKER_LLM_API_BASE": model, "GENWORKER_LLM_API_KEY": "k",
    "GENWORKER_HOT_RELOAD": "false", "GENWORKER_HEARTBEAT_ENABLED": "false", "GENWORKER_SLACK_API_BASE": vendor,
}
configs.mkdir(exist_ok=True)
with LiveServer(create_app(load_settings(configs, env, workspace=workspace))) as server:
    print(server.url, flush=True)
    sys.stdin.read()  # until the test closes stdin (a clean stop) or kills the process
"""

NOTIFY_SERVER = """
import sys, urllib.request
import anyio
from mcp.server.mcpserver import MCPServer

server = MCPServer("ops")

@server.tool()
async def notify(text: str) -> str:
    \"\"\"Tell the on-call team.\"\"\"
    await anyio.to_thread.run_sync(urllib.request.urlopen, sys.argv[1] + "/tool-started")
    await anyio.Event().wait()  # the process is killed while this call is under way
    return "sent"

server.run("stdio")
"""


def persona(extra: str = "") -> str:
    head = "---\nidentity: {name: Alice, worker_id: alice}\nchannels:\n  - {type: slack}\n"
    return f"{head}{extra}---\nYou are alice.\n"


@pytest.fixture
def vendor() -> Iterator[Vendor]:
    stand_in = Vendor()
    with LiveServer(stand_in.app()) as live:
        stand_in.url = live.url  # type: ignore[attr-defined]
        yield stand_in


class Server:
    """One `genworker` server process on the workspace."""

    def __init__(self, tmp: Path, workspace: Path, model: ScriptedModelServer, vendor_url: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(tmp / "configs"), str(workspace), model.base_url, vendor_url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            encoding="utf-8",
            start_new_session=True,  # its process group: the kill takes its MCP servers along
        )
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip()
        assert self.url.startswith("http://"), self.process.stderr.read() if self.process.stderr else ""

    def post_slack(self, body: bytes, headers: dict[str, str]) -> httpx.Response:
        return httpx.post(f"{self.url}/api/v1/channel/acme~alice~slack/webhook", content=body, headers=headers)

    def kill(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.communicate(timeout=30)  # reaps it and closes the pipes

    def stop(self) -> str:
        """A clean stop; the server's log."""
        _, err = self.process.communicate("", timeout=60)
        assert self.process.returncode == 0, err
        return err


@contextmanager
def server(tmp: Path, workspace: Path, model: ScriptedModelServer, vendor: Vendor) -> Iterator[Server]:
    running = Server(tmp, workspace, model, vendor.url)  # type: ignore[attr-defined]
    try:
        yield running
    finally:
        if running.process.poll() is None:
            running.kill()


def slack_dm(text: str, ts: str) -> tuple[bytes, dict[str, str]]:
    event = {"type": "message", "user": "U_PEER", "text": text, "channel": "D1", "channel_type": "im", "ts": ts}
    body = json.dumps({"type": "event_callback", "event_id": f"Ev{ts}", "event": event}).encode()
    stamp = str(int(time.time()))
    signature = SignatureVerifier(SLACK_SIGNING_SECRET).generate_signature(timestamp=stamp, body=body)
    return body, {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": signature}


def credentials() -> str:
    return json.dumps({"slack": {"bot_token": "xoxb-test", "signing_secret": SLACK_SIGNING_SECRET}})


def journal(workspace: Path) -> list[Path]:
    return sorted((workspace / "tenants/acme/workers/alice/runtime/channels/journal").glob("*.json"))


def runs(workspace: Path) -> list[dict[str, object]]:
    folder = workspace / "tenants/acme/workers/alice/runs"
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.json"))]


def test_a_message_killed_during_the_model_call_is_answered_once_after_the_restart(
    tmp_path: Path, small_workspace: Callable[..., Path], model_server: ScriptedModelServer, vendor: Vendor
) -> None:
    workspace = small_workspace(
        {"acme": ["alice"]},
        {
            "tenants/acme/workers/alice/PERSONA.md": persona(),
            "tenants/acme/workers/alice/CHANNEL_CREDENTIALS.json": credentials(),
        },
    )
    model_server.expect(Hang(), Reply("The Q3 numbers are in the shared folder."))
    body, headers = slack_dm("where are the Q3 numbers?", "1700000100.000100")
    with server(tmp_path, workspace, model_server, vendor) as first:
        assert first.post_slack(body, headers).status_code == 200
        model_server.wait_for_requests(1)  # the run is inside its model call
        first.kill()
    assert len(journal(workspace)) == 1 and vendor.calls("/chat.postMessage") == []

    with server(tmp_path, workspace, model_server, vendor) as second:
        [reply] = vendor.wait_for("/chat.postMessage", 1)
        second.stop()
    assert reply.body["text"] == "The Q3 numbers are in the shared folder." and reply.body["channel"] == "D1"
    assert len(vendor.calls("/chat.postMessage")) == 1  # the second server has stopped: nothing more comes
    assert len(model_server.requests) == 2
    assert journal(workspace) == []
    states = sorted((r["state"], r["provenance"]["idempotency_key"]) for r in runs(workspace))  # type: ignore[index]
    key = "channel:acme~alice~slack:D1:1700000100.000100"
    assert states == [("completed", key), ("interrupted", key)]  # the same key ran again, once


def test_a_side_effect_with_an_unknown_outcome_gets_one_neutral_notice_and_a_human(
    tmp_path: Path, small_workspace: Callable[..., Path], model_server: ScriptedModelServer, vendor: Vendor
) -> None:
    script = tmp_path / "notify_server.py"
    script.write_text(NOTIFY_SERVER, encoding="utf-8")
    mcp = (
        f"mcp_servers:\n  - name: ops\n    command: {sys.executable}\n    args: [{script}, {vendor.url}]\n"  # type: ignore[attr-defined]
        "    tool_effects:\n      notify: {effect: external, risk_level: low}\n"
    )
    workspace = small_workspace(
        {"acme": ["alice"]},
        {
            "tenants/acme/workers/alice/PERSONA.md": persona(mcp),
            "tenants/acme/workers/alice/CHANNEL_CREDENTIALS.json": credentials(),
        },
    )
    key = ApiKeyStore(workspace).create("acme")[1]
    model_server.expect(Reply(tool_calls=(ToolCallReply("ops__notify", {"text": "prod is down"}),)))
    body, headers = slack_dm("tell on-call prod is down", "1700000200.000100")
    with server(tmp_path, workspace, model_server, vendor) as first:
        assert first.post_slack(body, headers).status_code == 200
        vendor.wait_for("/tool-started", 1)  # the side effect is under way
        first.kill()

    with server(tmp_path, workspace, model_server, vendor) as second:
        [notice] = vendor.wait_for("/chat.postMessage", 1)
        owed = httpx.get(
            f"{second.url}/api/v1/workers/alice/channel-replies", headers={"Authorization": f"Bearer {key}"}
        ).json()
        board = httpx.get(f"{second.url}/api/v1/workers/alice/dashboard", headers={"Authorization": f"Bearer {key}"})
        second.stop()
    assert notice.body["text"] == NOTICE_TEXT
    assert len(vendor.calls("/chat.postMessage")) == 1 and len(vendor.calls("/tool-started")) == 1  # not repeated
    assert len(model_server.requests) == 1
    [item] = owed["attention"]
    assert (item["event_id"], item["text"]) == ("D1:1700000200.000100", "tell on-call prod is down")
    assert "ops__notify" in item["reason"] and "unknown" in item["reason"]
    [run] = runs(workspace)
    assert run["state"] == "interrupted" and run["run_id"] == item["run_id"]
    assert board.json()["blocks"]["channels"]["data"]["attention"] == [item]
    assert journal(workspace) == []
