"""LiteLLM's after-call bookkeeping starts late (llm/bookkeeping.py), through real LiteLLM over HTTP
to the scripted local model server; other tasks are untouched."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest
from litellm.router import Router

from genworker.llm import bookkeeping
from genworker.llm.bookkeeping import defer_bookkeeping, deferred_count, restore_task_factory
from genworker.testing import Reply, ScriptedModelServer

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # a task factory is asyncio's


def _pending_late() -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if getattr(t.get_coro(), "__qualname__", "") == "_later"]


async def test_a_stream_read_to_its_end_has_its_litellm_logging_started_late_and_still_run(
    model_server: ScriptedModelServer,
) -> None:
    """LLMClient closes a stream once it has the finish reason and the usage (no logging starts then,
    tests/integration/test_llm_client.py); one read to its end, as here, starts LiteLLM's logging."""
    defer_bookkeeping(asyncio.get_running_loop())
    try:
        model_server.expect(Reply("hello"))
        params = {"model": "openai/scripted-standard", "api_base": model_server.base_url, "api_key": "test-key"}
        router = Router(model_list=[{"model_name": "standard", "litellm_params": params}], num_retries=0)
        before = deferred_count()
        stream = await router.acompletion(
            model="standard", messages=[{"role": "user", "content": "hi"}], stream=True,
            stream_options={"include_usage": True},
        )  # fmt: skip
        text = [c.choices[0].delta.content async for c in stream if c.choices and c.choices[0].delta.content]
        assert "".join(text) == "hello"
        # The installed LiteLLM still names its logging tasks as DEFERRED lists (the success handlers
        # and the Router's stream recording): an upgrade that renames them fails here.
        assert deferred_count() - before >= 2
        for _ in range(200):  # bounded: each waits DELAY_S, then runs
            if not _pending_late():
                break
            await asyncio.sleep(bookkeeping.DELAY_S)
        assert _pending_late() == []
    finally:
        restore_task_factory(asyncio.get_running_loop())


async def test_other_tasks_start_at_once_through_the_factory_that_was_there() -> None:
    loop = asyncio.get_running_loop()
    made: list[str] = []

    def previous(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        made.append(coro.__qualname__)
        return asyncio.Task(coro, loop=loop, **kwargs)

    loop.set_task_factory(previous)
    try:
        defer_bookkeeping(loop)
        defer_bookkeeping(loop)  # once is enough: not wrapped twice
        assert loop.get_task_factory().previous is previous  # type: ignore[union-attr]

        async def dispatch_success_handlers() -> str:  # LiteLLM's name, but not LiteLLM's code
            return "ran"

        before = deferred_count()
        assert await asyncio.create_task(dispatch_success_handlers()) == "ran"
        assert deferred_count() == before
        assert made == ["test_other_tasks_start_at_once_through_the_factory_that_was_there.<locals>."
                        "dispatch_success_handlers"]  # fmt: skip
        restore_task_factory(loop)
        assert loop.get_task_factory() is previous
    finally:
        loop.set_task_factory(None)


async def test_a_deferred_task_cancelled_before_it_starts_still_runs_it() -> None:
    """LiteLLM's recording coroutines hold more coroutines: dropping one leaves those never awaited."""
    ran: list[bool] = []

    async def bookkeeping_work() -> None:
        ran.append(True)

    coro = bookkeeping_work()
    task = asyncio.create_task(bookkeeping._later(coro))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ran == [True]
    assert inspect.getcoroutinestate(coro) == inspect.CORO_CLOSED


async def test_deferred_bookkeeping_waits_for_the_turn_in_progress_to_end(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bookkeeping, "MAX_DELAY_S", 3600.0)  # only the turn's end can release it
    ran: list[str] = []
    turn_ended = asyncio.Event()

    async def bookkeeping_work() -> None:
        ran.append("bookkeeping" if turn_ended.is_set() else "bookkeeping during the turn")

    with bookkeeping.turn_in_progress():
        task = asyncio.create_task(bookkeeping._later(bookkeeping_work()))
        # The turn outlasts several polls (DELAY_S each).
        for _ in range(3):
            await asyncio.sleep(bookkeeping.DELAY_S)
        turn_ended.set()
    await task
    assert ran == ["bookkeeping"]


async def test_deferred_bookkeeping_runs_at_most_max_delay_late_when_turns_never_stop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(bookkeeping, "MAX_DELAY_S", bookkeeping.DELAY_S * 2)
    ran: list[bool] = []

    async def bookkeeping_work() -> None:
        ran.append(True)

    with bookkeeping.turn_in_progress():  # a server that is never idle
        await asyncio.create_task(bookkeeping._later(bookkeeping_work()))
    assert ran == [True]
