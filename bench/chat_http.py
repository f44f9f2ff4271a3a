"""`make bench` part 3 (P1): a streamed chat turn through the whole router over HTTP — one tool call
and the answer, the model answering instantly — against bare FastAPI endpoints making the same two
model calls (the messages and tools genworker sent) and streaming them (bench/chat_servers.py):

- `baseline`: the two calls through a LiteLLM Router, each stream read to its end;
- `baseline, closed early`: the same, each stream closed once it brought the finish reason and the
  usage — the endpoint issue #28 measures genworker against;
- `openai client`: the same two calls with the `openai` client, the limit for a Python server;
- `--rev REV` (repeatable): genworker as it was at a git revision too, in the same rotation (before
  and after a change); `--no-tree` leaves out the working tree's genworker.

Each server runs in its own process; the model stub runs in another. Requests rotate between the
servers one at a time: time to first byte and total time (medians), and each server's CPU time per
request (/proc), read every 30 requests (the CPU ratios are the median of these slices' own ratios).
Then rounds of 64 requests at 16 concurrent clients, rotating which server goes first, give
requests/s (the median round). Targets (#28): CPU per request <= 1.10x and requests/s >= 0.9x the
baseline closed early; total time <= 1.15x the baseline as specified.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2 as httpx
import uvloop

from genworker.auth import ApiKeyStore
from startup import GENWORKER, extract

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "chat_http.json"
TOTAL_TARGET = 1.15  # ours / baseline as specified, total time
CPU_TARGET = 1.10  # ours / baseline closed early, CPU per request
THROUGHPUT_TARGET = 0.9  # ours / baseline closed early, requests/s at 16 clients
OURS = "ours"
SPECIFIED = "baseline"
CLOSED_EARLY = "baseline, closed early"
OPENAI = "openai client"
BARE = (SPECIFIED, CLOSED_EARLY, OPENAI)
MESSAGE = "what does my note say?"
# Idle connections are dropped before the servers' keep-alive (uvicorn: 5 s) ends them: a request sent
# on one as the server closes it fails. A server waits that long while the others take their rounds.
KEEPALIVE_S = 2.0
CPU_SLICE = 30  # requests per server between two CPU readings


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True, slots=True)
class Target:
    url: str  # where a chat request goes
    body: dict[str, Any]
    headers: dict[str, str]
    pid: int
    log: Path  # the server's stderr

    def cpu_ms(self) -> float:
        """User + system CPU the server process has used so far."""
        fields = Path(f"/proc/{self.pid}/stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


@dataclass
class Servers:
    """The running servers by name (genworker first, the bare ones after) and the model stub."""

    model: str
    calls: Path  # where the bare endpoints read the turn genworker sent
    targets: dict[str, Target] = field(default_factory=dict)

    @property
    def genworkers(self) -> list[str]:
        return [name for name in self.targets if name not in BARE]


@contextmanager
def process(argv: list[str], port: int, log: Path, env: dict[str, str] | None = None) -> Iterator[tuple[str, int]]:
    """A server process writing its errors to `log`; its base url and pid once it accepts connections."""
    with log.open("w", encoding="utf-8") as errors:
        proc = subprocess.Popen(argv, env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL, stderr=errors)
    try:
        for _ in range(600):  # bounded: the server must accept a connection within ~60 s
            if proc.poll() is not None:
                raise RuntimeError(f"{argv} exited: {tail(log)}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.1):
                    break
            except OSError:
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}", proc.pid
    finally:
        proc.terminate()
        proc.wait(30)


def tail(log: Path, lines: int = 400) -> str:
    return "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])


def workspace(root: Path) -> str:
    worker = root / "tenants" / "bench" / "workers" / "w"
    (worker / "files").mkdir(parents=True)
    (root / "tenants" / "bench" / "TENANT.json").write_text(
        '{"tenant_id": "bench", "trust_level": 2, "default_worker": "w"}', encoding="utf-8"
    )
    (worker / "PERSONA.md").write_text("---\nidentity: {name: W, worker_id: w}\n---\nYou help.\n", encoding="utf-8")
    (worker / "files" / "notes.md").write_text("buy milk", encoding="utf-8")
    return ApiKeyStore(root).create("bench")[1]


@contextmanager
def launched(
    tmp: Path,
    *,
    tree: bool = True,
    revisions: Sequence[str] = (),
    also: dict[str, str] | None = None,
    bare: tuple[str, ...] = BARE,
) -> Iterator[Servers]:
    """The model stub, genworker (the working tree's unless not `tree`; as it was at each of
    `revisions`; with the settings `also`) and the bare endpoints named in `bare`, each in its own
    process under `tmp`."""
    root = tmp / "workspace"
    key = workspace(root)
    (tmp / "configs").mkdir()
    python = sys.executable
    with contextlib.ExitStack() as stack:
        mport = free_port()
        stub = [python, str(HERE / "chat_servers.py"), "model", str(mport)]
        model, _ = stack.enter_context(process(stub, mport, tmp / "model.log"))
        servers = Servers(model, tmp / "calls.json")
        env = {
            "GENWORKER_CONFIG_DIR": str(tmp / "configs"),
            "GENWORKER_LLM_MODEL": "openai/bench",
            "GENWORKER_LLM_API_BASE": model + "/v1",
            "GENWORKER_LLM_API_KEY": "k",
            "LOG_LEVEL": "WARNING",
            "GENWORKER_HOT_RELOAD": "false",
        }
        genworker = [str(Path(python).with_name("genworker")), "run"]
        variants: dict[str, tuple[list[str], dict[str, str]]] = {OURS: (genworker, env)} if tree else {}
        for i, rev in enumerate(revisions):
            src = str(extract(tmp / f"rev{i}", rev, "src"))
            shutil.copytree(extract(tmp / f"skills{i}", rev, "skills"), tmp / f"rev{i}" / "skills")  # product skills
            variants[f"ours @ {rev}"] = ([python, "-c", GENWORKER, src], env)
        if also:
            variants[" ".join(f"{k}={v}" for k, v in also.items())] = (genworker, {**env, **also})
        chat = {"worker_id": "w", "message": MESSAGE}
        auth = {"Authorization": f"Bearer {key}"}
        for name, (command, variant_env) in variants.items():
            port = free_port()
            argv = [*command, "--port", str(port), "--workspace", str(root)]
            log = tmp / f"{port}.log"
            url, pid = stack.enter_context(process(argv, port, log, variant_env))
            servers.targets[name] = Target(url + "/api/v1/chat/stream", chat, auth, pid, log)
        notes = str(root / "tenants/bench/workers/w/files/notes.md")
        kinds = {SPECIFIED: ["baseline"], CLOSED_EARLY: ["baseline", "close-early"], OPENAI: ["openai"]}
        for name in bare:
            port = free_port()
            kind, *flags = kinds[name]
            argv = [python, str(HERE / "chat_servers.py"), kind, str(port), model + "/v1", notes, str(servers.calls)]
            log = tmp / f"{port}.log"
            url, pid = stack.enter_context(process([*argv, *flags], port, log))
            servers.targets[name] = Target(url + "/chat", {"message": MESSAGE}, {}, pid, log)
        yield servers


def http_client(connections: int) -> httpx.AsyncClient:
    limits = httpx.Limits(
        max_connections=connections, max_keepalive_connections=connections, keepalive_expiry=KEEPALIVE_S
    )
    return httpx.AsyncClient(timeout=120, limits=limits)


async def one(client: httpx.AsyncClient, target: Target) -> tuple[float, float]:
    """One streamed chat turn: milliseconds to the first event and to the end."""
    started = time.perf_counter()
    first = 0.0
    lines: list[str] = []
    try:
        async with client.stream("POST", target.url, json=target.body, headers=target.headers) as response:
            assert response.status_code == 200, await response.aread()
            async for line in response.aiter_lines():
                if line.startswith("data:") and not first:
                    first = time.perf_counter() - started
                lines.append(line)
    except httpx.HTTPError as exc:
        raise RuntimeError(f"{target.url}: {exc!r} after {lines[-3:]}; its log:\n{tail(target.log)}") from exc
    took = (time.perf_counter() - started) * 1000
    if "milk" not in "".join(lines):  # the note's words, in the tool result and the answer
        raise RuntimeError(f"{target.url} did not answer the turn: {lines[-3:]}; its log:\n{tail(target.log)}")
    return first * 1000, took


async def warm_up(client: httpx.AsyncClient, servers: Servers, turns: int = 5) -> None:
    """Some turns on every server; the bare endpoints get the turn genworker sent (the model stub's
    last captured one), so they send the same messages and tools."""
    for name in servers.genworkers:
        for _ in range(turns):
            await one(client, servers.targets[name])
    captured = (await client.get(servers.model + "/captured")).json()
    await asyncio.to_thread(servers.calls.write_text, json.dumps(captured), encoding="utf-8")
    for name in servers.targets:
        if name in BARE:
            for _ in range(turns):
                await one(client, servers.targets[name])


async def burst(
    client: httpx.AsyncClient, target: Target, requests: int, concurrency: int
) -> tuple[float, list[float]]:
    """`requests` turns by `concurrency` clients at once: seconds taken and each turn's total ms."""
    remaining = iter(range(requests))
    totals: list[float] = []

    async def client_loop() -> None:
        for _ in remaining:
            totals.append((await one(client, target))[1])

    started = time.perf_counter()
    await asyncio.gather(*(client_loop() for _ in range(concurrency)))
    return time.perf_counter() - started, totals


