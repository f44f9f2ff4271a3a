"""Group commit: concurrent requests for one resource share one commit.

Callers await `submit`. A thread drains the queue: it takes everything queued so far, hands the batch
to `commit` (which records each request's outcome on its `future`), wakes each waiting event loop once
for the whole batch, and repeats until the queue is empty. While it commits, new requests queue up for
the next batch, so the batch grows with the load and a lone request waits for nothing. An idle thread
lingers for `linger_s` before it ends, so a steady stream of requests does not start a thread per batch.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Final, Generic, TypeVar

__all__ = ["LINGER_S", "GroupCommit", "Request"]

LINGER_S: Final = 0.05

T = TypeVar("T")
R = TypeVar("R")


@dataclass(eq=False)
class Request(Generic[T, R]):
    value: T
    waiter: asyncio.Future[R]  # the caller's, on its event loop; only that loop touches it
    future: Future[R] = field(default_factory=Future)  # the outcome, set by `commit` in the drain thread


class GroupCommit(Generic[T, R]):
    """`commit(batch)` runs in the drain thread, one batch at a time; it resolves every request's future
    except those it returns, which lead the next batch (say, a request that must see how an earlier
    one in the same batch ends). Requests whose caller was cancelled before the batch was taken are
    left out. Whatever `commit` raises fails the requests it left unresolved."""

    def __init__(
        self,
        commit: Callable[[list[Request[T, R]]], list[Request[T, R]]],
        *,
        name: str,
        linger_s: float = LINGER_S,
    ) -> None:
        self._commit = commit
        self._name = name
        self._linger_s = linger_s
        self._cond = threading.Condition(threading.Lock())
        self._queue: list[Request[T, R]] = []
        self._draining = False
        self._closing = False

    async def submit(self, value: T) -> R:
        return await self.enqueue(value)

    def enqueue(self, value: T) -> asyncio.Future[R]:
        """`submit` without waiting: the request is queued (and the drain thread started) now; the
        future, of the running loop, resolves with its outcome."""
        request: Request[T, R] = Request(value, asyncio.get_running_loop().create_future())
        with self._cond:
            self._queue.append(request)
            start = not self._draining
            self._draining = True
            self._cond.notify()
        if start:
            try:
                threading.Thread(target=self._drain, name=self._name).start()
            except BaseException as exc:
                with self._cond:
                    self._draining = False
                    stranded, self._queue = self._queue, []
                _fail(stranded, exc)
                _wake(stranded)
        return request.waiter

    def close(self) -> None:
        """Let an idle drain thread end now instead of after its linger (a later request still works)."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()

    def _drain(self) -> None:
        deferred: list[Request[T, R]] = []
        while True:
            with self._cond:
                if not self._queue and not deferred and not self._closing:
                    self._cond.wait(self._linger_s)
                taken, self._queue = self._queue, []
                if not taken and not deferred:
                    self._draining = False
                    return
            batch = deferred + [r for r in taken if _still_wanted(r)]
            deferred = []
            try:
                if batch:
                    deferred = self._commit(batch)
            except BaseException as exc:  # handed to the callers; the thread goes on
                _fail(batch, exc)
            _wake([r for r in batch if r.future.done()])


def _still_wanted(request: Request[T, R]) -> bool:
    """False for a request whose caller was cancelled (read racily: a cancel a moment later is too late)."""
    return not request.waiter.cancelled() and request.future.set_running_or_notify_cancel()


def _wake(requests: list[Request[T, R]]) -> None:
    """One call per event loop hands the outcomes of `requests` over to their waiters."""
    by_loop: dict[asyncio.AbstractEventLoop, list[Request[T, R]]] = {}
    for request in requests:
        by_loop.setdefault(request.waiter.get_loop(), []).append(request)
    for loop, mine in by_loop.items():
        try:
            loop.call_soon_threadsafe(_hand_over, mine)
        except RuntimeError:  # the loop is closed: nobody waits any more
            continue


def _hand_over(requests: list[Request[T, R]]) -> None:
    """On the waiters' loop: copy each outcome to its waiter, unless the caller stopped waiting."""
    for request in requests:
        if request.waiter.done():
            continue
        exc = request.future.exception()
        if exc is not None:
            request.waiter.set_exception(exc)
        else:
            request.waiter.set_result(request.future.result())


def _fail(requests: list[Request[T, R]], exc: BaseException) -> None:
    for request in requests:
        if not request.future.done():
            request.future.set_exception(exc)
