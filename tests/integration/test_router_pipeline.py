"""WorkerRouter through the real runtime: governance postures reach the tool scope, gated work
waits for a confirmation that the API approves, blocked work fails with its reasons, a duty's
pre_script runs once before the engine, and compaction kicks in under a small budget."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from genworker.api.app import create_app
from genworker.auth import ApiKeyStore
from genworker.conversation.models import session_id_for
from genworker.engine.events import ApprovalRequired, RunError
from genworker.runtime.composition import Runtime
from genworker.settings import load_settings
from genworker.testing import Fail, Reply, ScriptedModelServer, ToolCallReply, scripted_env
from genworker.worker.context import ContextWindowConfig
from genworker.worker.router import RouteAccepted, RouteDone, RouteRequest, RouterEvent

DUTIES = {
    "closed.md": "---\nduty_id: closed\ntitle: Old\nstatus: closed\ntriggers: [{id: m, type: manual}]\n---\nDo it.\n",
    "propose.md": (
        "---\nduty_id: propose\ntitle: Propose only\ntriggers: [{id: m, type: manual}]\n"
        "posture: {default: propose}\n---\nLook and propose.\n"
    ),
    "approve.md": (
        "---\nduty_id: approve\ntitle: Needs a yes\ntriggers: [{id: m, type: manual}]\n"
        "contract: {version: '1', approval: {required: true}}\n---\nPay the invoice.\n"
    ),
    "script.md": (
        "---\nduty_id: script\ntitle: Scripted\ntriggers: [{id: m, type: manual}]\n"
        "pre_script: {inline: 'echo fresh-numbers-42', language: bash}\n---\nReport the numbers.\n"
    ),
}


@pytest.fixture
def workspace(small_workspace: Callable[..., Path]) -> Path:
    extra = {f"tenants/acme/workers/alice/duties/{name}": text for name, text in DUTIES.items()}
    extra["tenants/zero/TENANT.json"] = '{"tenant_id": "zero", "trust_level": 0, "default_worker": "zed"}'
    extra["tenants/zero/workers/zed/PERSONA.md"] = "---\nidentity: {name: Zed, worker_id: zed}\n---\nHi\n"
    return small_workspace({"acme": ["alice"]}, extra)


@contextmanager
def running(tmp_path: Path, workspace: Path, model: ScriptedModelServer) -> Iterator[tuple[TestClient, Runtime]]:
    (tmp_path / "configs").mkdir(exist_ok=True)
    env = scripted_env(model, GENWORKER_HEARTBEAT_ENABLED="true")
    with TestClient(create_app(load_settings(tmp_path / "configs", env, workspace=workspace))) as client:
        yield client, client.app.state.runtime  # type: ignore[attr-defined]


def route(client: TestClient, runtime: Runtime, req: RouteRequest) -> list[RouterEvent]:
    async def collect() -> list[RouterEvent]:
        return [event async for event in runtime.services.router.route_stream(req)]

    return client.portal.call(collect)  # type: ignore[union-attr]


def tool_names(body: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in body.get("tools", [])}


def test_postures_decide_which_tools_the_model_sees(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply("normal"), Reply("proposal"), Reply("degraded"))
    with running(tmp_path, workspace, model_server) as (client, runtime):
        route(client, runtime, RouteRequest("acme", "alice", "hello", conversational=False))
        route(
            client,
            runtime,
            RouteRequest("acme", "alice", "check", "duty", duty_id="propose", trigger_id="m", conversational=False),
        )
        route(client, runtime, RouteRequest("zero", "zed", "hello", conversational=False))
    normal, proposal, degraded = (tool_names(r) for r in model_server.requests)
    assert {"file_read", "file_write", "bash_execute"} <= normal
    for restricted in (proposal, degraded):
        assert "file_read" in restricted and not {"file_write", "bash_execute", "execute_code"} & restricted


def test_blocked_work_fails_with_the_reasons_and_no_model_call(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    with running(tmp_path, workspace, model_server) as (client, runtime):
        events = route(
            client,
            runtime,
            RouteRequest("acme", "alice", "x", "duty", duty_id="closed", trigger_id="m", conversational=False),
        )
    error = next(e for e in events if isinstance(e, RunError))
    done = events[-1]
    assert isinstance(done, RouteDone) and done.record.state == "failed"
    assert error.code == "governance_blocked" and "closed" in error.message
    assert model_server.requests == []


def test_gated_work_waits_for_a_confirmation_then_runs(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply("invoice paid"))
    key = ApiKeyStore(workspace).create("acme")[1]
    auth = {"Authorization": f"Bearer {key}"}
    with running(tmp_path, workspace, model_server) as (client, runtime):
        events = route(
            client,
            runtime,
            RouteRequest("acme", "alice", "pay", "duty", duty_id="approve", trigger_id="m", conversational=False),
        )
        gate = next(e for e in events if isinstance(e, ApprovalRequired))
        assert isinstance(events[-1], RouteDone) and events[-1].record.state == "waiting_approval"
        assert model_server.requests == []  # nothing ran
        listed = client.get("/api/v1/workers/alice/confirmations", headers=auth).json()["confirmations"]
        assert [c["confirmation_id"] for c in listed] == [gate.call_id] and listed[0]["status"] == "pending"
        approved = client.post(f"/api/v1/workers/alice/confirmations/{gate.call_id}/approve", headers=auth).json()
        assert approved["confirmation"]["status"] == "approved"
        assert approved["run"]["state"] == "completed" and approved["output"] == "invoice paid"
        again = client.post(f"/api/v1/workers/alice/confirmations/{gate.call_id}/approve", headers=auth)
        assert again.status_code == 409
        old = client.get(f"/api/v1/workers/alice/runs/{events[-1].record.run_id}", headers=auth).json()
        assert old["state"] == "superseded"


def test_duty_pre_script_runs_once_and_feeds_the_task(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    def sees_script_output(body: dict[str, Any]) -> None:
        assert "fresh-numbers-42" in body["messages"][-1]["content"]

    model_server.expect(Reply("42 it is", check=sees_script_output))
    with running(tmp_path, workspace, model_server) as (client, runtime):
        events = route(
            client,
            runtime,
            RouteRequest("acme", "alice", "report", "duty", duty_id="script", trigger_id="m", conversational=False),
        )
    assert isinstance(events[-1], RouteDone) and events[-1].result.output == "42 it is"


def test_small_budget_compacts_old_history(tmp_path: Path, workspace: Path, model_server: ScriptedModelServer) -> None:
    long = " ".join(f"w{i}" for i in range(300))  # LiteLLM rejects a stream repeating one chunk
    with running(tmp_path, workspace, model_server) as (client, runtime):
        thread = None
        for turn in range(4):
            model_server.expect(Reply(f"answer {turn} " + long))
            events = route(client, runtime, RouteRequest("acme", "alice", f"question {turn} " + long, thread_id=thread))
            thread = events[0].thread_id  # type: ignore[union-attr]
        full = str(model_server.requests[-1]["messages"])
        assert "question 0" in full  # with the default budget the whole thread fits
        runtime.services.router.context_config = ContextWindowConfig(total_tokens=3000, reserve_for_output=500)
        model_server.expect(Reply("Earlier: four questions about numbers."), Reply("final"))
        route(client, runtime, RouteRequest("acme", "alice", "and now?", thread_id=thread))
    summary_call, final_call = model_server.requests[-2:]
    assert "question 0" in str(summary_call["messages"])  # the old turns went to the summariser ...
    compacted = str(final_call["messages"])
    assert "question 0" not in compacted  # ... and left the prompt,
    assert "Earlier: four questions about numbers." in compacted and "and now?" in compacted


def test_the_run_records_the_skill_the_matcher_chose_or_the_callers(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer, keyword_skill: Callable[[str, str], str]
) -> None:
    for name, keyword in (("triage", "alert"), ("billing", "invoice")):
        (workspace / f"tenants/acme/workers/alice/skills/{name}").mkdir(parents=True)
        (workspace / f"tenants/acme/workers/alice/skills/{name}/SKILL.md").write_text(
            keyword_skill(name, keyword), encoding="utf-8"
        )
    model_server.expect(Reply("Triaged."), Reply("Billed."))
    text = "a disk alert on db-1"
    with running(tmp_path, workspace, model_server) as (client, runtime):
        matched = route(client, runtime, RouteRequest("acme", "alice", text, "task", conversational=False))
        named = route(
            client, runtime, RouteRequest("acme", "alice", text, "task", conversational=False, skill_id="billing")
        )
        tasks = runtime.services.router.tasks
        records = [r.record for events in (matched, named) if isinstance(r := events[-1], RouteDone)]
        stored = [client.portal.call(tasks.get_run, r.ref) for r in records]  # type: ignore[union-attr]
        manifests = [
            client.portal.call(tasks.get_manifest, "acme", "alice", r.task_id)  # type: ignore[union-attr]
            for r in records
        ]
    assert [(r.state, r.skill_id) for r in stored] == [("completed", "triage"), ("completed", "billing")]
    assert [m.skill_id for m in manifests] == ["triage", "billing"]


def test_a_tasks_evidence_reaches_the_policy_gate_and_bad_evidence_is_a_422(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    """A one-shot task whose evidence names an irreversible action waits for a person (interactive
    work is gated for those); the policy snapshot records the evidence the gate judged."""
    auth = {"Authorization": f"Bearer {ApiKeyStore(workspace).create('acme')[1]}"}
    evidence = {
        "confidence": 0.99,
        "evidence_sources": ["crm", "email"],
        "requested_actions": ["external_commitment_send"],
    }
    body = {"worker_id": "alice", "task": "Send the customer the signed quote", "evidence": evidence}
    with running(tmp_path, workspace, model_server) as (client, runtime):
        streamed = client.post("/api/v1/worker/task/stream", headers=auth, json=body)
        assert streamed.status_code == 200, streamed.text
        run = client.get(f"/api/v1/workers/alice/runs/{streamed.headers['X-Run-Id']}", headers=auth).json()
        snapshot_id = run["provenance"]["policy_snapshot_ref"].rsplit("/", 1)[-1].removesuffix(".json")
        snapshot = runtime.services.router.governance.snapshots.load_policy("acme", "alice", snapshot_id)
        bad = client.post(
            "/api/v1/worker/task/stream",
            headers=auth,
            json={**body, "evidence": {"evidence_sources": ["crm"], "sources": ["email"]}},
        )
    assert run["state"] == "waiting_approval" and model_server.requests == []
    assert (snapshot.inputs.confidence, snapshot.inputs.evidence_sources) == (0.99, ("crm", "email"))
    assert snapshot.decision.gate_result == "confirm"
    assert bad.status_code == 422 and bad.json()["error"] == {
        "code": "invalid_evidence",
        "message": "body.evidence: give one of evidence_sources or sources, not both",
    }


def test_unknown_worker_and_skill_are_route_errors(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    from genworker.worker.router import RouteError

    with running(tmp_path, workspace, model_server) as (client, runtime):
        with pytest.raises(RouteError, match="no worker"):
            route(client, runtime, RouteRequest("acme", "nobody", "x"))
        with pytest.raises(RouteError, match="no skill"):
            route(client, runtime, replace(RouteRequest("acme", "alice", "x"), skill_id="missing"))
    _ = asyncio


def test_a_message_queued_behind_a_busy_thread_sees_the_turn_before_it(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    """The second message waits for the first turn, then reads the thread: its context holds the
    first exchange (its session was not read before it waited)."""
    first_asked, release = threading.Event(), threading.Event()

    def hold_first(body: dict[str, Any]) -> None:
        first_asked.set()
        assert release.wait(30)

    def sees_first_turn(body: dict[str, Any]) -> None:
        contents = [str(m.get("content")) for m in body["messages"]]
        assert "first question" in contents and "first answer" in contents, contents

    model_server.expect(Reply("first answer", check=hold_first), Reply("second answer", check=sees_first_turn))
    with running(tmp_path, workspace, model_server) as (client, runtime):
        router = runtime.services.router

        async def both() -> tuple[list[RouterEvent], list[RouterEvent]]:
            first = asyncio.create_task(
                collect(router.route_stream(RouteRequest("acme", "alice", "first question", thread_id="t1")))
            )
            await asyncio.to_thread(first_asked.wait, 30)  # the first turn holds the thread
            second = asyncio.create_task(
                collect(router.route_stream(RouteRequest("acme", "alice", "second question", thread_id="t1")))
            )
            for _ in range(10_000):  # no I/O before the queue: a few loop passes get it there
                if (await router.queue.status("acme", "t1")).waiting:
                    break
                await asyncio.sleep(0)
            assert (await router.queue.status("acme", "t1")).waiting, "the second message is queued"
            release.set()
            return await first, await second

        first, second = client.portal.call(both)  # type: ignore[union-attr]
    assert [e.result.status for e in (first[-1], second[-1]) if isinstance(e, RouteDone)] == ["completed"] * 2


async def collect(events: AsyncIterator[RouterEvent]) -> list[RouterEvent]:
    return [event async for event in events]


def test_a_new_threads_session_is_stored_once_with_its_first_turn_and_not_for_a_failed_one(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    """A thread the turn starts is not stored before the engine: its first turn creates it (one save,
    version 1). A first turn that fails leaves no session behind; the thread works afterwards."""
    model_server.expect(Reply("first answer"), Fail(400), Reply("later answer"))
    with running(tmp_path, workspace, model_server) as (client, runtime):
        sessions = runtime.services.router.sessions
        first = route(client, runtime, RouteRequest("acme", "alice", "hello there"))
        started, done = first[0], first[-1]
        assert isinstance(started, RouteAccepted) and isinstance(done, RouteDone)
        stored = client.portal.call(lambda: sessions.get("acme", session_id_for("thread", "alice", started.thread_id)))  # type: ignore[union-attr]
        assert stored is not None and stored.version == 1
        assert [m.content for m in stored.messages] == ["hello there", "first answer"]

        failed = route(client, runtime, RouteRequest("acme", "alice", "this one fails"))
        started, done = failed[0], failed[-1]
        assert isinstance(started, RouteAccepted) and isinstance(done, RouteDone)
        assert done.record.state == "failed"
        session_id = session_id_for("thread", "alice", started.thread_id)
        assert client.portal.call(lambda: sessions.get("acme", session_id)) is None  # type: ignore[union-attr]
        again = route(client, runtime, RouteRequest("acme", "alice", "try again", thread_id=started.thread_id))
        assert isinstance(again[-1], RouteDone) and again[-1].record.state == "completed"
        stored = client.portal.call(lambda: sessions.get("acme", session_id))  # type: ignore[union-attr]
        assert stored is not None and [m.content for m in stored.messages] == ["try again", "later answer"]


@pytest.mark.parametrize("inline", [True, False])
def test_a_chat_turn_waits_for_two_journal_syncs_one_before_the_run_and_one_at_its_end(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch, inline: bool
) -> None:
    """The policy snapshot and the run record share one durable wait before the run; the settled
    run, the session turn and the episode share one at the end. A lone turn syncs on the event loop
    itself; with GENWORKER_WRITE_JOURNAL_INLINE_SYNC=false, always in the journal's sync thread."""
    model_server.expect(Reply("first answer"))
    (tmp_path / "configs").mkdir(exist_ok=True)
    flag = "true" if inline else "false"
    env = scripted_env(
        model_server, GENWORKER_WRITE_JOURNAL_CHECKPOINT_S="3600", GENWORKER_WRITE_JOURNAL_INLINE_SYNC=flag
    )
    with TestClient(create_app(load_settings(tmp_path / "configs", env, workspace=workspace))) as client:
        runtime: Runtime = client.app.state.runtime  # type: ignore[attr-defined]
        synced: list[tuple[str, str]] = []
        real = os.fdatasync

        def fdatasync(fd: int) -> None:
            synced.append((str(Path(f"/proc/self/fd/{fd}").readlink()), threading.current_thread().name))
            real(fd)

        monkeypatch.setattr(os, "fdatasync", fdatasync)
        events = route(client, runtime, RouteRequest("acme", "alice", "hello there"))
        done = events[-1]
        assert isinstance(done, RouteDone) and done.record.state == "completed"
        assert len(synced) == 2 and all(".journal" in path for path, _ in synced)
        assert {thread == "journal-sync" for _, thread in synced} == {not inline}