def rotated(names: list[str], i: int) -> list[str]:
    return names[i % len(names) :] + names[: i % len(names)]


async def measure(servers: Servers, requests: int, concurrency: int, rounds: int) -> dict[str, Any]:
    targets = servers.targets
    names = list(targets)
    samples: dict[str, dict[str, list[float]]] = {name: {"ttfb": [], "total": []} for name in names}
    async with http_client(4 * concurrency) as client:
        await warm_up(client, servers)
        cpu_rounds: list[dict[str, float]] = []  # CPU ms per request in each slice of CPU_SLICE requests
        for start in range(0, requests, CPU_SLICE):
            spent = {name: -targets[name].cpu_ms() for name in names}
            count = min(CPU_SLICE, requests - start)
            for i in range(start, start + count):
                for name in rotated(names, i):
                    ttfb, total = await one(client, targets[name])
                    samples[name]["ttfb"].append(ttfb)
                    samples[name]["total"].append(total)
            cpu_rounds.append({name: (ms + targets[name].cpu_ms()) / count for name, ms in spent.items()})
        per_round: dict[str, list[float]] = {name: [] for name in names}
        for i in range(rounds):
            for name in rotated(names, i):
                seconds, _ = await burst(client, targets[name], concurrency * 4, concurrency)
                per_round[name].append(concurrency * 4 / seconds)
    med = {n: {k: statistics.median(v) for k, v in s.items()} for n, s in samples.items()}
    throughput = {name: statistics.median(values) for name, values in per_round.items()}
    cpu = {name: statistics.median(r[name] for r in cpu_rounds) for name in names}

    def cpu_ratio(name: str, base: str) -> float:  # each slice's own ratio: its sides ran moments apart
        return statistics.median(r[name] / r[base] for r in cpu_rounds)

    ratios = {
        name: {
            "total_vs_specified": med[name]["total"] / med[SPECIFIED]["total"],
            "ttfb_vs_specified": med[name]["ttfb"] / med[SPECIFIED]["ttfb"],
            "total_vs_closed_early": med[name]["total"] / med[CLOSED_EARLY]["total"],
            "cpu_vs_closed_early": cpu_ratio(name, CLOSED_EARLY),
            "throughput_vs_closed_early": throughput[name] / throughput[CLOSED_EARLY],
            "cpu_vs_openai": cpu_ratio(name, OPENAI),
        }
        for name in [*servers.genworkers, CLOSED_EARLY]
    }
    return {
        "requests": requests,
        "concurrency": concurrency,
        "median_ms": med,
        "cpu_ms_per_request": cpu,
        "cpu_ms_per_request_slices": cpu_rounds,
        "requests_per_s": throughput,
        "requests_per_s_rounds": per_round,
        "ratios": ratios,
        "samples": samples,
    }


