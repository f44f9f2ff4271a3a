"""`make bench`: several `genworker run` processes behind nginx (issue #30, docs/deploy.md). P1's
streamed chat turn (bench/chat_http.py: a tool call and the answer, the model stub answering
instantly) on three processes in the shared profile, with a Redis of this run's own (a redis-server
on a free port) and Debian's nginx running deploy/nginx.conf's `location /` block:

- throughput through nginx balancing **one** of the processes against nginx balancing **all
  three**, in the same run: rounds of `--requests` turns from `--concurrency` clients, rotating
  which goes first; requests/s is the median round, the figure is the ratio three / one. The
  processes share the machine's cores with nginx, Redis, the model stub and this client, so the
  ratio says how much of the machine one process leaves unused, not how three machines would do;
- the hand-over after a kill: `kill -9` of the process running the worker's autonomy, then the time
  until another process holds it (polling each survivor's /api/v1/debug/runtime), against the lease
  ttl (`--ttl`, the default 30 s unless given), the bound docs/deploy.md states (one ttl and a beat).

Writes bench/results/cluster.json; needs nginx and redis-server (it says so and exits 0 without).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2 as httpx

from chat_http import Target, burst, free_port, http_client, one, process, rotated, tail, workspace
from genworker.testing.nginx import Nginx, find_nginx, start_nginx

HERE = Path(__file__).resolve().parent
DEPLOY_CONF = HERE.parent / "deploy" / "nginx.conf"
RESULTS = HERE / "results" / "cluster.json"
PROCESSES = 3
ONE, THREE = "nginx -> 1 process", f"nginx -> {PROCESSES} processes"
WORKER = "bench/w"
GIVE_UP_S = 300.0


def wait_for(check: Any, what: str) -> Any:
    deadline = time.monotonic() + GIVE_UP_S
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.TransportError, OSError):
            if found := check():
                return found
        time.sleep(0.05)  # polling another process
    raise RuntimeError(f"gave up waiting for {what}")


@contextlib.contextmanager
def own_redis(folder: Path) -> Iterator[str]:
    port = free_port()
    binary = shutil.which("redis-server")
    assert binary is not None
    with (folder / "redis.log").open("wb") as log:
        redis = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir",
                                  str(folder)], stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        redis.terminate()
        redis.wait(30)


class Cluster:
    """The model stub, Redis, three genworker processes and two nginx in front of them."""

    def __init__(self, tmp: Path, stack: contextlib.ExitStack, ttl_s: float) -> None:
        self.tmp, self.stack = tmp, stack
        python = sys.executable
        mport = free_port()
        self.model, _ = stack.enter_context(
            process([python, str(HERE / "chat_servers.py"), "model", str(mport)], mport, tmp / "model.log")
        )
        redis_url = stack.enter_context(own_redis(tmp))
        self.root = tmp / "workspace"
        key = workspace(self.root)
        (tmp / "configs").mkdir()
        self.env = {
            "GENWORKER_CONFIG_DIR": str(tmp / "configs"),
            "GENWORKER_LLM_MODEL": "openai/bench",
            "GENWORKER_LLM_API_BASE": self.model + "/v1",
            "GENWORKER_LLM_API_KEY": "k",
            "LOG_LEVEL": "WARNING",
            "GENWORKER_HOT_RELOAD": "false",
            "GENWORKER_PROFILE": "shared",
            "REDIS_URL": redis_url,
            "GENWORKER_INSTANCE_LEASE_TTL_S": str(ttl_s),
        }
        self.body = {"worker_id": "w", "message": "what does my note say?"}
        self.headers = {"Authorization": f"Bearer {key}"}
        self.ports = [free_port() for _ in range(PROCESSES)]
        self.procs = [self.launch(port) for port in self.ports]
        nginx = find_nginx()
        assert nginx is not None
        self.balancers = {
            ONE: start_nginx(nginx, tmp / "nginx-one", free_port(), self.ports[:1], DEPLOY_CONF),
            THREE: start_nginx(nginx, tmp / "nginx-three", free_port(), self.ports, DEPLOY_CONF),
        }
        for balancer in self.balancers.values():
            stack.callback(balancer.stop)
        for port in self.ports:
            wait_for(lambda p=port: httpx.get(f"http://127.0.0.1:{p}/readiness").status_code == 200, "readiness")
        for balancer in self.balancers.values():
            wait_for(lambda b=balancer: httpx.get(b.url + "/readiness").status_code == 200, "nginx")

    def launch(self, port: int) -> subprocess.Popen[bytes]:
        argv = [str(Path(sys.executable).with_name("genworker")), "run", "--port", str(port), "--workspace",
                str(self.root)]  # fmt: skip
        with (self.tmp / f"{port}.log").open("ab") as log:
            proc = subprocess.Popen(argv, env={**os.environ, **self.env}, stdout=subprocess.DEVNULL, stderr=log)
        self.stack.callback(_stopped, proc)
        return proc

    def target(self, balancer: Nginx) -> Target:
        url = balancer.url + "/api/v1/chat/stream"
        return Target(url, self.body, self.headers, balancer.popen.pid, balancer.error_log)

    def holder(self, ports: list[int]) -> tuple[int, str] | None:
        """(port, instance id) of the process among `ports` whose autonomy scope holds the worker."""
        for port in ports:
            scope = httpx.get(f"http://127.0.0.1:{port}/api/v1/debug/runtime").json()["autonomy_scope"]
            if WORKER in scope["workers_here"]:
                return port, scope["instance"]
        return None

    def hand_over(self) -> dict[str, Any]:
        """kill -9 the worker's owner; seconds until a survivor holds it. The killed one is started again."""
        owner, instance = wait_for(lambda: self.holder(self.ports), "an owner of the worker")
        index = self.ports.index(owner)
        survivors = [p for p in self.ports if p != owner]
        killed = time.monotonic()
        self.procs[index].send_signal(signal.SIGKILL)
        self.procs[index].wait(30)
        heir, successor = wait_for(lambda: self.holder(survivors), "a survivor to take the worker over")
        took = time.monotonic() - killed
        self.procs[index] = self.launch(owner)
        wait_for(lambda: httpx.get(f"http://127.0.0.1:{owner}/readiness").status_code == 200, "the restart")
        return {"seconds": took, "killed": instance, "successor": successor, "heir_port": heir}


