"""A scheduled duty's report reaches its people exactly once, across a kill and a restart.

Real server processes on one workspace, LiteLLM to the scripted model, the Slack API stand-in and
an SMTP server (aiosmtpd). The duty is scheduled a few seconds ahead (a reload picks it up), its
run completes, the report is posted to a bound Slack channel as a card and mailed to two
stakeholders. The mail server refuses at first, so the mail waits in the outbox to be re-sent; the
server is killed (SIGKILL) then, and the next one on the same workspace sends the mail once and
never posts the report a second time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import queue
import re
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest

from genworker.auth import ApiKeyStore
from genworker.testing import Reply, ScriptedModelServer
from genworker.testing.live_server import LiveServer
from genworker.testing.mail import SMTP_WARNINGS, SmtpServer
from genworker.testing.vendors import Vendor

pytest.importorskip("aiosmtpd", reason="aiosmtpd (an SMTP server) is a dev dependency")
pytestmark = [pytest.mark.filterwarnings(w) for w in SMTP_WARNINGS]

SERVER = """
import sys
from pathlib import Path
from genworker.api.app import create_app
from genworker.observability.logging import configure_logging
from genworker.settings import load_settings
from genworker.testing.live_server import LiveServer

configs, workspace, model, vendor, retry = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
env = {
    "GENWORKER_LLM_MODEL": "openai/scripted", "GENWORKER_LLM_API_BASE": model, "GENWORKER_LLM_API_KEY": "k",
    "GENWORKER_HOT_RELOAD": "false", "GENWORKER_HEARTBEAT_ENABLED": "false", "GENWORKER_SLACK_API_BASE": vendor,
    "GENWORKER_CHANNEL_RETRY_BASE_S": retry,
}
configure_logging("text", "INFO")
configs.mkdir(exist_ok=True)
with LiveServer(create_app(load_settings(configs, env, workspace=workspace))) as server:
    print(server.url, flush=True)
    sys.stdin.read()  # until the test closes stdin (a clean stop) or kills the process
"""

USER, PASSWORD = "alice@acme.example", "smtp-s3cret-pw"
POST = "/chat.postMessage"
STAKEHOLDERS = ["cfo@acme.example", "coo@acme.example"]
REPORT = {"summary": "Signups fell 14.5% week over week.", "highlights": ["paid search US ended", "MRR flat"]}


def persona() -> str:
    return (
        "---\nidentity: {name: Alice, worker_id: alice, reports_to: dana}\nmode: personal\n"
        "channels:\n  - {type: slack, chat_ids: [C-OPS]}\n"
        "  - {type: email, chat_ids: [alice@acme.example], features: {smtp_security: plain, poll_interval: 86400}}\n"
        "---\nYou are alice.\n"
    )


def duty(slot: datetime) -> str:
    cron = f"{slot.second} {slot.minute} {slot.hour} {slot.day} {slot.month} *"
    return f"""---
duty_id: weekly-report
title: Weekly metrics report
triggers:
  - {{id: weekly, type: schedule, cron: "{cron}", timezone: UTC}}
delivery:
  - {{chat: "slack:C-OPS", format: card}}
  - {{email: {json.dumps(STAKEHOLDERS)}, subject: Weekly metrics}}
contract:
  version: "1"
  output_schema:
    type: object
    required: [summary, highlights]
    properties:
      summary: {{type: string}}
      highlights: {{type: array, items: {{type: string}}}}
---
Write the weekly metrics report.
"""


class Log:
    """A server's stderr, line by line, as it comes; `wait_for` blocks until a line matches."""

    def __init__(self, stream: Any) -> None:
        self.lines: list[str] = []
        self._new: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: Any) -> None:
        for line in stream:
            self._new.put(line)
        self._new.put(None)

    def drain(self) -> None:
        """The rest of the output, once the process has ended."""
        self._thread.join(timeout=30)
        while (line := self._new.get_nowait() if not self._new.empty() else None) is not None:
            self.lines.append(line)

    def wait_for(self, pattern: str, timeout: float = 60) -> str:
        found = next((line for line in self.lines if re.search(pattern, line)), None)
        deadline = datetime.now(UTC) + timedelta(seconds=timeout)
        while found is None:
            left = (deadline - datetime.now(UTC)).total_seconds()
            line = self._new.get(timeout=max(left, 0.001)) if left > 0 else None
            if line is None:
                raise AssertionError(f"no log line matched {pattern!r}:\n{''.join(self.lines[-40:])}")
            self.lines.append(line)
            found = line if re.search(pattern, line) else None
        return found


