"""The whole pipeline over real HTTP: uvicorn on a free port, LiteLLM to the scripted model
server, real API keys, real files. AG-UI events are validated with the protocol's own models."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2 as httpx
import openai
import pytest
from ag_ui.core import Event
from pydantic import TypeAdapter

from genworker.api.app import create_app
from genworker.auth import ApiKeyStore
from genworker.conversation import SessionManager
from genworker.settings import load_settings
from genworker.testing import Fail, Reply, ScriptedModelServer, ToolCallReply, scripted_env
from genworker.testing.live_server import LiveServer
from genworker.worker.lifecycle import TaskLifecycle
from genworker.worker.task import RunRef, RunState, TaskManifest

AGUI: TypeAdapter[Any] = TypeAdapter(Event)


@pytest.fixture
def workspace(small_workspace: Callable[..., Path]) -> Path:
    return small_workspace({"acme": ["alice", "bob"], "globex": ["gina"]})


@contextmanager
def serve(tmp_path: Path, workspace: Path, model: ScriptedModelServer) -> Iterator[LiveServer]:
    configs = tmp_path / "configs"
    configs.mkdir(exist_ok=True)
    env = scripted_env(model, GENWORKER_HEARTBEAT_ENABLED="true")
    with LiveServer(create_app(load_settings(configs, env, workspace=workspace))) as server:
        yield server


def key(workspace: Path, tenant: str, workers: list[str] | None = None) -> str:
    return ApiKeyStore(workspace).create(tenant, workers)[1]


def sse_events(response: httpx.Response) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in response.iter_lines() if line.startswith("data:")]


def chat(
    server: LiveServer, api_key: str, body: dict[str, Any], path: str = "/api/v1/chat/stream"
) -> list[dict[str, Any]]:
    with httpx.stream(
        "POST", server.url + path, json=body, headers={"Authorization": f"Bearer {api_key}"}, timeout=60
    ) as r:
        assert r.status_code == 200, r.read()
        return sse_events(r)


def test_chat_streams_a_tool_call_and_answer_as_valid_agui(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    (workspace / "tenants/acme/workers/alice/files").mkdir()
    (workspace / "tenants/acme/workers/alice/files/notes.md").write_text("buy milk", encoding="utf-8")
    model_server.expect(
        Reply("Looking.", tool_calls=(ToolCallReply("file_read", {"path": "files/notes.md"}, "c1"),)),
        Reply("Your note says: buy milk."),
    )
    api_key = key(workspace, "acme")
    with serve(tmp_path, workspace, model_server) as server:
        events = chat(server, api_key, {"worker_id": "alice", "message": "What does my note say?"})
    parsed = [AGUI.validate_python(e) for e in events]  # every event valid per the AG-UI models
    types = [e["type"] for e in events]
    assert types[0] == "RUN_STARTED" and types[-1] == "RUN_FINISHED"
    assert types.index("TOOL_CALL_START") < types.index("TOOL_CALL_ARGS") < types.index("TOOL_CALL_END")
    assert types.index("TOOL_CALL_END") < types.index("TOOL_CALL_RESULT")
    result = next(e for e in events if e["type"] == "TOOL_CALL_RESULT")
    assert "buy milk" in result["content"]
    text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text.endswith("Your note says: buy milk.")
    assert types.count("TEXT_MESSAGE_START") == types.count("TEXT_MESSAGE_END")
    assert len(parsed) == len(events)


def test_at_run_finished_the_run_and_the_turn_are_already_stored(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply("Stored before you hear it."))
    api_key = key(workspace, "acme")
    auth = {"Authorization": f"Bearer {api_key}"}
    with serve(tmp_path, workspace, model_server) as server, httpx.stream(
        "POST", server.url + "/api/v1/chat/stream", json={"worker_id": "alice", "message": "hi"}, headers=auth,
        timeout=60,
    ) as stream:  # fmt: skip
        started: dict[str, Any] = {}
        for line in stream.iter_lines():
            if not line.startswith("data:"):
                continue
            event = json.loads(line[5:])
            started = started or event
            if event["type"] == "RUN_FINISHED":  # read the records while the stream is still open
                run = httpx.get(f"{server.url}/api/v1/workers/alice/runs/{started['runId']}", headers=auth).json()
                tasks = httpx.get(f"{server.url}/api/v1/chat/{started['threadId']}/tasks", headers=auth).json()
                break
    assert run["state"] == "completed" and run["deliverables"][0]["content"] == "Stored before you hear it."
    assert [t["run_id"] for t in tasks["tasks"]] == [started["runId"]]


def test_provider_failure_is_run_error_and_a_failed_run(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    model_server.expect(Fail(500))  # one model for every tier: nothing to fall back to
    api_key = key(workspace, "acme")
    with serve(tmp_path, workspace, model_server) as server:
        events = chat(server, api_key, {"worker_id": "alice", "message": "hello"})
        run_id = events[0]["runId"]
        run = httpx.get(
            f"{server.url}/api/v1/workers/alice/runs/{run_id}", headers={"Authorization": f"Bearer {api_key}"}
        ).json()
    types = [e["type"] for e in events]
    assert types[-1] == "RUN_ERROR" and "TEXT_MESSAGE_CONTENT" not in types
    assert events[-1]["code"] == "provider_error"
    assert run["state"] == "failed" and run["error"]["code"] == "provider_error"


async def a_bug(*args: object, **kwargs: object) -> None:
    raise RuntimeError("secret detail of a bug")


def only_run(server: LiveServer, api_key: str) -> dict[str, Any]:
    auth = {"Authorization": f"Bearer {api_key}"}
    (listed,) = httpx.get(f"{server.url}/api/v1/workers/alice/runs", headers=auth).json()["runs"]
    return dict(httpx.get(f"{server.url}/api/v1/workers/alice/runs/{listed['run_id']}", headers=auth).json())


def test_an_internal_error_ends_the_stream_in_run_error_and_fails_the_run(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug in the router once the stream started (here in context assembly): the stream still ends
    well-formed, in RUN_ERROR with an error id and nothing of the error's text, and the run record
    says it failed (it does not stay `running` until a restart)."""
    from genworker.worker import preparation

    monkeypatch.setattr(preparation, "build_managed_context", a_bug)
    api_key = key(workspace, "acme")
    with serve(tmp_path, workspace, model_server) as server:
        events = chat(server, api_key, {"worker_id": "alice", "message": "hello"})
        run = only_run(server, api_key)
    AGUI.validate_python(events[-1])
    assert [e["type"] for e in events] == ["RUN_ERROR"]  # as for a blocked task: the engine never started
    assert events[-1]["code"] == "internal_error" and "error id err_" in events[-1]["message"]
    assert "secret detail" not in events[-1]["message"]
    assert run["state"] == "failed" and run["error"] == {"code": "internal_error", "message": events[-1]["message"]}


