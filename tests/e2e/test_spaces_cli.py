"""`genworker spaces` against a real server: facts go through the inbox and the heartbeat's API into
context spaces; the CLI lists them (and the pending one a low-confidence route made), shows one,
pins and unpins it, refuses to confirm a space that is not pending (a non-zero exit and the server's
error), re-files the pending one, and sweeps."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import httpx2 as httpx
import pytest

from genworker.auth import ApiKeyStore
from genworker.autonomy.inbox import FileInboxStore, new_item
from genworker.cli import main
from genworker.testing import Reply, ScriptedModelServer, ToolCallReply, serve
from genworker.testing.live_server import LiveServer


@pytest.fixture
def workspace(small_workspace: Callable[..., Path]) -> Path:
    root = small_workspace({"acme": ["alice"]})
    persona = root / "tenants/acme/workers/alice/PERSONA.md"
    persona.write_text(
        persona.read_text(encoding="utf-8").replace("---\nYou", "context_spaces: {enabled: true}\n---\nYou")
    )
    return root


def cli(capsys: pytest.CaptureFixture[str], server: LiveServer, key: str, *argv: str) -> tuple[int, str, str]:
    code = main([*argv, "--url", server.url, "--api-key", key])
    out, err = capsys.readouterr()
    return code, out, err


def sense(workspace: Path, server: LiveServer, key: str, subject: str) -> None:
    item = new_item("acme", "alice", "email", "mailbox", "email.received", {"subject": subject, "from": "erin"})
    assert asyncio.run(FileInboxStore(workspace).write(item))
    answer = httpx.post(
        f"{server.url}/api/v1/workers/alice/heartbeat/run", headers={"Authorization": f"Bearer {key}"}, timeout=60
    )
    assert answer.status_code == 200, answer.text


def test_spaces_cli_lists_shows_pins_and_refiles(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer, capsys: pytest.CaptureFixture[str]
) -> None:
    unsure = {"choice": "SPACE_1", "confidence": 0.4, "reason": "maybe the same invoices"}
    model_server.expect(Reply(tool_calls=(ToolCallReply("choose_space", unsure),)))
    key = ApiKeyStore(workspace).create("acme")[1]
    with serve(tmp_path, workspace, model_server) as server:
        sense(workspace, server, key, "Stripe invoices failed for March")
        sense(workspace, server, key, "Quarterly board deck draft")  # the model is unsure: a pending NEW

        code, out, _ = cli(capsys, server, key, "spaces", "list", "alice")
        assert code == 0 and "SPACE_1" in out and "SPACE_2" in out and "pending" in out
        assert "active: 2" in out
        code, out, _ = cli(capsys, server, key, "spaces", "list", "alice", "--pending", "--json")
        assert [c["space_id"] for c in json.loads(out)["spaces"]] == ["SPACE_2"]
        code, out, _ = cli(capsys, server, key, "spaces", "show", "alice", "SPACE_1")
        assert code == 0 and out.startswith("SPACE_1: Stripe invoices failed for March") and "[email]" in out

        assert cli(capsys, server, key, "spaces", "pin", "alice", "SPACE_1")[1] == "SPACE_1: pinned (manual)\n"
        assert cli(capsys, server, key, "spaces", "pin", "alice", "SPACE_1", "--auto")[1] == "SPACE_1: not pinned\n"
        code, _, err = cli(capsys, server, key, "spaces", "confirm", "alice", "SPACE_1")
        assert code != 0 and "not waiting for a confirmation" in err

        code, out, _ = cli(capsys, server, key, "spaces", "refile", "alice", "SPACE_2", "SPACE_1")
        assert (code, out) == (0, "SPACE_2: re-filed into SPACE_1\n")
        code, out, _ = cli(capsys, server, key, "spaces", "list", "alice", "--json")
        cards = {c["space_id"]: c for c in json.loads(out)["spaces"]}
        assert cards["SPACE_1"]["evidence_count"] == 2 and cards["SPACE_2"]["review"] == "merged"
        code, out, _ = cli(capsys, server, key, "spaces", "unmerge", "alice", "SPACE_2")  # and back out
        assert (code, out) == (0, "SPACE_2: a space of its own again, out of SPACE_1\n")
        code, out, _ = cli(capsys, server, key, "spaces", "list", "alice", "--json")
        cards = {c["space_id"]: c for c in json.loads(out)["spaces"]}
        assert cards["SPACE_1"]["evidence_count"] == 1 and cards["SPACE_2"]["review"] == "confirmed"
        assert cli(capsys, server, key, "spaces", "sweep", "alice")[1] == "0 spaces changed state\n"
