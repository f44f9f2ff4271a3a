"""A `genworker run` process in the shared profile whose Redis comes and goes (issue #30): a
redis-server this test starts and stops itself, on a free port, with an append-only file so what
it held is back when it starts again (the shared 6379 is never stopped).

No Redis at start: /readiness 503 `redis_unavailable` naming it, until Redis answers; then the
runtime starts on the shared backends, without a restart. Redis gone later: /readiness 503 again,
a chat turn on an existing conversation is refused with 503 `redis_unavailable` and nothing is
written; Redis back: ready again, and the conversation goes on with its history."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
import redis

from genworker.auth import ApiKeyStore
from genworker.testing import Reply, ScriptedModelServer, polling, scripted_env
from genworker.testing.polling import free_port

DEADLINE_S = 120  # a bound on waiting for a loaded machine, not a measurement
KEEP_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV")


def until(check: Callable[[], Any], what: str, alive: Callable[[], None] = lambda: None) -> Any:
    ignoring = (httpx.TransportError, redis.ConnectionError)  # not listening yet
    return polling.until(check, what, alive, ignoring=ignoring, deadline_s=DEADLINE_S)


class OwnRedis:
    """redis-server on `port`, its append-only file in `folder`; started and stopped by the test."""

    def __init__(self, folder: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            if os.environ.get("GENWORKER_REQUIRE_REDIS") == "1":
                pytest.fail("GENWORKER_REQUIRE_REDIS=1 but redis-server is not installed", pytrace=False)
            pytest.skip("redis-server is not installed")
        self.binary = binary
        self.folder = folder
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "yes",
                   "--appendfsync", "always", "--dir", str(self.folder)]  # fmt: skip
        with (self.folder / "redis.log").open("ab") as log:
            self.popen = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        client = redis.Redis.from_url(self.url, socket_connect_timeout=1)
        try:
            until(client.ping, "redis-server to answer")
        finally:
            client.close()

    def stop(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.terminate()  # redis-server's shutdown: the append-only file is complete
            self.popen.wait(DEADLINE_S)


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[OwnRedis]:
    folder = tmp_path / "redis"
    folder.mkdir()
    server = OwnRedis(folder)
    try:
        yield server
    finally:
        server.stop()


def reason_codes(response: httpx.Response) -> list[str]:
    return [reason["code"] for reason in response.json()["reasons"]]


def redis_named(readiness: httpx.Response) -> httpx.Response | None:
    return readiness if "redis_unavailable" in reason_codes(readiness) else None


def runs(workspace: Path) -> list[Path]:
    return list((workspace / "tenants/demo/workers/assistant/runs").glob("*.json"))


def sees(*texts: str, once: str) -> Callable[[dict[str, Any]], None]:
    def check(body: dict[str, Any]) -> None:
        sent = json.dumps(body["messages"], ensure_ascii=False)
        assert all(t in sent for t in texts), f"the model was not shown {texts}"
        assert sent.count(once) == 1, f"{once!r} was sent {sent.count(once)} times"

    return check


def test_a_shared_process_follows_its_redis_going_and_coming_back(
    own_redis: OwnRedis, demo_workspace: Path, tmp_path: Path
) -> None:
    api_key = ApiKeyStore(demo_workspace).create("demo")[1]
    auth = {"Authorization": f"Bearer {api_key}"}
    (tmp_path / "configs").mkdir()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with ScriptedModelServer() as model:
        model.expect(
            Reply("Noted: HERON."),
            Reply("It was HERON.", check=sees("The code word is HERON.", "Noted: HERON.", once="What was it?")),
        )
        env = {k: v for k, v in os.environ.items() if k in KEEP_ENV} | scripted_env(
            model, GENWORKER_PROFILE="shared", REDIS_URL=own_redis.url, GENWORKER_CONFIG_DIR=str(tmp_path / "configs")
        )
        log = tmp_path / "genworker.log"
        command = [str(Path(sys.executable).with_name("genworker")), "run", "--host", "127.0.0.1", "--port", str(port),
                   "--workspace", str(demo_workspace)]  # fmt: skip
        with log.open("wb") as sink:
            process = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=sink, stderr=subprocess.STDOUT)

        def alive() -> None:
            if process.poll() is not None:
                raise AssertionError(f"genworker exited with {process.returncode}: {log.read_text('utf-8')[-3000:]}")

        try:
            with httpx.Client(base_url=url, timeout=DEADLINE_S) as client:
                # no Redis yet: up, not ready, and it says why
                waiting = until(lambda: redis_named(client.get("/readiness")), "readiness to name Redis", alive)
                assert waiting.status_code == 503
                assert f"127.0.0.1:{own_redis.port}" in waiting.json()["reasons"][0]["message"]
                assert client.get("/health").status_code == 200

                own_redis.start()  # the runtime starts on it, no restart
                until(lambda: client.get("/readiness").status_code == 200, "readiness once Redis answers", alive)
                assert client.get("/api/v1/debug/runtime").json()["backends"]["shared_state"] == "redis"
                first = chat(client, auth, "The code word is HERON.")
                thread = first[0]["threadId"]
                assert first[-1]["type"] == "RUN_FINISHED"
                written = runs(demo_workspace)

                own_redis.stop()
                until(lambda: redis_named(client.get("/readiness")), "readiness to name Redis again", alive)
                body = {"worker_id": "assistant", "message": "What was it?", "thread_id": thread}
                refused = client.post("/api/v1/chat/stream", json=body, headers=auth)
                assert refused.status_code == 503, refused.text
                assert refused.json()["error"]["code"] == "redis_unavailable"
                queue = client.get(f"/api/v1/chat/{thread}/queue", headers=auth)  # a read that needs Redis
                assert (queue.status_code, queue.json()["error"]["code"]) == (503, "redis_unavailable")
                assert runs(demo_workspace) == written  # nothing was written for the refused turn
                assert len(model.requests) == 1

                own_redis.start()  # back, with what it held: the conversation goes on
                until(lambda: client.get("/readiness").status_code == 200, "readiness once Redis is back", alive)
                second = chat(client, auth, "What was it?", thread)
                assert second[-1]["type"] == "RUN_FINISHED", second[-1]
            model.assert_done()
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(DEADLINE_S)
    assert process.returncode == 0, log.read_text("utf-8")[-3000:]


def chat(client: httpx.Client, auth: dict[str, str], message: str, thread: str | None = None) -> list[dict[str, Any]]:
    body = {"worker_id": "assistant", "message": message} | ({"thread_id": thread} if thread else {})
    with client.stream("POST", "/api/v1/chat/stream", json=body, headers=auth) as response:
        assert response.status_code == 200, response.read()
        return [json.loads(line[5:]) for line in response.iter_lines() if line.startswith("data:")]
