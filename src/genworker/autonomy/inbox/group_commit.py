"""Group commit: concurrent requests for one resource share one commit.

Callers `submit` a request and get a future. A thread drains the queue: it takes everything queued
so far, hands the batch to `commit` (which resolves each request's future), and repeats until the
queue is empty. While it commits, new requests queue up for the next batch, so the batch grows with
the load and a lone request waits for nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Generic, TypeVar

__all__ = ["GroupCommit", "Request"]

T = TypeVar("T")
R = TypeVar("R")


@dataclass(eq=False)
class Request(Generic[T, R]):
    value: T
    future: Future[R] = field(default_factory=Future)


class GroupCommit(Generic[T, R]):
    """`commit(batch)` runs in the drain thread, one batch at a time; it resolves every request's future
    except those it returns, which lead the next batch (say, a request that must see how an earlier
    one in the same batch ends). Requests whose caller cancelled before the batch was taken are left
    out. Whatever `commit` raises fails the requests it left unresolved."""

    def __init__(self, commit: Callable[[list[Request[T, R]]], list[Request[T, R]]], *, name: str) -> None:
        self._commit = commit
        self._name = name
        self._lock = threading.Lock()
        self._queue: list[Request[T, R]] = []
        self._draining = False

    def submit(self, value: T) -> Future[R]:
        request: Request[T, R] = Request(value)
        with self._lock:
            self._queue.append(request)
            if self._draining:
                return request.future
            self._draining = True
        try:
            threading.Thread(target=self._drain, name=self._name).start()
        except BaseException as exc:
            with self._lock:
                self._draining = False
                stranded, self._queue = self._queue, []
            _fail(stranded, exc)
        return request.future

    def _drain(self) -> None:
        deferred: list[Request[T, R]] = []
        while True:
            with self._lock:
                taken, self._queue = self._queue, []
                if not taken and not deferred:
                    self._draining = False
                    return
            batch = deferred + [request for request in taken if request.future.set_running_or_notify_cancel()]
            deferred = []
            try:
                if batch:
                    deferred = self._commit(batch)
            except BaseException as exc:  # handed to the callers; the thread goes on
                _fail(batch, exc)


def _fail(requests: list[Request[T, R]], exc: BaseException) -> None:
    for request in requests:
        if not request.future.done():
            request.future.set_exception(exc)