async def calls_alone(servers: Servers, turns: int) -> dict[str, float]:
    """CPU ms of a turn's two model calls alone, made from this process one turn after another (rounds
    rotated): through genworker's LLMClient, the closed-early endpoint's Router and the openai client,
    with the messages and tools genworker sent. What the servers spend besides is the rest of a turn."""
    from chat_servers import litellm_completion, openai_completion
    from genworker.llm.client import LLMClient
    from genworker.llm.config_source import load_model_config
    from genworker.llm.intent import LLMCallIntent, Purpose
    from genworker.settings import load_settings

    turn = json.loads(await asyncio.to_thread(servers.calls.read_text, encoding="utf-8"))
    first, tools = turn["messages"], turn["tools"]
    call = {"id": "call_1", "type": "function", "function": {"name": "file_read", "arguments": '{"path": "x"}'}}
    second = [*first, {"role": "assistant", "content": None, "tool_calls": [call]}]
    second.append({"role": "tool", "tool_call_id": "call_1", "content": "buy milk"})
    base = servers.model + "/v1"
    env = {"GENWORKER_LLM_MODEL": "openai/bench", "GENWORKER_LLM_API_BASE": base, "GENWORKER_LLM_API_KEY": "k"}
    client = LLMClient(load_model_config(load_settings(servers.calls.parent / "configs", env)))
    intent = LLMCallIntent(Purpose.CHAT, requires_tools=True)

    async def ours(messages: list[dict[str, Any]]) -> Any:
        async for event in client.stream(intent, messages, tools):
            yield event

    async def bare(completion: Any, messages: list[dict[str, Any]]) -> Any:
        async for chunk in completion(messages, tools):
            yield chunk

    early, plain = litellm_completion(base, close_early=True), openai_completion(base)
    makers = {
        OURS: ours,
        CLOSED_EARLY: lambda m: bare(early, m),
        OPENAI: lambda m: bare(plain, m),
    }
    spent: dict[str, list[float]] = {name: [] for name in makers}
    for i in range(turns + 10):  # the first 10 warm up
        for name in rotated(list(makers), i):
            started = time.process_time()
            for messages in (first, second):
                async for _ in makers[name](messages):
                    pass
            if i >= 10:
                spent[name].append((time.process_time() - started) * 1000)
    return {name: statistics.median(values) for name, values in spent.items()}


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def report(result: dict[str, Any]) -> None:
    med, cpu, rps = result["median_ms"], result["cpu_ms_per_request"], result["requests_per_s"]
    concurrency = result["concurrency"]
    print(f"P1 streamed chat turn (tool call + answer), {result['requests']} requests each, rotating")
    print(f"  {'':<28} ttfb (median)   total (median)   CPU/request   req/s @{concurrency}")
    for name in med:
        print(
            f"  {name:<28} {med[name]['ttfb']:10.1f} ms   {med[name]['total']:10.1f} ms   "
            f"{cpu[name]:8.1f} ms   {rps[name]:8.1f}"
        )
    for name, ratio in result["ratios"].items():
        if name == CLOSED_EARLY:
            continue
        total, cpu_ratio, rate = (
            ratio["total_vs_specified"],
            ratio["cpu_vs_closed_early"],
            ratio["throughput_vs_closed_early"],
        )
        print(
            f"  {name}: total / baseline {total:.2f}x ({verdict(total <= TOTAL_TARGET)}: <= {TOTAL_TARGET}x); "
            f"/ closed early: CPU per request {cpu_ratio:.2f}x ({verdict(cpu_ratio <= CPU_TARGET)}: <= {CPU_TARGET}x), "
            f"req/s {rate:.2f}x ({verdict(rate >= THROUGHPUT_TARGET)}: >= {THROUGHPUT_TARGET}x)"
        )
    limit = ", ".join(f"{n} {r['cpu_vs_openai']:.2f}x" for n, r in result["ratios"].items())
    print(f"  CPU per request / the openai client's: {limit}")
    alone = ", ".join(f"{n} {ms:.1f} ms" for n, ms in result["calls_alone_cpu_ms"].items())
    print(f"  the two model calls alone, CPU per turn in one process: {alone}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of requests/s at --concurrency")
    parser.add_argument(
        "--rev", "--before", metavar="REV", action="append", default=[],
        help="also run genworker as it was at this git revision (repeatable)",
    )  # fmt: skip
    parser.add_argument("--no-tree", action="store_true", help="leave out the working tree's genworker")
    parser.add_argument(
        "--also", metavar="KEY=VALUE", action="append", default=[],
        help="also run a genworker with this setting changed (A/B)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    also = dict(item.split("=", 1) for item in args.also)
    with (
        tempfile.TemporaryDirectory(prefix="genworker-p1-") as tmp,
        launched(Path(tmp), tree=not args.no_tree, revisions=args.rev, also=also) as servers,
    ):
        result = asyncio.run(measure(servers, args.requests, args.concurrency, args.rounds))
        gc.collect()
        result["calls_alone_cpu_ms"] = uvloop.run(calls_alone(servers, args.requests))  # the servers' loop
    report(result)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2), encoding="utf-8")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
