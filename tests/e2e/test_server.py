"""The real server: `python start.py` on a free port, serving the demo workspace."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from genworker.auth import ApiKeyStore
from genworker.testing import Reply, ScriptedModelServer

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def server(tmp_path: Path, workspace: Path, **env: str) -> Iterator[tuple[str, list[str]]]:
    port = _free_port()
    environ = {**os.environ, "GENWORKER_CONFIG_DIR": str(tmp_path), "PYTHONUNBUFFERED": "1", **env}
    for key in ("GENWORKER_LLM_MODEL", "REDIS_URL", "ENVIRONMENT", "ENV"):
        if key not in env:
            environ.pop(key, None)
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "start.py"), "--port", str(port), "--workspace", str(workspace)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        encoding="utf-8",
        env=environ,
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # blocks until the server reports it is up (or dies)
            lines.append(line)
            if "Uvicorn running on" in line:
                break
        else:
            raise AssertionError("server exited:\n" + "".join(lines))
        yield f"http://127.0.0.1:{port}", lines
    finally:
        proc.terminate()
        remaining, _ = proc.communicate(timeout=30)
        lines.append(remaining)


def _get(url: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_demo_server_starts_without_a_model_and_says_why_it_is_not_ready(tmp_path: Path, demo_workspace: Path) -> None:
    with server(tmp_path, demo_workspace) as (base, lines):
        assert _get(f"{base}/health") == (200, {"status": "ok", "reasons": []})
        status, body = _get(f"{base}/readiness")
        assert status == 503
        assert [r["code"] for r in body["reasons"]] == ["model_not_configured"]  # type: ignore[index, union-attr]
        status, debug = _get(f"{base}/api/v1/debug/runtime")  # loopback: allowed without a token
        assert status == 200
        assert debug["workspace"]["tenants"]["demo"]["status"] == "loaded"  # type: ignore[index]
        sensors = {s["sensor_key"]: s for s in debug["sensors"]["demo/assistant"]}  # type: ignore[index]
        # started with the runtime (its first poll may still be running: no count asserted)
        assert sensors["shared-notes"]["source_type"] == "workspace_file" and sensors["shared-notes"]["mode"] == "poll"
        assert sensors["office-webhooks"]["mode"] == "push"
    summary = [line for line in lines if "[Runtime]" in line]
    assert len(summary) == 1 and "ready=no (model_not_configured)" in summary[0]


def test_demo_server_is_ready_with_a_model_from_the_environment(tmp_path: Path, demo_workspace: Path) -> None:
    env = {"GENWORKER_LLM_MODEL": "openai/test", "GENWORKER_LLM_API_KEY": "unused"}
    with server(tmp_path, demo_workspace, **env) as (base, _):
        status, body = _get(f"{base}/readiness")
        assert status == 200, body


def test_a_server_that_loads_its_model_on_first_use_is_ready_and_answers_its_first_turn(
    tmp_path: Path, demo_workspace: Path
) -> None:
    """GENWORKER_LLM_LOAD=first_use under the real server (start.py, uvloop): ready without LiteLLM,
    saying so; the first chat turn loads it and is answered; then the warning is gone."""
    headers = {"Authorization": f"Bearer {ApiKeyStore(demo_workspace).create('demo')[1]}"}
    with ScriptedModelServer() as model:
        model.expect(Reply("loaded on first use"))
        env = {"GENWORKER_LLM_MODEL": "openai/scripted", "GENWORKER_LLM_API_BASE": model.base_url}
        env |= {"GENWORKER_LLM_API_KEY": "k", "GENWORKER_LLM_LOAD": "first_use"}
        with server(tmp_path, demo_workspace, **env) as (base, _):
            status, body = _get(f"{base}/readiness")
            assert status == 200, body
            assert [w["code"] for w in body["warnings"]] == ["model_loads_on_first_use"]  # type: ignore[union-attr]
            turn = httpx.post(
                f"{base}/api/v1/chat/stream",
                json={"worker_id": "assistant", "message": "hello"},
                headers=headers,
                timeout=120,
            )
            assert turn.status_code == 200 and "loaded on first use" in turn.text
            status, body = _get(f"{base}/readiness")
            assert (status, body["warnings"]) == (200, [])
