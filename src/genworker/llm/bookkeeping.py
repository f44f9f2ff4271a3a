"""LiteLLM's bookkeeping after a call, moved behind the turn that made it.

When a streamed call ends, LiteLLM starts its success logging (usage and cost for its callbacks,
the Router's deployment statistics) as event-loop tasks. Started at once, they run before whatever
the turn does next: measured on the P1 bench, about 2.5 ms of the event loop's time per chat turn
(two calls), between the model's last token and the end of the turn. genworker keeps its own
record of every call (`LLMCallRecord`: tokens, cost, latency, fallbacks) and reads nothing
LiteLLM logs, so `defer_bookkeeping(loop)` starts those tasks later instead: once no turn is in
progress (the router marks its turns with `turn_in_progress()`), checked every `DELAY_S`, and at
most `MAX_DELAY_S` late, so a server that is never idle still runs them. They still run, all of
them, after the turn has written its files and ended its stream — as they do after a bare
endpoint's response, which ends before the loop gets to them.

`LLMClient` closes a stream once it has the finish reason and the usage (llm/client.py), before
LiteLLM starts any of this, unless success callbacks are configured through LiteLLM's settings;
what is deferred here is the logging of a stream read to its end.

Only tasks whose coroutine is LiteLLM's own and is one of `DEFERRED` are delayed; every other task
starts as before. `deferred_count()` says how many were, for a test that catches a LiteLLM upgrade
that renames them (which would only make turns slower, never wrong).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine, Iterator
from typing import Any, Final

__all__ = [
    "DEFERRED",
    "DELAY_S",
    "MAX_DELAY_S",
    "defer_bookkeeping",
    "deferred_count",
    "restore_task_factory",
    "turn_in_progress",
    "turns_running",
]

DELAY_S: Final = 0.05
MAX_DELAY_S: Final = 1.0
DEFERRED: Final = frozenset({"Logging.dispatch_success_handlers", "_record_in_background.<locals>.run"})
_LITELLM: Final = "/litellm/"

_count = 0  # tasks started late so far
_turns = 0  # turns in progress in this process (a hint: a miscount only brings MAX_DELAY_S into play)


@contextlib.contextmanager
def turn_in_progress() -> Iterator[None]:
    """Mark a turn: deferred bookkeeping waits until none is in progress (at most `MAX_DELAY_S`)."""
    global _turns
    _turns += 1
    try:
        yield
    finally:
        _turns -= 1


def turns_running() -> int:
    """How many turns are in progress in this process now (`turn_in_progress` blocks)."""
    return _turns


def deferred_count() -> int:
    """How many LiteLLM tasks this process has started late so far."""
    return _count


def _litellm_bookkeeping(coro: Any) -> bool:
    code = getattr(coro, "cr_code", None)
    return code is not None and coro.__qualname__ in DEFERRED and _LITELLM in code.co_filename


async def _later(coro: Coroutine[Any, Any, Any]) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + MAX_DELAY_S
    try:
        await asyncio.sleep(DELAY_S)
        # A bounded poll rather than an Event: turns are counted across event loops (tests run many).
        while _turns > 0 and loop.time() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(DELAY_S)
    except asyncio.CancelledError:  # before it started (the loop is closing): it runs now, not dropped
        await coro
        raise
    return await coro


class _Factory:
    """The loop's task factory: LiteLLM's bookkeeping starts late, everything else as before (through
    the factory that was installed before this one, if any)."""

    def __init__(self, previous: Any) -> None:
        self.previous = previous

    def __call__(self, loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Future[Any]:
        global _count
        if _litellm_bookkeeping(coro):
            _count += 1
            coro = _later(coro)
        if self.previous is not None:
            return self.previous(loop, coro, **kwargs)  # type: ignore[no-any-return]
        return asyncio.Task(coro, loop=loop, **kwargs)


def defer_bookkeeping(loop: asyncio.AbstractEventLoop) -> None:
    """Install the deferring task factory on `loop` (once; a second call changes nothing)."""
    current = loop.get_task_factory()
    if not isinstance(current, _Factory):
        loop.set_task_factory(_Factory(current))


def restore_task_factory(loop: asyncio.AbstractEventLoop) -> None:
    """Undo `defer_bookkeeping` (unless another factory was installed over it since)."""
    current = loop.get_task_factory()
    if isinstance(current, _Factory):
        loop.set_task_factory(current.previous)