def test_an_internal_error_before_the_run_is_recorded_still_ends_in_run_error(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Governance fails before the run record exists: nothing to mark failed, and the stream still
    ends in RUN_ERROR (the last resort in api/runs.py) instead of a cut connection."""
    from genworker.worker.governance import TaskGovernanceStage

    monkeypatch.setattr(TaskGovernanceStage, "evaluate_async", a_bug)
    api_key = key(workspace, "acme")
    with serve(tmp_path, workspace, model_server) as server:
        events = chat(server, api_key, {"worker_id": "alice", "message": "hello"})
        auth = {"Authorization": f"Bearer {api_key}"}
        runs = httpx.get(f"{server.url}/api/v1/workers/alice/runs", headers=auth)
        body = {"model": "alice", "messages": [{"role": "user", "content": "hello"}]}
        openai_style = httpx.post(f"{server.url}/v1/chat/completions", json=body, headers=auth, timeout=60)
    AGUI.validate_python(events[-1])
    assert [e["type"] for e in events] == ["RUN_ERROR"] and events[-1]["code"] == "internal_error"
    assert "secret detail" not in events[-1]["message"] and runs.json()["runs"] == []
    error = openai_style.json()["error"]
    assert openai_style.status_code == 500 and error["code"] == "internal_error"
    assert "error id err_" in error["message"] and "secret detail" not in openai_style.text


def test_a_turn_that_cannot_be_stored_ends_in_run_error(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The answer streamed, the run settled, then the thread's session cannot be written: the client
    is told (RUN_ERROR, no RUN_FINISHED); the run record keeps the state it settled in."""

    async def disk_full(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(SessionManager, "append", disk_full)
    model_server.expect(Reply("An answer the session cannot keep."))
    api_key = key(workspace, "acme")
    with serve(tmp_path, workspace, model_server) as server:
        events = chat(server, api_key, {"worker_id": "alice", "message": "hello"})
        run = only_run(server, api_key)
    AGUI.validate_python(events[-1])
    types = [e["type"] for e in events]
    assert types[-1] == "RUN_ERROR" and "RUN_FINISHED" not in types and events[-1]["code"] == "internal_error"
    assert "No space" not in events[-1]["message"]
    assert run["state"] == "completed"


def test_thread_history_survives_a_restart(tmp_path: Path, workspace: Path, model_server: ScriptedModelServer) -> None:
    api_key = key(workspace, "acme")
    model_server.expect(Reply("Nice to meet you, Ann."))
    with serve(tmp_path, workspace, model_server) as server:
        first = chat(server, api_key, {"worker_id": "alice", "message": "I am Ann."})
    thread_id = first[0]["threadId"]

    def sees_history(body: dict[str, Any]) -> None:
        contents = [m.get("content") for m in body["messages"]]
        assert "I am Ann." in contents and "Nice to meet you, Ann." in contents

    model_server.expect(Reply("You are Ann.", check=sees_history))
    with serve(tmp_path, workspace, model_server) as server:  # a new server process over the same files
        second = chat(server, api_key, {"worker_id": "alice", "thread_id": thread_id, "message": "Who am I?"})
        tasks = httpx.get(
            f"{server.url}/api/v1/chat/{thread_id}/tasks", headers={"Authorization": f"Bearer {api_key}"}
        ).json()
    assert second[0]["threadId"] == thread_id
    assert [t["state"] for t in tasks["tasks"]] == ["completed", "completed"]


def test_a_run_left_running_by_a_crash_is_interrupted_at_start(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    from datetime import UTC, datetime

    lifecycle = TaskLifecycle(workspace)
    manifest = TaskManifest("task_x", "run_x", "acme", "alice", "half done", datetime.now(UTC))
    ref = RunRef("acme", "alice", "run_x")
    asyncio.run(lifecycle.persist_initial(manifest))
    asyncio.run(lifecycle.start(ref))
    with serve(tmp_path, workspace, model_server):
        pass
    run = asyncio.run(lifecycle.get_run(ref))
    assert run.state is RunState.INTERRUPTED


def test_official_openai_client_sync_async_and_streaming(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    api_key = key(workspace, "acme")
    model_server.expect(Reply("sync answer"), Reply("async answer"), Reply("streamed answer here"))
    with serve(tmp_path, workspace, model_server) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key=api_key)
        models = client.models.list()
        assert sorted(m.id for m in models.data) == ["alice", "bob"]
        done = client.chat.completions.create(model="alice", messages=[{"role": "user", "content": "hi"}])
        assert done.choices[0].message.content == "sync answer"
        assert done.choices[0].finish_reason == "stop" and done.usage is not None and done.usage.total_tokens > 0

        async def run_async() -> str:
            async with openai.AsyncOpenAI(base_url=server.url + "/v1", api_key=api_key) as aclient:
                answer = await aclient.chat.completions.create(
                    model="acme/alice", messages=[{"role": "user", "content": "hi"}]
                )
                return answer.choices[0].message.content or ""

        assert asyncio.run(run_async()) == "async answer"
        stream = client.chat.completions.create(
            model="alice",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == "streamed answer here"
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
        assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0


def test_a_tenant_key_reaches_nothing_of_another_tenant(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    acme, globex = key(workspace, "acme"), key(workspace, "globex")
    model_server.expect(Reply("for gina"))
    with serve(tmp_path, workspace, model_server) as server:
        gina = chat(server, globex, {"worker_id": "gina", "message": "hello"})
        thread, run_id = gina[0]["threadId"], gina[0]["runId"]
        as_acme = {"Authorization": f"Bearer {acme}"}
        probes = [
            ("POST", "/api/v1/chat/stream", {"worker_id": "gina", "message": "x"}),
            ("POST", "/api/v1/chat/stream", {"worker_id": "globex/gina", "message": "x"}),
            ("POST", "/api/v1/worker/task/stream", {"worker_id": "gina", "task": "x"}),
            ("POST", "/v1/chat/completions", {"model": "globex/gina", "messages": [{"role": "user", "content": "x"}]}),
            ("GET", "/api/v1/workers/gina/runs", None),
            ("GET", f"/api/v1/workers/gina/runs/{run_id}", None),
            ("GET", f"/api/v1/workers/globex%2Fgina/runs/{run_id}", None),
            ("GET", "/api/v1/workers/gina/confirmations", None),
            ("GET", f"/api/v1/chat/{thread}/tasks", None),
            ("POST", "/api/v1/worker/ops/reload", {"worker_id": "globex/gina"}),
        ]
        for method, path, body in probes:
            response = httpx.request(method, server.url + path, json=body, headers=as_acme, timeout=30)
            assert response.status_code == 404, (path, response.status_code, response.text)
            assert response.json()["error"]["code"] in (
                "worker_not_found",
                "thread_not_found",
                "run_not_found",
                "not_found",
            )
        models = httpx.get(server.url + "/v1/models", headers=as_acme).json()
        assert "gina" not in [m["id"] for m in models["data"]]
        overview = httpx.get(server.url + "/api/v1/worker/ops/overview", headers=as_acme).json()
        assert overview["tenant_id"] == "acme" and "gina" not in overview["workers"]
        queue = httpx.get(f"{server.url}/api/v1/chat/{thread}/queue", headers=as_acme).json()
        assert queue["running"] is None and queue["waiting"] == []
        for method, path, body in probes:  # and nothing without a key at all
            if "%2F" not in path:  # that one matches no route at all
                assert httpx.request(method, server.url + path, json=body, timeout=30).status_code == 401


def test_a_long_thread_archives_its_oldest_messages_and_its_prompt_holds_the_newest(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    from genworker.conversation import AssistantMessage, FileSessionStore, UserMessage

    async def long_thread() -> None:  # 1,000 messages already: the next turn's two go past the limit
        manager = SessionManager(FileSessionStore(workspace))
        session = await manager.get_or_create_thread("acme", "alice", "long")
        for turn in range(0, 500, 50):
            pairs = ((UserMessage(f"q{i}"), AssistantMessage(f"a{i}")) for i in range(turn, turn + 50))
            session = await manager.append(session, *(m for pair in pairs for m in pair))

    asyncio.run(long_thread())
    model_server.expect(Reply("noted"), Reply("still here"))
    api_key = key(workspace, "acme")
    with serve(tmp_path, workspace, model_server) as server:
        for message in ("and now?", "and then?"):  # the first turn's save archives 500 messages
            events = chat(server, api_key, {"worker_id": "alice", "thread_id": "long", "message": message})
            assert events[-1]["type"] == "RUN_FINISHED"
    first, second = ([str(m.get("content")) for m in r["messages"]] for r in model_server.requests)
    assert "q0" in first and "q0" not in second and "q250" in second and "noted" in second
    assert any("and then?" in text for text in second)

    async def stored() -> tuple[int, list[str]]:
        manager = SessionManager(FileSessionStore(workspace))
        session = await manager.get("acme", "alice.long")
        assert session is not None
        return session.archived, [m.content for m in await manager.all_messages(session)]

    archived, everything = asyncio.run(stored())
    assert archived == 500 and len(everything) == 1_004
    assert everything[:2] == ["q0", "a0"] and everything[-4:] == ["and now?", "noted", "and then?", "still here"]


def test_ops_reload_reloads_the_tenant_without_a_body_and_keeps_the_last_good_worker(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    api_key = key(workspace, "acme")
    auth = {"Authorization": f"Bearer {api_key}"}
    persona = workspace / "tenants/acme/workers/bob/PERSONA.md"
    with serve(tmp_path, workspace, model_server) as server:
        tenant = httpx.post(server.url + "/api/v1/worker/ops/reload", headers=auth, timeout=30)  # no body at all
        assert tenant.status_code == 200, tenant.text
        assert tenant.json()["target"] == "acme" and tenant.json()["ok"] is True
        persona.write_text(persona.read_text(encoding="utf-8").replace("name: Bob", "name: Robert"), encoding="utf-8")
        bob = httpx.post(server.url + "/api/v1/worker/ops/reload", json={"worker_id": "bob"}, headers=auth, timeout=30)
        assert (bob.json()["target"], bob.json()["ok"]) == ("acme/bob", True)
        names = {m["id"]: m["name"] for m in httpx.get(server.url + "/v1/models", headers=auth).json()["data"]}
        assert names["bob"] == "Robert"
        persona.write_text("---\nidentity: [not, a, mapping]\n---\n", encoding="utf-8")
        broken = httpx.post(server.url + "/api/v1/worker/ops/reload", json={}, headers=auth, timeout=30).json()
        assert broken["ok"] is False and broken["kept_last_good"] is True
        assert broken["errors"] and all("PERSONA.md" in e["file"] for e in broken["errors"]), broken["errors"]
        names = {m["id"]: m["name"] for m in httpx.get(server.url + "/v1/models", headers=auth).json()["data"]}
        assert names["bob"] == "Robert"  # the last good version keeps serving


def test_ops_reload_moves_a_duty_schedule_without_the_file_watcher(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    """With hot reload off, the ops reload is how an edit takes effect: the duty scheduler follows
    it (it reloaded the registry only, and the schedule kept firing from the old files)."""
    duty = workspace / "tenants/acme/workers/alice/duties/sweep.md"
    duty.parent.mkdir(parents=True, exist_ok=True)
    text = "---\nduty_id: sweep\ntitle: Sweep\ntriggers: [{id: s, type: schedule, interval: 30m}]\n---\nSweep.\n"
    duty.write_text(text, encoding="utf-8")
    auth = {"Authorization": f"Bearer {key(workspace, 'acme')}"}
    (tmp_path / "configs").mkdir()
    app = create_app(load_settings(tmp_path / "configs", scripted_env(model_server), workspace=workspace))
    with LiveServer(app) as server:

        def interval() -> float:
            [job] = [j for j in app.state.runtime.services.duties.jobs().values() if "sweep" in j.id]
            return float(job.trigger.interval.total_seconds())

        assert interval() == 1800.0
        duty.write_text(text.replace("interval: 30m", "interval: 7m"), encoding="utf-8")
        assert httpx.post(server.url + "/api/v1/worker/ops/reload", headers=auth, timeout=30).json()["ok"] is True
        assert interval() == 420.0
        # one tenant reload, bob's files rejected and alice's duty changed: alice's schedule follows
        (workspace / "tenants/acme/workers/bob/PERSONA.md").write_text("---\nidentity: [x]\n---\n", encoding="utf-8")
        duty.write_text(text.replace("interval: 30m", "interval: 9m"), encoding="utf-8")
        outcome = httpx.post(server.url + "/api/v1/worker/ops/reload", headers=auth, timeout=30).json()
        assert (outcome["ok"], outcome["kept_last_good"]) == (False, True)
        assert interval() == 540.0


def test_malformed_bodies_get_json_4xx(tmp_path: Path, workspace: Path, model_server: ScriptedModelServer) -> None:
    api_key = key(workspace, "acme")
    auth = {"Authorization": f"Bearer {api_key}"}
    with serve(tmp_path, workspace, model_server) as server:
        cases = [
            ("/api/v1/chat/stream", {"worker_id": "alice"}, 422, "validation_error"),
            ("/api/v1/chat/stream", {"worker_id": "alice", "message": ""}, 422, "validation_error"),
            ("/api/v1/chat/stream", {"worker_id": "nobody", "message": "x"}, 404, "worker_not_found"),
            ("/api/v1/chat/stream", {"worker_id": "alice", "message": "x", "skill_id": "nope"}, 404, "skill_not_found"),
            (
                "/api/v1/chat/stream",
                {"worker_id": "alice", "message": "x", "thread_id": "../etc"},
                422,
                "validation_error",  # the thread id's pattern, in the OpenAPI document too
            ),
            ("/v1/chat/completions", {"model": "alice", "messages": []}, 422, "validation_error"),
            (
                "/v1/chat/completions",
                {"model": "alice", "messages": [{"role": "system", "content": "x"}]},
                422,
                "validation_error",
            ),
        ]
        for path, body, status, code in cases:
            response = httpx.post(server.url + path, json=body, headers=auth, timeout=30)
            assert (response.status_code, response.json()["error"]["code"]) == (status, code), (body, response.text)
        raw = httpx.post(
            server.url + "/api/v1/chat/stream",
            content=b"{not json",
            headers={**auth, "content-type": "application/json"},
        )
        assert raw.status_code == 422 and raw.json()["error"]["code"] == "validation_error"


def test_without_a_model_chat_answers_a_clear_error_naming_the_file(tmp_path: Path, workspace: Path) -> None:
    configs = tmp_path / "configs"
    configs.mkdir()
    api_key = key(workspace, "acme")
    app = create_app(load_settings(configs, {"GENWORKER_HOT_RELOAD": "false"}, workspace=workspace))
    with LiveServer(app) as server:
        events = chat(server, api_key, {"worker_id": "alice", "message": "hello"})
    assert events[-1]["type"] == "RUN_ERROR" and events[-1]["code"] == "model_not_configured"
    assert "config_local.env" in events[-1]["message"] and "litellm_local.json" in events[-1]["message"]
    assert not [e for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"]