def test_a_write_outside_any_turn_is_synced_by_the_sync_thread(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a lone turn syncs on the loop: writers outside any turn (a burst of API or webhook
    writes) keep sharing the sync thread's fdatasyncs."""
    with running(tmp_path, workspace, model_server) as (client, runtime):
        files = runtime.services.files
        assert files is not None
        threads: list[str] = []
        real = os.fdatasync
        monkeypatch.setattr(os, "fdatasync", lambda fd: (threads.append(threading.current_thread().name), real(fd))[1])
        target = workspace / "tenants" / "acme" / "scratch.json"
        client.portal.call(lambda: files.run(lambda: files.write_atomic(target, b"{}")))  # type: ignore[union-attr]
        assert threads == ["journal-sync"] and target.read_bytes() == b"{}"


def test_the_engine_starts_before_the_pre_run_sync_and_no_tool_runs_before_it(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine's first model call overlaps the pre-run sync; tools have side effects, so the
    pipeline waits for the run record to be on disk (`ToolScope.recorded`) before any call. The
    journal's first fdatasync is held until the engine has started (it never would, were it to wait
    for the sync) and then until someone waits for it or a tool runs: the tool must see every
    pre-run line synced."""
    from genworker.engine.dispatcher import EngineDispatcher
    from genworker.tools.pipeline import ToolPipeline
    from genworker.write_journal import Written

    call = Reply("", tool_calls=(ToolCallReply("file_read", {"path": "notes.md"}, "c1"),))
    model_server.expect(call, Reply("done"))
    (tmp_path / "configs").mkdir(exist_ok=True)
    # the sync thread's path (a lone turn would sync on the loop, before the engine starts)
    env = scripted_env(
        model_server, GENWORKER_WRITE_JOURNAL_CHECKPOINT_S="3600", GENWORKER_WRITE_JOURNAL_INLINE_SYNC="false"
    )
    started, release, at_tool, pre_run = threading.Event(), threading.Event(), [], []
    real_run, real_invoke, real_fdatasync, real_durable = (
        EngineDispatcher.run, ToolPipeline._invoke, os.fdatasync, Written.durable
    )  # fmt: skip

    async def invoke(self: ToolPipeline, ctx: Any) -> Any:  # past every check, as the tool runs
        at_tool.append(journal._segment.synced)
        release.set()
        return await real_invoke(self, ctx)

    monkeypatch.setattr(ToolPipeline, "_invoke", invoke)  # before the pipelines are built
    with TestClient(create_app(load_settings(tmp_path / "configs", env, workspace=workspace))) as client:
        runtime: Runtime = client.app.state.runtime  # type: ignore[attr-defined]
        journal = runtime.services.files

        def fdatasync(fd: int) -> None:
            assert started.wait(30), "the engine waited for the pre-run sync"
            assert release.wait(30)
            real_fdatasync(fd)

        async def run(self: EngineDispatcher, *args: Any, **kwargs: Any) -> Any:
            pre_run.append(journal._segment.written)  # the snapshot, manifest and run record lines
            started.set()
            return await real_run(self, *args, **kwargs)

        async def durable(self: Written) -> None:
            release.set()
            await real_durable(self)

        monkeypatch.setattr(os, "fdatasync", fdatasync)
        monkeypatch.setattr(EngineDispatcher, "run", run)
        monkeypatch.setattr(Written, "durable", durable)
        events = route(client, runtime, RouteRequest("acme", "alice", "hello there"))
        assert isinstance(events[-1], RouteDone) and events[-1].record.state == "completed"
        [lines], [synced] = pre_run, at_tool
        assert lines >= 2 and synced >= lines  # manifest and run record (and snapshot): on disk first
