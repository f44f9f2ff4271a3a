"""The CLI against a real server: uvicorn serving the app, LiteLLM calling the scripted model.

Most commands run in-process through `genworker.cli.main` (fast); the real console script runs
as a subprocess for streaming and for the one-line errors, the way a user or a script sees them.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from genworker.auth import ApiKeyStore
from genworker.autonomy.inbox import FileInboxStore, InboxAggregate, new_item
from genworker.cli import main
from genworker.testing import Fail, Reply, ScriptedModelServer, ToolCallReply, serve
from genworker.testing.live_server import LiveServer

GENWORKER = Path(sys.executable).with_name("genworker")
DAY = r"\d{4}-\d\d-\d\d"
MOMENT = DAY + r"T\d\d:\d\d:\d\dZ"  # the CLI's one timestamp format: ISO 8601 in UTC, to the second
GATED = (
    "---\nduty_id: pay\ntitle: Pay invoices\ntriggers: [{id: m, type: manual}, "
    "{id: nightly, type: schedule, cron: '0 22 * * *', timezone: Asia/Tokyo}]\n"
    "contract: {version: '1', approval: {required: true}}\n---\nPay the invoice.\n"
)
SWEEP = "---\nduty_id: sweep\ntitle: Sweep\ntriggers: [{id: now, type: manual}]\n---\nSweep the floor.\n"


@pytest.fixture
def workspace(small_workspace: Callable[..., Path]) -> Path:
    root = small_workspace(
        {"acme": ["alice", "bob"]},
        {"tenants/acme/workers/alice/duties/pay.md": GATED, "tenants/acme/workers/bob/duties/sweep.md": SWEEP},
    )
    (root / "tenants/acme/workers/alice/files").mkdir()
    (root / "tenants/acme/workers/alice/files/notes.md").write_text("buy milk", encoding="utf-8")
    return root


@pytest.fixture
def api_key(workspace: Path) -> str:
    return ApiKeyStore(workspace).create("acme")[1]


def cli(capsys: pytest.CaptureFixture[str], server: LiveServer, key: str, *argv: str) -> tuple[int, str, str]:
    code = main([*argv, "--url", server.url, "--api-key", key])
    out, err = capsys.readouterr()
    return code, out, err


def console(server_url: str, key: str, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GENWORKER_URL": server_url, "GENWORKER_API_KEY": key}
    return subprocess.run(
        [str(GENWORKER), *argv], capture_output=True, text=True, encoding="utf-8", env=env, timeout=120
    )


def test_task_streams_the_answer_and_shows_tool_calls_then_runs_list_and_show(
    tmp_path: Path, workspace: Path, api_key: str, model_server: ScriptedModelServer,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    model_server.expect(
        Reply("Looking.", tool_calls=(ToolCallReply("file_read", {"path": "files/notes.md"}, "c1"),)),
        Reply("Your note says: buy milk."),
        Reply("Done again."),
    )
    with serve(tmp_path, workspace, model_server) as server:
        streamed = console(server.url, api_key, "task", "alice", "What does my note say?")
        code, out, _ = cli(capsys, server, api_key, "task", "acme/alice", "Once more", "--json")
        summary = json.loads(out)
        listed = cli(capsys, server, api_key, "runs", "list", "alice", "--json")
        shown = cli(capsys, server, api_key, "runs", "show", "alice", summary["run_id"])
        table = cli(capsys, server, api_key, "runs", "list", "alice")

    assert streamed.returncode == 0, streamed.stderr
    assert streamed.stdout.strip().endswith("Your note says: buy milk.")
    assert '  -> file_read({"path": "files/notes.md"})' in streamed.stderr
    assert "  <- " in streamed.stderr and "buy milk" in streamed.stderr
    assert code == 0 and summary["outcome"] == "completed" and summary["output"] == "Done again."
    assert summary["error"] is None and summary["tool_calls"] == []
    runs = json.loads(listed[1])["runs"]
    assert [r["state"] for r in runs] == ["completed", "completed"] and runs[0]["run_id"] == summary["run_id"]
    assert shown[0] == 0 and f"run {summary['run_id']}  state completed" in shown[1]
    assert "model calls (1)" in shown[1] and "tool calls (0)" in shown[1]
    assert table[1].splitlines()[0].split() == ["RUN_ID", "STATE", "CREATED_AT", "FINISHED_AT", "THREAD_ID"]
    newest = table[1].splitlines()[1].split()
    assert newest[0] == summary["run_id"] and re.fullmatch(MOMENT, newest[2]) and re.fullmatch(MOMENT, newest[3])


def test_an_answer_holding_line_separators_streams_whole(
    tmp_path: Path, workspace: Path, api_key: str, model_server: ScriptedModelServer,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    model_server.expect(Reply("one\u2028two\u0085three\u2029four"))
    with serve(tmp_path, workspace, model_server) as server:
        code, out, err = cli(capsys, server, api_key, "task", "alice", "Say it", "--json")
    assert code == 0, err
    assert json.loads(out)["output"] == "one\u2028two\u0085three\u2029four"


def test_chat_keeps_the_thread_across_messages(
    tmp_path: Path, workspace: Path, api_key: str, model_server: ScriptedModelServer,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    def sees_history(body: dict[str, Any]) -> None:
        assert any("I am Ann" in str(m.get("content")) for m in body["messages"]), body["messages"]

    model_server.expect(Reply("Nice to meet you, Ann."), Reply("You are Ann.", check=sees_history))
    monkeypatch.setattr(sys, "stdin", io.StringIO("I am Ann\n\nWho am I?\n/exit\nnever sent\n"))
    with serve(tmp_path, workspace, model_server) as server:
        code, out, err = cli(capsys, server, api_key, "chat", "acme/alice")
    assert code == 0, err
    assert out.splitlines() == ["Nice to meet you, Ann.", "You are Ann."]
    assert "(thread " in err and "--thread " in err


def test_duties_confirmations_and_their_conflicts(
    tmp_path: Path, workspace: Path, api_key: str, model_server: ScriptedModelServer,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    model_server.expect(Reply("Paid."))
    with serve(tmp_path, workspace, model_server) as server:
        listed = cli(capsys, server, api_key, "duties", "list", "alice")
        duties = json.loads(cli(capsys, server, api_key, "duties", "list", "alice", "--json")[1])
        first = cli(capsys, server, api_key, "duties", "run", "alice", "pay", "--idempotency-key", "k1")
        again = cli(capsys, server, api_key, "duties", "run", "alice", "pay", "--idempotency-key", "k1")
        pending = json.loads(cli(capsys, server, api_key, "confirmations", "list", "alice", "--json")[1])
        (waiting,) = pending["confirmations"]
        rejected = cli(capsys, server, api_key, "confirmations", "reject", "alice", waiting["confirmation_id"])
        twice = cli(capsys, server, api_key, "confirmations", "approve", "alice", waiting["confirmation_id"])
        cli(capsys, server, api_key, "duties", "run", "alice", "pay", "--idempotency-key", "k2")
        second = json.loads(cli(capsys, server, api_key, "confirmations", "list", "alice", "--json")[1])
        (gate,) = second["confirmations"]
        table = cli(capsys, server, api_key, "confirmations", "list", "alice")
        approved = cli(capsys, server, api_key, "confirmations", "approve", "alice", gate["confirmation_id"])
        empty = cli(capsys, server, api_key, "confirmations", "list", "alice")

    (nightly,) = [line for line in listed[1].splitlines() if "nightly" in line]
    assert listed[0] == 0 and re.search(rf" {DAY}T13:00:00Z +0 22 \* \* \* Asia/Tokyo ", nightly), nightly
    (pay,) = duties["duties"]
    assert [(t["id"], "next_fire" in t) for t in pay["triggers"]] == [("m", False), ("nightly", True)]
    assert first[0] == 0 and "duty pay (m): run " in first[1] and "waiting_approval" in first[1]
    assert "nothing new was started" in again[1]
    assert rejected == (0, f"{waiting['confirmation_id']}: rejected\n", "")
    assert twice[0] == 1 and twice[2].startswith("genworker: conflict (409): ") and twice[2].count("\n") == 1
    assert gate["confirmation_id"] in table[1] and "Pay the invoice" in table[1]
    assert re.search(rf"  pending  {MOMENT}  ", table[1]), table[1]
    assert approved[0] == 0 and f"{gate['confirmation_id']}: approved" in approved[1]
    assert "completed" in approved[1] and approved[1].rstrip().endswith("Paid.")
    assert empty[1] == "(no pending confirmations)\n"


def test_a_failed_run_exits_1_with_its_error(
    tmp_path: Path, workspace: Path, api_key: str, model_server: ScriptedModelServer,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    model_server.expect(*(Fail(400, "the provider refused") for _ in range(3)))
    with serve(tmp_path, workspace, model_server) as server:
        failed = cli(capsys, server, api_key, "duties", "run", "bob", "sweep")
        as_json = cli(capsys, server, api_key, "duties", "run", "bob", "sweep", "--json")
        cli(capsys, server, api_key, "duties", "run", "alice", "pay")
        pending = cli(capsys, server, api_key, "confirmations", "list", "alice", "--json")[1]
        (gate,) = json.loads(pending)["confirmations"]
        approved = cli(capsys, server, api_key, "confirmations", "approve", "alice", gate["confirmation_id"])

    code, out, err = failed
    assert code == 1 and out.startswith("duty sweep (now): run ") and out.rstrip().endswith(" failed")
    assert err.startswith("genworker: run failed: ") and "the provider refused" in err and err.count("\n") == 1
    assert as_json[0] == 1 and json.loads(as_json[1])["run"]["state"] == "failed" and as_json[2] == ""
    assert approved[0] == 1 and f"{gate['confirmation_id']}: approved" in approved[1]
    assert approved[2].startswith("genworker: run failed: ") and "the provider refused" in approved[2]


def test_inbox_list_and_requeue(
    tmp_path: Path, workspace: Path, api_key: str, model_server: ScriptedModelServer,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    item = new_item("acme", "alice", "webhook", "hooks", "webhook.fact", {"title": "dead one"})

    async def dead_letter() -> None:
        store = FileInboxStore(workspace)
        await store.write(item)
        aggregate = InboxAggregate(store)
        (claimed,) = await aggregate.claim("acme", "alice", "elsewhere", limit=1)
        await aggregate.fail(claimed, "elsewhere", "the mail server said no", retry=False)

    asyncio.run(dead_letter())
    with serve(tmp_path, workspace, model_server) as server:
        dead = cli(capsys, server, api_key, "inbox", "list", "alice", "--state", "dead")
        requeued = cli(capsys, server, api_key, "inbox", "requeue", "alice", item.item_id)
        after = json.loads(cli(capsys, server, api_key, "inbox", "list", "alice", "--json")[1])
        missing = cli(capsys, server, api_key, "inbox", "requeue", "alice", "nope")
    assert dead[0] == 0 and item.item_id in dead[1] and "the mail server said no" in dead[1]
    assert "dead: 1" in dead[1] and re.search(rf"  {MOMENT}  ", dead[1]), dead[1]
    assert requeued == (0, f"requeued {item.item_id}: now pending\n", "")
    assert after["counts"]["pending"] == 1 and after["counts"]["dead"] == 0
    assert missing[0] == 1 and missing[2].startswith("genworker: inbox_item_not_found (404)")


def test_errors_are_one_clear_line_and_a_non_zero_exit(
    tmp_path: Path, workspace: Path, api_key: str, model_server: ScriptedModelServer,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    with serve(tmp_path, workspace, model_server) as server:
        url = server.url
        wrong_key = console(url, api_key[:-3] + "xyz", "runs", "list", "alice")
        other_tenant = cli(capsys, server, api_key, "runs", "list", "globex/gina")
        bad_worker = cli(capsys, server, api_key, "inbox", "list", "a/b/c")
    gone = console(url, api_key, "task", "alice", "hello")  # the server has stopped
    no_key = subprocess.run(
        [str(GENWORKER), "runs", "list", "alice"], capture_output=True, text=True, encoding="utf-8", timeout=120,
        env={k: v for k, v in os.environ.items() if k not in ("GENWORKER_API_KEY", "GENWORKER_URL")},
    )  # fmt: skip
    for result, code, start in (
        (wrong_key, 1, "genworker: unauthorized (401): invalid or revoked API key (check --api-key"),
        (gone, 1, f"genworker: cannot reach {url}: "),
        (no_key, 2, "genworker: no API key: pass --api-key or set GENWORKER_API_KEY"),
    ):
        assert result.returncode == code, result.stderr
        assert result.stderr.startswith(start) and result.stderr.count("\n") == 1, result.stderr
        assert "Traceback" not in result.stderr and result.stdout == ""
    assert other_tenant[0] == 1 and other_tenant[2].startswith("genworker: ") and "404" in other_tenant[2]
    assert bad_worker[0] == 2 and "expected WORKER or TENANT/WORKER" in bad_worker[2]
