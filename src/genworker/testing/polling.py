"""Waiting on another process in a test: `until` polls a check (an HTTP answer, a file, a Redis
reply) that may raise while the other side is not listening yet; `free_port` is a loopback port
nothing listens on."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable
from typing import Any

__all__ = ["free_port", "until"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def until(
    check: Callable[[], Any],
    what: str,
    alive: Callable[[], None] = lambda: None,
    *,
    ignoring: tuple[type[Exception], ...] = (OSError,),
    deadline_s: float = 180,
) -> Any:
    """Poll `check` until it returns something truthy (that value), taking an `ignoring` error (the
    other side is not listening yet) for a no; `alive` raises when waiting is pointless (the other
    process exited). `deadline_s` bounds waiting on a loaded machine; it measures nothing."""
    deadline = time.monotonic() + deadline_s
    while True:
        alive()
        with contextlib.suppress(*ignoring):
            if found := check():
                return found
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)  # polling another process, not timing anything