class Server:
    """One `genworker` server process on the workspace."""

    def __init__(self, tmp: Path, workspace: Path, model: ScriptedModelServer, vendor_url: str, retry_s: float) -> None:
        args = [str(tmp / "configs"), str(workspace), model.base_url, vendor_url, str(retry_s)]
        self.process = subprocess.Popen(
            [sys.executable, "-c", SERVER, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            encoding="utf-8",
            start_new_session=True,
        )
        assert self.process.stdout is not None and self.process.stderr is not None
        ready, _, _ = select.select([self.process.stdout], [], [], 60)
        self.url = self.process.stdout.readline().strip() if ready else ""
        self.log = Log(self.process.stderr)
        assert self.url.startswith("http://"), "".join(self.log.lines)

    def kill(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)
        self._close()

    def stop(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        assert self.process.wait(timeout=60) == 0, "".join(self.log.lines[-40:])
        self._close()

    def _close(self) -> None:
        self.log.drain()
        for pipe in (self.process.stdin, self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()


@contextmanager
def server(tmp: Path, workspace: Path, model: ScriptedModelServer, vendor: str, retry_s: float) -> Iterator[Server]:
    running = Server(tmp, workspace, model, vendor, retry_s)
    try:
        yield running
    except BaseException:
        if running.process.poll() is None:
            running.kill()
        print("".join(running.log.lines))  # shown with the failure
        raise
    finally:
        if running.process.poll() is None:
            running.kill()


@pytest.fixture
def vendor() -> Iterator[tuple[Vendor, str]]:
    stand_in = Vendor()
    with LiveServer(stand_in.app()) as live:
        yield stand_in, live.url


def run_file(workspace: Path, run_id: str) -> dict[str, Any]:
    path = workspace / "tenants/acme/workers/alice/runs" / f"{run_id}.json"
    return dict(json.loads(path.read_text(encoding="utf-8")))


def test_a_scheduled_report_reaches_slack_and_two_stakeholders_exactly_once_across_a_kill(
    tmp_path: Path,
    small_workspace: Callable[..., Path],
    model_server: ScriptedModelServer,
    vendor: tuple[Vendor, str],
) -> None:
    stand_in, vendor_url = vendor
    with SmtpServer(USER, PASSWORD) as smtp:
        creds = {
            "slack": {"bot_token": "xoxb-test", "signing_secret": "s" * 32},
            "email": {"worker_address": USER, "worker_password": PASSWORD, "worker_smtp_host": "127.0.0.1",
                      "worker_smtp_port": smtp.port},
        }  # fmt: skip
        workspace = small_workspace(
            {"acme": ["alice"]},
            {
                "tenants/acme/workers/alice/PERSONA.md": persona(),
                "tenants/acme/workers/alice/CHANNEL_CREDENTIALS.json": json.dumps(creds),
            },
        )
        headers = {"Authorization": f"Bearer {ApiKeyStore(workspace).create('acme')[1]}"}
        model_server.expect(Reply(json.dumps(REPORT)))
        smtp.refuse = "451 4.3.0 try again later"
        with server(tmp_path, workspace, model_server, vendor_url, retry_s=10) as first:
            slot = (datetime.now(UTC) + timedelta(seconds=4)).replace(microsecond=0)
            (workspace / "tenants/acme/workers/alice/duties").mkdir()
            (workspace / "tenants/acme/workers/alice/duties/weekly-report.md").write_text(duty(slot), encoding="utf-8")
            reload = httpx.post(f"{first.url}/api/v1/worker/ops/reload", json={"worker_id": "alice"}, headers=headers)
            assert reload.status_code == 200 and reload.json()["ok"], reload.text
            [posted] = stand_in.wait_for(POST, 1)
            line = first.log.wait_for(r"\[Duties\] run .*: email cfo@acme.example, coo@acme.example retrying")
            run_id = re.search(r"acme/alice/(run_\w+)", line).group(1)  # type: ignore[union-attr]
            first.kill()  # the mail is owed, waiting for its re-send

        held = run_file(workspace, run_id)
        assert held["state"] == "completed"
        assert datetime.fromisoformat(held["provenance"]["scheduled_for"]) == slot
        assert [(d["to"], d["state"]) for d in held["deliveries"]] == [
            ("chat slack:C-OPS", "sent"),
            ("email cfo@acme.example, coo@acme.example", "retrying"),
        ]
        assert "451" in held["deliveries"][1]["error"]
        assert posted.body["channel"] == "C-OPS" and posted.body["blocks"][0]["text"]["text"] == "Weekly metrics report"
        assert "Signups fell 14.5%" in posted.body["text"] and "- paid search US ended" in posted.body["text"]

        smtp.refuse = None
        with server(tmp_path, workspace, model_server, vendor_url, retry_s=10) as second:
            [mail] = smtp.wait_for(1)
            second.log.wait_for(rf"\[Duties\] run acme/alice/{run_id}: email .* now sent")
            second.stop()
    assert sorted(mail.recipients) == STAKEHOLDERS and mail.message["Subject"] == "Weekly metrics"
    assert "Signups fell 14.5% week over week." in mail.message.get_body().get_content()  # type: ignore[union-attr]
    assert len(smtp.sent) == 1 and len(stand_in.calls(POST)) == 1  # each exactly once
    done = run_file(workspace, run_id)
    assert [(d["to"], d["state"]) for d in done["deliveries"]] == [
        ("chat slack:C-OPS", "sent"),
        ("email cfo@acme.example, coo@acme.example", "sent"),
    ]
    assert [(c["check"], c["verdict"]) for c in done["checks"]] == [("output_schema", "passed")]
    assert len(model_server.requests) == 1
    assert not (workspace / "tenants/acme/workers/alice/runtime/duty_deliveries").exists() or not any(
        (workspace / "tenants/acme/workers/alice/runtime/duty_deliveries").iterdir()
    )


ESCALATING_PERSONA = """---
identity: {name: Alice, worker_id: alice, reports_to: dana}
mode: personal
channels:
  - {type: slack, chat_ids: [C-OPS]}
contacts:
  - {person_id: sam, name: Sam Ortiz, identities: [{channel: slack, handle: U-SAM}]}
  - {person_id: dana, name: Dana Lee, identities: [{channel: slack, handle: U-DANA}]}
---
You are alice.
"""
ESCALATING_DUTY = """---
duty_id: summary
title: Summary
triggers: [{id: go, type: manual}]
escalation: {condition: failed, target: dana}
contract:
  version: "1"
  output_schema: {type: object, required: [summary], properties: {summary: {type: string}}}
  escalation: {condition: output_invalid, target: sam}
---
Report on the week.
"""


class HeldFirstPost:
    """ASGI wrapper of the Slack stand-in: the first chat.postMessage waits (the sender is mid-send)
    until `release` is set; later ones pass at once."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.arrived = threading.Event()
        self.release = threading.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != POST or self.arrived.is_set():
            await self.app(scope, receive, send)
            return
        received = [await receive()]  # the whole request, before its sender is killed
        while received[-1].get("more_body"):
            received.append(await receive())
        self.arrived.set()
        await asyncio.to_thread(self.release.wait, 60)

        async def replay() -> Any:
            return received.pop(0) if received else {"type": "http.disconnect"}

        await self.app(scope, replay, send)


@dataclass
class MidEscalationKill:
    killed: dict[str, Any]  # the run's file just after the kill
    plans: list[dict[str, Any]]  # the escalation plans on disk then
    posts: list[Any]  # the two escalations' posts, the one cut short by the kill first
    model_calls: int


def kill_mid_escalation(
    tmp_path: Path, model_server: ScriptedModelServer, small_workspace: Callable[..., Path], duty: str
) -> MidEscalationKill:
    """Run `duty` (alice's, owing escalations to dana and sam by Slack) over HTTP; kill the server
    while the first escalation is being sent; start the next one on the workspace, which makes the
    second once and never sends the first again (it may have left: outcome_unknown), then a third,
    which owes nothing."""
    stand_in = Vendor()
    held = HeldFirstPost(stand_in.app())
    creds = {"slack": {"bot_token": "xoxb-test", "signing_secret": "s" * 32}}
    duty_id = re.search(r"duty_id: (\S+)", duty).group(1)  # type: ignore[union-attr]
    workspace = small_workspace(
        {"acme": ["alice"]},
        {
            "tenants/acme/workers/alice/PERSONA.md": ESCALATING_PERSONA,
            "tenants/acme/workers/alice/CHANNEL_CREDENTIALS.json": json.dumps(creds),
            f"tenants/acme/workers/alice/duties/{duty_id}.md": duty,
        },
    )
    headers = {"Authorization": f"Bearer {ApiKeyStore(workspace).create('acme')[1]}"}
    escalations = workspace / "tenants/acme/workers/alice/runtime/duty_escalations"
    with LiveServer(held) as vendor_live:
        with server(tmp_path, workspace, model_server, vendor_live.url, retry_s=10) as first:

            def run_duty() -> None:  # answered only after the escalations: the server is killed before that
                with contextlib.suppress(httpx.HTTPError):
                    httpx.post(f"{first.url}/api/v1/workers/alice/duties/{duty_id}/run", headers=headers, timeout=60)

            threading.Thread(target=run_duty, daemon=True).start()
            assert held.arrived.wait(60), "".join(first.log.lines[-40:])
            first.kill()
        held.release.set()  # the killed process's send reaches the vendor now
        [run_file_path] = (workspace / "tenants/acme/workers/alice/runs").glob("run_*.json")
        killed = json.loads(run_file_path.read_text(encoding="utf-8"))
        plans = [json.loads(path.read_text(encoding="utf-8")) for path in escalations.glob("*.json")]
        [first_post] = stand_in.wait_for(POST, 1)

        with server(tmp_path, workspace, model_server, vendor_live.url, retry_s=10) as second:
            posts = stand_in.wait_for(POST, 2)
            second.log.wait_for(r"made the escalations of 1 runs a stopped process had not made")
            second.stop()
        with server(tmp_path, workspace, model_server, vendor_live.url, retry_s=10) as third:
            third.stop()  # nothing is owed any more
    assert killed["escalations"] == []  # the first was mid-send, the second not yet begun
    assert len(stand_in.calls(POST)) == 2 and posts[0] is first_post
    assert sorted(p.body["channel"] for p in posts) == ["U-DANA", "U-SAM"]
    done = run_file(workspace, killed["run_id"])
    states = {e["target"]: e["state"] for e in done["escalations"]}
    first_to = {"U-DANA": "dana", "U-SAM": "sam"}[first_post.body["channel"]]
    assert states == {first_to: "outcome_unknown", ({"dana", "sam"} - {first_to}).pop(): "sent"}
    assert not any(escalations.glob("*.json"))
    return MidEscalationKill(killed, plans, posts, len(model_server.requests))


def test_escalations_owed_when_the_server_is_killed_are_made_once_at_the_next_start(
    tmp_path: Path, small_workspace: Callable[..., Path], model_server: ScriptedModelServer
) -> None:
    """A run fails its output schema; two escalations are due (failed -> dana, output_invalid -> sam)."""
    model_server.expect(Reply('{"summary": 14.5}'), Reply('{"summary": 15}'))  # broken, and after the repair
    kill = kill_mid_escalation(tmp_path, model_server, small_workspace, ESCALATING_DUTY)
    assert (kill.killed["state"], kill.killed["error"]["code"]) == ("failed", "output_schema_violation")
    assert "escalates *Summary* to you" in kill.posts[1].body["text"]
    assert kill.model_calls == 2


REFUSED_DUTY = """---
duty_id: tally
title: Tally
triggers: [{id: go, type: manual}]
pre_script: {path: scripts/missing.py}
escalation: {condition: failed, target: dana}
contract:
  version: "1"
  escalation: {condition: run_failed, target: sam}
---
Tally the week.
"""


def test_escalations_of_a_run_refused_before_its_engine_are_made_once_after_a_kill(
    tmp_path: Path, small_workspace: Callable[..., Path], model_server: ScriptedModelServer
) -> None:
    """The duty's pre_script cannot be read, so the run fails before its engine (no model call);
    two escalations are due (failed -> dana, run_failed -> sam), planned before the run was
    recorded failed (#25)."""
    kill = kill_mid_escalation(tmp_path, model_server, small_workspace, REFUSED_DUTY)
    assert (kill.killed["state"], kill.killed["error"]["code"]) == ("failed", "pre_script_failed")
    [plan] = kill.plans
    assert (plan["run_id"], plan["expect"]) == (kill.killed["run_id"], "failed")
    assert [d["rule"]["target"] for d in plan["due"]] == ["dana", "sam"]
    assert "escalates *Tally* to you (failed)" in kill.posts[1].body["text"]
    assert kill.model_calls == 0
