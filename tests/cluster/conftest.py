"""A cluster as docs/deploy.md describes it (issue #30): three real `genworker run` processes on one
copy of the demo workspace, GENWORKER_PROFILE=shared on one Redis, the scripted model over HTTP,
Slack's API stood in over HTTP, and Debian's nginx in front of them as the load balancer.

Redis is a database of its own on the test server (`REDIS_CLUSTER_TEST_URL`, else REDIS_TEST_URL's
server with db 14, or 13 when REDIS_TEST_URL already uses 14), flushed at the start: the processes
write the shared profile's fixed key names, which no other test may see. nginx runs as the test's
own user in the foreground with a config generated under the test's tmp folder; its `location /`
block is read from deploy/nginx.conf, so the proxy settings tested are the ones shipped.

The test modules share one cluster, whose processes hold instance leases of LEASE_TTL_S (a process
killed by a test is taken over within seconds). `Cluster.restart(i)` starts process i again on its
port after a SIGTERM or a kill; tests that leave a process stopped come last (test_cluster_handover.py).

Without Redis or nginx the cluster tests skip with a one-line reason; GENWORKER_REQUIRE_REDIS=1
makes a missing Redis, and GENWORKER_REQUIRE_NGINX=1 a missing nginx, a failure (.ci/run sets both).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx2 as httpx
import pytest
import redis
from slack_sdk.signature import SignatureVerifier

from genworker.auth import ApiKeyStore
from genworker.testing import ScriptedModelServer, polling, scripted_env
from genworker.testing.credentials import SLACK_SIGNING_SECRET
from genworker.testing.live_server import LiveServer
from genworker.testing.nginx import find_nginx, start_nginx
from genworker.testing.polling import free_port
from genworker.testing.vendors import Vendor

ROOT = Path(__file__).resolve().parents[2]
DEPLOY_CONF = ROOT / "deploy/nginx.conf"
PROCESSES = 3
DEADLINE_S = 180  # a bound on waiting for a loaded 2-core machine, not a measurement
LEASE_TTL_S = 6
KEEP_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV")


WEBHOOK = "/api/v1/channel/demo~analyst~acme-slack/webhook"
POST = "/chat.postMessage"


def slack_dm(i: int, retry: int) -> tuple[bytes, dict[str, str]]:
    """Person i's direct message to Milo's Slack bot, as Slack signs it; `retry` > 0 is Slack's redelivery."""
    ts = f"1700001{i:03d}.000100"
    event = {"type": "message", "user": f"U{i:03d}", "text": f"question {i:03d}", "channel": f"D{i:03d}",
             "channel_type": "im", "ts": ts}  # fmt: skip
    body = json.dumps({"type": "event_callback", "event_id": f"Ev{i:03d}", "event": event}).encode()
    stamp = str(int(time.time()))
    headers = {
        "Content-Type": "application/json",
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": SignatureVerifier(SLACK_SIGNING_SECRET).generate_signature(timestamp=stamp, body=body),
    }
    return body, headers | ({"X-Slack-Retry-Num": str(retry)} if retry else {})


def journal(workspace: Path) -> list[Path]:
    return list((workspace / "tenants/demo/workers/analyst/runtime/channels/journal").glob("*.json"))


def cluster_redis_url() -> str:
    if url := os.environ.get("REDIS_CLUSTER_TEST_URL"):
        return url
    parts = urlsplit(os.environ.get("REDIS_TEST_URL", "redis://127.0.0.1:6379/15"))
    db = "13" if parts.path.strip("/") == "14" else "14"
    return urlunsplit(parts._replace(path=f"/{db}"))


def _missing(what: str, require: str, reason: str) -> None:
    if os.environ.get(require) == "1":
        pytest.fail(f"{require}=1 but {reason}", pytrace=False)
    pytest.skip(f"{what}: {reason}")


def nginx_binary() -> str:
    found = find_nginx()
    if found is None:
        _missing("cluster tests", "GENWORKER_REQUIRE_NGINX", "nginx is not installed (apt-get install nginx)")
    assert found is not None
    return found


def until(check: Callable[[], Any], what: str, alive: Callable[[], None] = lambda: None) -> Any:
    """Poll `check` until it returns something truthy; `alive` raises when waiting is pointless."""
    return polling.until(check, what, alive, ignoring=(httpx.TransportError,), deadline_s=DEADLINE_S)


@dataclass
class Process:
    index: int
    port: int
    log: Path
    popen: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def check_alive(self) -> None:
        if self.popen.poll() is not None:
            tail = self.log.read_text(encoding="utf-8", errors="replace")[-3000:]
            raise AssertionError(f"genworker process {self.index} exited with {self.popen.returncode}:\n{tail}")


