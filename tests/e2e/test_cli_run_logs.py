"""`genworker run` with GENWORKER_LOG_FORMAT=json: every line on stderr is one JSON object, uvicorn's
access lines included, and a request's lines carry the X-Request-ID it sent."""

from __future__ import annotations

import json
import os
import queue
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2 as httpx

GENWORKER = Path(sys.executable).with_name("genworker")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_json_logs_carry_the_request_id(tmp_path: Path, small_workspace: Callable[..., Path]) -> None:
    workspace = small_workspace({"acme": ["alice"]})
    (tmp_path / "configs").mkdir()
    port = free_port()
    env = {
        **os.environ,
        "GENWORKER_CONFIG_DIR": str(tmp_path / "configs"),
        "GENWORKER_LOG_FORMAT": "json",
        "GENWORKER_HOT_RELOAD": "false",
        "GENWORKER_HEARTBEAT_ENABLED": "false",
    }
    server = subprocess.Popen(
        [str(GENWORKER), "run", "--port", str(port), "--workspace", str(workspace)],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, encoding="utf-8", env=env,
    )  # fmt: skip
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert server.stderr is not None
        for line in server.stderr:
            lines.put(line)
        lines.put(None)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()

    def until(predicate: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
        seen = []
        while True:
            line = lines.get(timeout=120)
            assert line is not None, f"the server exited: {seen}"
            record = json.loads(line)  # every line is JSON
            seen.append(record)
            if predicate(record):
                return seen

    try:
        until(lambda r: "Application startup complete" in r["msg"])
        answer = httpx.get(f"http://127.0.0.1:{port}/health", headers={"X-Request-ID": "e2e-log-1"}, timeout=30)
        access = until(lambda r: r["logger"] == "uvicorn.access")[-1]
    finally:
        server.terminate()
        server.wait(timeout=60)
        reader.join(timeout=60)
        assert server.stderr is not None
        server.stderr.close()
    assert answer.status_code == 200 and answer.headers["x-request-id"] == "e2e-log-1"
    assert access["request_id"] == "e2e-log-1" and "GET /health" in access["msg"]
    assert access["level"] == "INFO" and access["ts"].endswith("+00:00")
    assert "color_message" not in access