def _stopped(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()


async def throughput(cluster: Cluster, requests: int, concurrency: int, rounds: int) -> dict[str, Any]:
    targets = {name: cluster.target(balancer) for name, balancer in cluster.balancers.items()}
    per_round: dict[str, list[float]] = {name: [] for name in targets}
    async with http_client(4 * concurrency) as client:
        for target in targets.values():
            for _ in range(10):  # warm up: every process gets some turns through the three-way nginx
                await one(client, target)
        for i in range(rounds):
            for name in rotated(list(targets), i):
                seconds, _ = await burst(client, targets[name], requests, concurrency)
                per_round[name].append(requests / seconds)
    rates = {name: statistics.median(values) for name, values in per_round.items()}
    return {"requests_per_s": rates, "rounds": per_round, "ratio": rates[THREE] / rates[ONE]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=96, help="turns per round and side")
    parser.add_argument("--concurrency", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ttl", type=float, default=30.0, help="the instance lease ttl, s (shipped default 30)")
    parser.add_argument("--kills", type=int, default=1, help="hand-overs to time")
    args = parser.parse_args(argv)
    if find_nginx() is None or shutil.which("redis-server") is None:
        print("bench/cluster.py: needs nginx and redis-server (apt-get install nginx redis-server); skipped")
        return 0
    with tempfile.TemporaryDirectory(prefix="genworker-cluster-") as tmp, contextlib.ExitStack() as stack:
        cluster = Cluster(Path(tmp), stack, args.ttl)
        try:
            result = asyncio.run(throughput(cluster, args.requests, args.concurrency, args.rounds))
            handovers = [cluster.hand_over() for _ in range(args.kills)]
        except Exception:
            for port in cluster.ports:
                print(f"--- genworker on {port}:\n{tail(Path(tmp) / f'{port}.log', 40)}", file=sys.stderr)
            raise
    seconds = [h["seconds"] for h in handovers]
    result |= {
        "requests": args.requests,
        "concurrency": args.concurrency,
        "cores": os.cpu_count(),
        "ttl_s": args.ttl,
        "handovers": handovers,
        "handover_s": statistics.median(seconds),
        "handover_vs_ttl": statistics.median(seconds) / args.ttl,
    }
    rates = result["requests_per_s"]
    print(f"P1 chat turns through nginx, {args.concurrency} clients, {args.rounds} rounds of {args.requests}:")
    for name, rate in rates.items():
        print(f"  {name:<24} {rate:7.1f} req/s")
    print(f"  three / one: {result['ratio']:.2f}x on {result['cores']} cores")
    print(
        f"hand-over after kill -9: {result['handover_s']:.1f} s (median of {len(seconds)}), "
        f"{result['handover_vs_ttl']:.2f}x the lease ttl of {args.ttl:.0f} s"
    )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2), encoding="utf-8")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