@dataclass
class Cluster:
    workspace: Path
    processes: list[Process]
    nginx_url: str
    model: ScriptedModelServer
    slack: Vendor
    redis_url: str
    api_key: str
    nginx_log: Path
    home: Path
    env: dict[str, str]
    clients: list[httpx.Client] = field(default_factory=list)
    stopped: list[Process] = field(default_factory=list)  # replaced by `restart`: their logs are kept

    def restart(self, index: int, **settings: str) -> Process:
        """Process `index` again, on the same port, once the previous one has exited (with `settings`
        added to its environment); ready when returned."""
        old = self.processes[index]
        assert old.popen.poll() is not None, f"process {index} is still running"
        self.stopped.append(old)
        process = start_process(index, self.home, self.workspace, self.env | settings, port=old.port)
        self.processes[index] = process
        until(lambda: httpx.get(process.url + "/readiness").status_code == 200, "/readiness 200", process.check_alive)
        return process

    def client(self, base_url: str) -> httpx.Client:
        client = httpx.Client(base_url=base_url, timeout=DEADLINE_S)
        self.clients.append(client)
        return client

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}

    def check_alive(self) -> None:
        for process in self.processes:
            process.check_alive()

    def logs(self) -> list[str]:
        return [p.log.read_text(encoding="utf-8", errors="replace") for p in self.processes]


def prepare_workspace(source: Path, dest: Path) -> str:
    """A copy of the demo with Slack credentials for Milo (the analyst); returns an API key of tenant demo."""
    shutil.copytree(source, dest)
    credentials = {"slack": {"bot_token": "xoxb-cluster-test", "signing_secret": SLACK_SIGNING_SECRET}}
    path = dest / "tenants/demo/workers/analyst/CHANNEL_CREDENTIALS.json"
    path.write_text(json.dumps(credentials), encoding="utf-8")
    return ApiKeyStore(dest).create("demo")[1]


def start_process(index: int, home: Path, workspace: Path, env: dict[str, str], port: int | None = None) -> Process:
    port = port or free_port()
    log = home / f"genworker-{index}-{time.monotonic_ns()}.log"
    command = [str(Path(sys.executable).with_name("genworker")), "run", "--host", "127.0.0.1", "--port", str(port)]
    with log.open("wb") as sink:  # the child keeps its own copy of the handle
        popen = subprocess.Popen(
            [*command, "--workspace", str(workspace)], cwd=home, env=env, stdout=sink, stderr=subprocess.STDOUT
        )
    return Process(index, port, log, popen)


def stop(popen: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if popen.poll() is None:
        popen.send_signal(sig)
        try:
            popen.wait(60)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait(60)


@pytest.fixture(scope="package")
def cluster_redis() -> Iterator[str]:
    url = cluster_redis_url()
    client = redis.Redis.from_url(url, socket_connect_timeout=1)
    try:
        client.flushdb()
    except redis.RedisError as exc:
        _missing("cluster tests", "GENWORKER_REQUIRE_REDIS", f"Redis at {url} is unreachable: {exc}")
    finally:
        client.close()
    yield url


@pytest.fixture(scope="package")
def cluster(
    cluster_redis: str, demo_workspace_src: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    nginx = nginx_binary()
    home = tmp_path_factory.mktemp("cluster")
    workspace = home / "workspace"
    api_key = prepare_workspace(demo_workspace_src, workspace)
    (home / "configs").mkdir()
    slack = Vendor()
    with ScriptedModelServer() as model, LiveServer(slack.app()) as slack_api:
        settings = scripted_env(
            model,
            GENWORKER_PROFILE="shared",
            REDIS_URL=cluster_redis,
            GENWORKER_SLACK_API_BASE=slack_api.url,
            GENWORKER_CONFIG_DIR=str(home / "configs"),
            GENWORKER_INSTANCE_LEASE_TTL_S=str(LEASE_TTL_S),
            GENWORKER_CHANNEL_RETRY_BASE_S="1",  # an IM answer Slack would not take is sent again within seconds
            GENWORKER_CHANNEL_RETRY_MAX_S="2",
        )
        env = {k: v for k, v in os.environ.items() if k in KEEP_ENV} | settings
        processes = [start_process(i, home, workspace, env) for i in range(PROCESSES)]
        balancer = start_nginx(nginx, home / "nginx", free_port(), [p.port for p in processes], DEPLOY_CONF)
        made = Cluster(workspace, processes, balancer.url, model, slack, cluster_redis, api_key, balancer.error_log,
                       home, env)  # fmt: skip
        try:
            for process in processes:
                until(lambda p=process: httpx.get(p.url + "/readiness").status_code == 200, "/readiness 200",
                      made.check_alive)  # fmt: skip
            until(lambda: httpx.get(made.nginx_url + "/readiness").status_code == 200, "nginx", balancer.check_alive)
            yield made
        finally:
            for client in made.clients:
                client.close()
            balancer.stop()
            for process in made.processes:
                if process.popen.poll() is None:
                    process.popen.send_signal(signal.SIGTERM)
            for process in made.processes:
                stop(process.popen)
