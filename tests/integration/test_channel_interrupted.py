"""What an IM message replayed after a restart gets, decided from the run its key already made;
and a run still held by another live process is waited for, then run again once that process is gone.
Real lifecycle files, step journal and lease files; the server is the real app over HTTP."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from genworker.api.app import create_app
from genworker.channels.base import ChannelMessage
from genworker.channels.ingest.journal import EventJournal
from genworker.channels.ingest.processor import ChannelProcessor, session_thread_id
from genworker.channels.interrupted import Notify, RunAgain, Settled, Wait, after_restart
from genworker.engine.base import RunResult
from genworker.settings import load_settings
from genworker.testing import Reply, ScriptedModelServer, scripted_env
from genworker.testing.channels import Handled
from genworker.testing.live_server import LiveServer
from genworker.tools.journal import StepJournal
from genworker.worker.lifecycle import TaskLifecycle
from genworker.worker.lifecycle.leases import FileInstanceLeases
from genworker.worker.task import RunRecord, TaskManifest, TaskProvenance, ToolCallRecord

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def manifest(run_id: str, key: str | None = None, thread_id: str | None = None) -> TaskManifest:
    provenance = TaskProvenance(source_type="chat", idempotency_key=key)
    return TaskManifest(f"task-{run_id}", run_id, "acme", "alice", "hi", T0, thread_id=thread_id, provenance=provenance)


async def interrupted(root: Path, run_id: str, prepare: Callable[[TaskLifecycle, RunRecord], object]) -> RunRecord:
    crashed = TaskLifecycle(root, owner="rt_dead")
    run = await crashed.persist_initial(manifest(run_id), start=True)
    done = prepare(crashed, run)
    if asyncio.iscoroutine(done):
        await done
    await TaskLifecycle(root, owner="rt_new").recover_interrupted(alive=lambda owner: False)
    return await crashed.get_run(run.ref)


async def test_after_restart_runs_again_only_when_no_tool_ran(tmp_path: Path) -> None:
    untouched = await interrupted(tmp_path, "r1", lambda lc, run: None)
    assert isinstance(after_restart(untouched), RunAgain)

    read = ToolCallRecord("file_read", "c1", "completed")  # even a read: the run had started acting
    after_a_tool = await interrupted(tmp_path, "r2", lambda lc, run: lc.record_tool_call(run.ref, read))
    decision = after_restart(after_a_tool)
    assert isinstance(decision, Notify) and "file_read" in decision.reason and "not repeated" in decision.reason

    steps = StepJournal(tmp_path)
    unknown = await interrupted(tmp_path, "r3", lambda lc, run: steps.started("acme", "alice", "r3", "c9", "send_mail"))
    decision = after_restart(unknown)
    assert isinstance(decision, Notify) and "send_mail (c9)" in decision.reason and "unknown" in decision.reason

    live = TaskLifecycle(tmp_path, owner="rt_live")
    running = await live.persist_initial(manifest("r4"), start=True)
    assert isinstance(after_restart(running), Wait)
    completed = await live.complete(
        (await live.persist_initial(manifest("r5"), start=True)).ref, RunResult("completed", "ok")
    )
    assert isinstance(after_restart(completed), Settled)


PERSONA = "---\nidentity: {name: Alice, worker_id: alice}\nchannels:\n  - {type: slack}\n---\nYou are alice.\n"


def test_a_run_held_by_a_live_process_is_waited_for_then_run_again_once_it_is_gone(
    tmp_path: Path, small_workspace: Callable[..., Path], model_server: ScriptedModelServer
) -> None:
    workspace = small_workspace(
        {"acme": ["alice"]},
        {
            "tenants/acme/workers/alice/PERSONA.md": PERSONA,
            "tenants/acme/workers/alice/CHANNEL_CREDENTIALS.json": json.dumps(
                {"slack": {"bot_token": "xoxb-test", "signing_secret": "s"}}
            ),
        },
    )
    message = ChannelMessage(
        "slack", "acme~alice~slack", "acme", "alice", "D1:1.2", "D1", "p2p", "U_PEER", "status?", T0.isoformat()
    )
    key = "channel:acme~alice~slack:D1:1.2"
    other = FileInstanceLeases(workspace, "rt_other")  # another process, alive, in the middle of this message
    other.renew()
    held = asyncio.run(
        TaskLifecycle(workspace, owner="rt_other").persist_initial(
            manifest("r_held", key, session_thread_id(message)), start=True
        )
    )
    EventJournal(workspace).append(message)  # accepted, not answered
    model_server.expect(Reply("All green."))
    (tmp_path / "configs").mkdir()
    app = create_app(load_settings(tmp_path / "configs", scripted_env(model_server), workspace=workspace))
    handled = Handled()
    replies: list[str] = []

    class Replier:
        async def reply(self, message: ChannelMessage, outbound: object) -> object:
            from genworker.delivery.messages import DeliveryResult

            replies.append(getattr(outbound, "text", ""))
            return DeliveryResult(True, message.platform)

    with LiveServer(app):
        processor: ChannelProcessor = app.state.runtime.services.channels.processor
        processor.replier = Replier()  # type: ignore[assignment]
        processor.listeners.append(handled)
        processor.clock = time.time  # the replayed entry is handled before the listener exists: look again
        processor.due.put(EventJournal(workspace).pending()[0], 0.0)
        handled.wait_count("D1:1.2", "deferred", 1)
        assert replies == [] and len(model_server.requests) == 0
        other.release()  # that process is gone: the next sweep interrupts its run
        swept = asyncio.run(TaskLifecycle(workspace).recover_orphans(FileInstanceLeases(workspace).alive))
        assert swept == [held.ref]
        processor.clock = lambda: time.time() + processor.policy.base_s + 1  # the next look is due
        handled.wait_count("D1:1.2", "replied", 1)
    assert replies == ["All green."]
    assert EventJournal(workspace).pending() == []
    entry_runs = sorted(p.stem for p in (workspace / "tenants/acme/workers/alice/runs").glob("*.json"))
    assert "r_held" in entry_runs and len(entry_runs) == 2


pytestmark = pytest.mark.anyio
