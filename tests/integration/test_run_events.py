"""How a routed run's events travel, through the real runtime and the scripted model server.

The API's run (api/runs.py) has one task and one queue between the engine and the SSE encoder: the
engine runs in the run's own task. A client that stops reading does not stop that run. A reader of
`route_stream` that leaves before RouteDone stops its run, engine included, and the thread's next
message runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from genworker.api.app import create_app
from genworker.api.runs import start_run
from genworker.engine.base import EngineRequest, RunResult
from genworker.engine.dispatcher import EngineDispatcher
from genworker.engine.events import Emit, RunStarted
from genworker.runtime.composition import Runtime
from genworker.settings import load_settings
from genworker.testing import Hang, Reply, ScriptedModelServer, scripted_env
from genworker.worker.router import RouteDone, RouteRequest, RouterEvent
from genworker.worker.task import RunRecord, RunRef


@pytest.fixture
def workspace(small_workspace: Callable[..., Path]) -> Path:
    return small_workspace({"acme": ["alice"]})


@contextmanager
def running(tmp_path: Path, workspace: Path, model: ScriptedModelServer) -> Iterator[tuple[TestClient, Runtime]]:
    (tmp_path / "configs").mkdir(exist_ok=True)
    with TestClient(
        create_app(load_settings(tmp_path / "configs", scripted_env(model), workspace=workspace))
    ) as client:
        yield client, client.app.state.runtime  # type: ignore[attr-defined]


class EngineSpy:
    """EngineDispatcher.run wrapped: the name of the task each engine run ran in, and how it ended."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.tasks: list[str] = []
        self.cancelled = asyncio.Event()
        original = EngineDispatcher.run

        async def run(dispatcher: EngineDispatcher, req: EngineRequest, emit: Emit) -> RunResult:
            task = asyncio.current_task()
            self.tasks.append(task.get_name() if task is not None else "")
            try:
                return await original(dispatcher, req, emit)
            except asyncio.CancelledError:
                self.cancelled.set()
                raise

        monkeypatch.setattr(EngineDispatcher, "run", run)


def test_the_engine_runs_in_the_api_runs_own_task(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = EngineSpy(monkeypatch)
    model_server.expect(Reply("Hello there."))
    with running(tmp_path, workspace, model_server) as (client, runtime):

        async def chat() -> tuple[str, list[RouterEvent]]:
            handle = await start_run(runtime, RouteRequest("acme", "alice", "hi", conversational=False))
            return handle.accepted.run_id, [event async for event in handle.events()]

        run_id, events = client.portal.call(chat)  # type: ignore[union-attr]
    assert spy.tasks == [f"run:{run_id}"]  # no task of its own between the engine and the handle's queue
    done = events[-1]
    assert isinstance(done, RouteDone) and done.result.output == "Hello there."
    assert any(isinstance(e, RunStarted) for e in events)


def test_a_client_that_stops_reading_does_not_stop_the_run(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply("Done anyway."))
    with running(tmp_path, workspace, model_server) as (client, runtime):

        async def leave_early() -> RunRecord:
            handle = await start_run(runtime, RouteRequest("acme", "alice", "hi", conversational=False))
            run_id = handle.accepted.run_id
            (task,) = [t for t in runtime.background if t.get_name() == f"run:{run_id}"]
            events = handle.events()
            await anext(events)  # the client reads one event, then goes away
            await events.aclose()
            await task
            return await runtime.services.router.tasks.get_run(RunRef("acme", "alice", run_id))

        record = client.portal.call(leave_early)  # type: ignore[union-attr]
    assert record.state == "completed"


def test_a_route_stream_reader_that_leaves_stops_the_run_and_frees_the_thread(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = EngineSpy(monkeypatch)
    model_server.expect(Hang(), Reply("The second answer."))
    with running(tmp_path, workspace, model_server) as (client, runtime):
        router = runtime.services.router

        async def leave_then_ask_again() -> list[RouterEvent]:
            stream = router.route_stream(RouteRequest("acme", "alice", "first", thread_id="t1"))
            await anext(stream)  # RouteAccepted
            assert isinstance(await anext(stream), RunStarted)
            await asyncio.to_thread(model_server.wait_for_requests, 1)  # the model call hangs
            await stream.aclose()
            await asyncio.wait_for(spy.cancelled.wait(), 30)
            return [e async for e in router.route_stream(RouteRequest("acme", "alice", "second", thread_id="t1"))]

        events = client.portal.call(leave_then_ask_again)  # type: ignore[union-attr]
    done = events[-1]
    assert isinstance(done, RouteDone) and done.result.output == "The second answer."
