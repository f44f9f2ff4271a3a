"""Racing OS processes in a test: each child runs a script, prints ``ready`` once set up, then waits
for ``go`` on stdin, so every child starts its work at the same moment; its stdout is JSON."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

__all__ = ["release", "start_ready"]


async def start_ready(script: str, *args: str) -> asyncio.subprocess.Process:
    """`python -c script args...`, returned once it printed ``ready``."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        script,
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    ready = await asyncio.wait_for(process.stdout.readline(), 60)
    assert ready == b"ready\n", ready
    return process


async def release(process: asyncio.subprocess.Process, timeout_s: float = 300) -> Any:
    """Send ``go``, wait for the child to exit cleanly and return its stdout parsed as JSON."""
    out, err = await asyncio.wait_for(process.communicate(b"go\n"), timeout_s)
    assert process.returncode == 0, err.decode("utf-8", "replace")
    return json.loads(out.decode("utf-8"))
