"""`make bench` part 3 (P1): a streamed chat turn through the whole router over HTTP — one tool
call and the answer, the model answering instantly — against a bare FastAPI endpoint making
the same two LiteLLM calls (the messages and tools genworker sent) and streaming them. Each
server runs in its own process; the model stub runs in a third. Reports time to first byte,
total time (ratios, target <= 1.15x on total) and requests/s with 16 concurrent clients.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2 as httpx

from genworker.auth import ApiKeyStore

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "chat_http.json"
TARGET = 1.15
PIDS: dict[str, int] = {}  # server url -> pid, for CPU per request
# The bare endpoints: as specified (each LiteLLM stream read to its end), and one that closes each
# stream once it has the finish reason and the usage, as genworker's LLMClient does: the ratio to
# the second is genworker's own overhead, without what it saves on LiteLLM's end of stream.
CLOSED_EARLY = "baseline, closed early"
BASELINES = ("baseline", CLOSED_EARLY)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def process(argv: list[str], port: int, env: dict[str, str] | None = None) -> Iterator[str]:
    proc = subprocess.Popen(
        argv,
        env={**os.environ, **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
    )
    url = f"http://127.0.0.1:{port}"
    PIDS[url] = proc.pid
    try:
        for _ in range(600):  # bounded: the server must accept a connection within ~60 s
            if proc.poll() is not None:
                raise RuntimeError(f"{argv} exited: {proc.stderr.read() if proc.stderr else ''}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.1):
                    break
            except OSError:
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


def workspace(root: Path) -> str:
    worker = root / "tenants" / "bench" / "workers" / "w"
    (worker / "files").mkdir(parents=True)
    (root / "tenants" / "bench" / "TENANT.json").write_text(
        '{"tenant_id": "bench", "trust_level": 2, "default_worker": "w"}', encoding="utf-8"
    )
    (worker / "PERSONA.md").write_text("---\nidentity: {name: W, worker_id: w}\n---\nYou help.\n", encoding="utf-8")
    (worker / "files" / "notes.md").write_text("buy milk", encoding="utf-8")
    return ApiKeyStore(root).create("bench")[1]


async def one(
    client: httpx.AsyncClient, url: str, body: dict[str, Any], headers: dict[str, str]
) -> tuple[float, float]:
    started = time.perf_counter()
    first = 0.0
    async with client.stream("POST", url, json=body, headers=headers) as response:
        assert response.status_code == 200, await response.aread()
        async for line in response.aiter_lines():
            if line.startswith("data:") and not first:
                first = time.perf_counter() - started
    return first * 1000, (time.perf_counter() - started) * 1000


def cpu_ms(url: str) -> float:
    """User + system CPU the server process has used so far."""
    fields = Path(f"/proc/{PIDS[url]}/stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


async def measure(
    servers: dict[str, str], key: str, requests: int, concurrency: int, model: str, calls: Path
) -> dict[str, Any]:
    """`servers`: name -> url; the names in `BASELINES` are bare endpoints, every other name a
    genworker. The baselines send what genworker sent: after genworker's warm-up, the model stub's
    last captured turn (system prompt, user message, tool list) goes to `calls`, which they read."""
    chat = {"worker_id": "w", "message": "what does my note say?"}
    targets = {
        name: (url + "/api/v1/chat/stream", chat, {"Authorization": f"Bearer {key}"})
        for name, url in servers.items()
        if name not in BASELINES
    }
    for name in BASELINES:
        targets[name] = (servers[name] + "/chat", {"message": "what does my note say?"}, {})
    names = list(targets)
    samples: dict[str, dict[str, list[float]]] = {name: {"ttfb": [], "total": []} for name in targets}
    cpu: dict[str, float] = {}
    async with httpx.AsyncClient(timeout=60) as client:
        for name, (url, body, headers) in targets.items():  # warm-up; the baselines come last
            if name == BASELINES[0]:
                captured = (await client.get(model + "/captured")).json()
                await asyncio.to_thread(calls.write_text, json.dumps(captured), encoding="utf-8")
            for _ in range(5):
                await one(client, url, body, headers)
        cpu = {name: -cpu_ms(servers[name]) for name in names}
        for i in range(requests):
            for name in names[i % len(names) :] + names[: i % len(names)]:  # rotated order
                url, body, headers = targets[name]
                ttfb, total = await one(client, url, body, headers)
                samples[name]["ttfb"].append(ttfb)
                samples[name]["total"].append(total)
        cpu = {name: (spent + cpu_ms(servers[name])) / requests for name, spent in cpu.items()}
        throughput: dict[str, float] = {}
        for name, (url, body, headers) in targets.items():
            started = time.perf_counter()
            await asyncio.gather(*(one(client, url, body, headers) for _ in range(concurrency * 4)))
            throughput[name] = concurrency * 4 / (time.perf_counter() - started)
    med = {n: {k: statistics.median(v) for k, v in s.items()} for n, s in samples.items()}
    return {
        "requests": requests,
        "concurrency": concurrency,
        "median_ms": med,
        "cpu_ms_per_request": cpu,
        "ratio_total": med["ours"]["total"] / med["baseline"]["total"],
        "ratio_ttfb": med["ours"]["ttfb"] / med["baseline"]["ttfb"],
        "ratio_total_closed_early": med["ours"]["total"] / med[CLOSED_EARLY]["total"],
        "requests_per_s": throughput,
        "samples": samples,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument(
        "--also", metavar="KEY=VALUE", action="append", default=[],
        help="start a second genworker with this setting changed and measure it too (A/B)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    also = dict(item.split("=", 1) for item in args.also)
    python = sys.executable
    with tempfile.TemporaryDirectory(prefix="genworker-p1-") as tmp:
        root = Path(tmp) / "workspace"
        key = workspace(root)
        (Path(tmp) / "configs").mkdir()
        mport, oport, bport = free_port(), free_port(), free_port()
        with process([python, str(HERE / "chat_servers.py"), "model", str(mport)], mport) as model:
            env = {
                "GENWORKER_CONFIG_DIR": str(Path(tmp) / "configs"),
                "GENWORKER_LLM_MODEL": "openai/bench",
                "GENWORKER_LLM_API_BASE": model + "/v1",
                "GENWORKER_LLM_API_KEY": "k",
                "LOG_LEVEL": "WARNING",
                "GENWORKER_HOT_RELOAD": "false",
            }
            ours_cmd = [str(Path(python).with_name("genworker")), "run", "--port", str(oport), "--workspace", str(root)]
            notes = str(root / "tenants/bench/workers/w/files/notes.md")
            calls = Path(tmp) / "calls.json"
            base_cmd = [python, str(HERE / "chat_servers.py"), "baseline", str(bport), model + "/v1", notes, str(calls)]
            with contextlib.ExitStack() as stack:
                servers = {"ours": stack.enter_context(process(ours_cmd, oport, env))}
                if also:
                    aport = free_port()
                    variant = [*ours_cmd[:3], str(aport), *ours_cmd[4:]]
                    servers[" ".join(args.also)] = stack.enter_context(process(variant, aport, {**env, **also}))
                servers["baseline"] = stack.enter_context(process(base_cmd, bport))
                eport = free_port()
                early_cmd = [*base_cmd[:3], str(eport), *base_cmd[4:], "close-early"]
                servers[CLOSED_EARLY] = stack.enter_context(process(early_cmd, eport))
                result = asyncio.run(measure(servers, key, args.requests, args.concurrency, model, calls))
    med = result["median_ms"]
    verdict = "ok" if result["ratio_total"] <= TARGET else "MISSED"
    print(f"P1 streamed chat turn (tool call + answer), {args.requests} requests each, alternating")
    print(f"                          ttfb (median)   total (median)   req/s @{args.concurrency}   CPU/request")
    for name in med:
        print(
            f"  {name:<22} {med[name]['ttfb']:10.1f} ms   {med[name]['total']:10.1f} ms   "
            f"{result['requests_per_s'][name]:8.1f}   {result['cpu_ms_per_request'][name]:8.1f} ms"
        )
    print(
        f"  ratio (ours/base)      {result['ratio_ttfb']:10.2f}x     {result['ratio_total']:10.2f}x   "
        f"target total <= {TARGET}x {verdict}"
    )
    early = result["ratio_total_closed_early"]
    print(
        f"  ratio (ours/closed early)            {early:10.2f}x   "
        f"target total <= {TARGET}x {'ok' if early <= TARGET else 'MISSED'} (genworker's own overhead)"
    )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2), encoding="utf-8")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
