"""`make bench`: how soon `genworker run` answers after launch. Time to the first `/health` 200 and to
the first `/readiness` 200 on a fresh copy of the demo workspace (a model configured, so LiteLLM
loads; nothing calls it), against bare servers launched the same way in the same run:

- `bare`: uvicorn serving a plain ASGI `/health` (the floor: Python, uvicorn, a socket);
- `bare + LiteLLM`: the same, after importing LiteLLM and building a Router (the floor for a server
  that is ready only once its model layer is);
- `--before REV`: genworker as it was at a git revision (its `src/` extracted to a temporary folder).

Each launch starts a new interpreter with `python -c`; rounds rotate which server goes first. Besides
the wall times it reads the server's CPU time and RSS when it became ready (/proc), which move far
less with the load of a shared machine. Targets: /health <= 1 s; readiness no later than before.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results" / "startup.json"
HEALTH_TARGET_S = 1.0
GIVE_UP_S = 300.0
STARTED = "Application startup complete"  # uvicorn's line, once the application's start-up has run

GENWORKER = """
import sys
sys.path.insert(0, sys.argv[1])
from genworker.cli import main
sys.exit(main(["run", *sys.argv[2:]]))
"""
BARE = """
import sys
if sys.argv[2] == "litellm":
    from litellm.router import Router
    Router(model_list=[{"model_name": "default", "litellm_params": {"model": "openai/bench"}}])
import uvicorn

async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    ok = scope["path"] in ("/health", "/readiness")
    await send({"type": "http.response.start", "status": 200 if ok else 404,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": b'{"status": "ok"}' if ok else b"{}"})

uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), lifespan="on")
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:  # not listening yet
        return None


def proc_figures(pid: int) -> tuple[float, float]:
    """(CPU seconds, user + system, all threads; RSS in MB) of a live process."""
    fields = Path(f"/proc/{pid}/stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    status_lines = Path(f"/proc/{pid}/status").read_text(encoding="ascii").splitlines()
    rss_kb = next(int(line.split()[1]) for line in status_lines if line.startswith("VmRSS"))
    return cpu, rss_kb / 1024


def launch(argv: list[str], port: int, env: dict[str, str]) -> dict[str, float]:
    """Start a server; the seconds from launch to its first /health 200, and to its log line saying
    the application has started (then /readiness must answer 200). /health is polled every 10 ms
    until it answers, then nothing is: requests during the start would take the interpreter's lock
    from the start-up thread, which a prober every few seconds does not, but a tight loop does."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, encoding="utf-8"
    )
    lines: queue.Queue[tuple[float, str | None]] = queue.Queue()

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.put((time.perf_counter(), line))
        lines.put((time.perf_counter(), None))

    threading.Thread(target=pump, daemon=True).start()
    base = f"http://127.0.0.1:{port}"
    log: list[str] = []
    found: dict[str, float] = {}
    try:
        while status(base + "/health") != 200:
            if proc.poll() is not None or time.perf_counter() - started > GIVE_UP_S:
                raise RuntimeError(f"{argv[:3]}: no /health 200 (exit {proc.poll()})")
            time.sleep(0.01)
        found["/health"] = time.perf_counter() - started
        while True:
            at, line = lines.get(timeout=GIVE_UP_S)
            if line is None:
                raise RuntimeError(f"{argv[:3]} exited: {''.join(log)}")
            log.append(line)
            if STARTED in line:
                break
        found["/readiness"] = max(at - started, found["/health"])  # a bare server logs it just before it listens
        found["cpu_s"], found["rss_mb"] = proc_figures(proc.pid)
        if status(base + "/readiness") != 200:
            raise RuntimeError(f"{argv[:3]}: /readiness is not 200 once started: {''.join(log)}")
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    return found


def extract(dest: Path, rev: str, path: str) -> Path:
    """What git tracks under `path` at `rev`, written below `dest`; the extracted `path`."""
    dest.mkdir()
    tree = subprocess.run(["git", "-C", str(ROOT), "archive", rev, path], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=tree.stdout, check=True)
    return dest / path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--before", metavar="REV", help="also launch genworker as it was at this git revision")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="genworker-startup-") as tmp:
        demo = extract(Path(tmp) / "demo", "HEAD", "workspace")
        sources = {"genworker run": str(ROOT / "src")}
        if args.before:
            sources[f"genworker run @ {args.before}"] = str(extract(Path(tmp) / "before", args.before, "src"))
        (Path(tmp) / "configs").mkdir()
        env = {
            **os.environ,
            "GENWORKER_CONFIG_DIR": str(Path(tmp) / "configs"),
            "GENWORKER_LLM_MODEL": "openai/bench",
            "GENWORKER_LLM_API_BASE": f"http://127.0.0.1:{free_port()}/v1",  # configured; never called
            "GENWORKER_LLM_API_KEY": "k",
            "LOG_LEVEL": "INFO",  # the line saying the application has started
            "GENWORKER_LOG_FORMAT": "text",
        }
        env.pop("PYTHONPATH", None)
        names = ["bare", "bare + LiteLLM", *sources]
        samples: dict[str, list[dict[str, float]]] = {name: [] for name in names}
        for i in range(args.rounds):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                port = free_port()
                if name in sources:
                    workspace = shutil.copytree(demo, Path(tmp) / f"ws-{i}-{port}")  # a fresh copy each launch
                    server = [sources[name], "--port", str(port), "--workspace", str(workspace)]
                    command = [sys.executable, "-c", GENWORKER, *server]
                else:
                    command = [sys.executable, "-c", BARE, str(port), "litellm" if "LiteLLM" in name else "-"]
                samples[name].append(launch(command, port, env))
    result = report(samples, args.before)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({**result, "samples": samples}, indent=2), encoding="utf-8")
    print(f"wrote {RESULTS}")
    return 0


def paired(samples: dict[str, list[dict[str, float]]], ours: str, base: str, key: str) -> float:
    """The median of the rounds' own ratios: each pairs two launches made moments apart, so a change in
    the machine's load between rounds does not enter it."""
    return statistics.median(o[key] / b[key] for o, b in zip(samples[ours], samples[base], strict=True))


def report(samples: dict[str, list[dict[str, float]]], before: str | None) -> dict[str, Any]:
    med = {name: {k: statistics.median(s[k] for s in runs) for k in runs[0]} for name, runs in samples.items()}
    rounds = len(next(iter(samples.values())))
    print(f"start-up of `genworker run` on the demo workspace, {rounds} launches each, medians")
    print(f"  {'server':<34}{'/health 200':>12}{'/readiness 200':>16}{'CPU to ready':>14}{'RSS ready':>11}")
    for name, m in med.items():
        times = f"{m['/health']:>10.2f} s{m['/readiness']:>14.2f} s"
        print(f"  {name:<34}{times}{m['cpu_s']:>12.2f} s{m['rss_mb']:>8.0f} MB")
    ours = "genworker run"
    ratios = {
        "health_vs_bare": paired(samples, ours, "bare", "/health"),
        "readiness_vs_bare_litellm": paired(samples, ours, "bare + LiteLLM", "/readiness"),
    }
    verdict = "ok" if med[ours]["/health"] <= HEALTH_TARGET_S else "MISSED"
    target = f"target <= {HEALTH_TARGET_S:g} s {verdict}"
    print(f"  /health: {med[ours]['/health']:.2f} s, {target}; {ratios['health_vs_bare']:.2f}x bare (paired rounds)")
    print(f"  /readiness: {ratios['readiness_vs_bare_litellm']:.2f}x bare + LiteLLM")
    if before:
        then = f"genworker run @ {before}"
        ratios["readiness_vs_before"] = paired(samples, ours, then, "/readiness")
        ratios["cpu_to_ready_vs_before"] = paired(samples, ours, then, "cpu_s")
        later = "ok" if ratios["readiness_vs_before"] <= 1.0 else "LATER"
        print(
            f"  /readiness vs {before}: {ratios['readiness_vs_before']:.2f}x ({later}); "
            f"CPU to ready {ratios['cpu_to_ready_vs_before']:.2f}x"
        )
    return {"medians": med, "ratios": ratios}


if __name__ == "__main__":
    sys.exit(main())
