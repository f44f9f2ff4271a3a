"""`make bench`: the resident memory (VmRSS) of `genworker run` serving a fresh copy of the demo
workspace once it is ready and has idled, against bare servers launched the same way in the same run:

- `bare`: uvicorn serving a FastAPI app with one route (the floor for any FastAPI server);
- `bare + LiteLLM`: the same after importing LiteLLM and building a Router (the floor for a server
  whose model layer is loaded, as `genworker run`'s is once /readiness is 200);
- `genworker run, no model`: genworker without a model configured, so LiteLLM is never imported
  (what genworker itself holds);
- `genworker run`: a model configured (never called), as a deployment runs;
- `genworker run, first use`: the same with GENWORKER_LLM_LOAD=first_use, so LiteLLM loads with the
  first model call instead of at start-up (/readiness 200 with the warning `model_loads_on_first_use`).

Each server starts in a new interpreter; the figure is read from /proc/<pid>/status after
/readiness has answered 200 (without a model: /health says it has started) and the server has idled
`--idle` seconds. Rounds rotate the order. A server also writes which modules it has imported (a
thread waiting for a signal file, started before anything else: it adds nothing measurable), so the
report can say whether an optional heavy package (torch, sentence_transformers, a vendor SDK) is
loaded at idle. Target: < 150 MB, met only by deferring LiteLLM (its import alone holds ~180 MB).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from startup import extract, free_port, proc_figures, status

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results" / "idle_rss.json"
TARGET_MB = 150.0
GIVE_UP_S = 300.0
FIRST_USE = "genworker run, first use"
OPTIONAL_HEAVY = ("torch", "sentence_transformers", "numpy", "langgraph", "lark_oapi", "slack_sdk", "dingtalk_stream")

# Waits for argv[1] (a file) to appear, then writes the imported modules to argv[1] + ".json".
MODULES_ON_SIGNAL = """
import json, os, sys, threading, time
def _dump(signal_file):
    while not os.path.exists(signal_file):
        time.sleep(0.1)
    with open(signal_file + ".json", "w", encoding="utf-8") as f:
        json.dump(sorted(sys.modules), f)
threading.Thread(target=_dump, args=(sys.argv.pop(1),), daemon=True).start()
"""
GENWORKER = (
    MODULES_ON_SIGNAL
    + """
sys.path.insert(0, sys.argv[1])
from genworker.cli import main
sys.exit(main(["run", *sys.argv[2:]]))
"""
)
BARE = (
    MODULES_ON_SIGNAL
    + """
if sys.argv[2] == "litellm":
    from litellm.router import Router
    Router(model_list=[{"model_name": "default", "litellm_params": {"model": "openai/bench"}}])
import uvicorn
from fastapi import FastAPI

app = FastAPI()

@app.get("/readiness")
def readiness() -> dict[str, str]:
    return {"status": "ok"}

uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""
)


def started(port: int, model: bool) -> bool:
    """/readiness 200; without a model (it stays 503, model_not_configured) /health saying the runtime
    has started."""
    if model:
        return status(f"http://127.0.0.1:{port}/readiness") == 200
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as response:
            return bool(json.load(response).get("status") != "starting")
    except OSError:
        return False


def idle_rss(
    command: list[str], port: int, env: dict[str, str], idle_s: float, signal_file: Path, *, model: bool
) -> dict[str, Any]:
    """Launch, wait until started, idle, then the RSS (MB) and the modules imported."""
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    began = time.perf_counter()
    try:
        while not started(port, model):
            if proc.poll() is not None or time.perf_counter() - began > GIVE_UP_S:
                stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                raise RuntimeError(f"{command[:3]}: not started (exit {proc.poll()}): {stderr[-2000:]}")
            time.sleep(0.1)
        time.sleep(idle_s)
        _, rss_mb = proc_figures(proc.pid)
        signal_file.touch()
        dump = Path(str(signal_file) + ".json")
        while not dump.exists() or not dump.stat().st_size:
            time.sleep(0.05)
        time.sleep(0.1)  # written and closed
        modules: list[str] = json.loads(dump.read_text(encoding="utf-8"))
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    return {
        "rss_mb": rss_mb,
        "modules": len(modules),
        "heavy": sorted({m.split(".")[0] for m in modules} & set(OPTIONAL_HEAVY)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--idle", type=float, default=5.0, help="seconds idle after /readiness 200")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="genworker-idle-rss-") as tmp:
        demo = extract(Path(tmp) / "demo", "HEAD", "workspace")
        (Path(tmp) / "configs").mkdir()
        base_env = {k: v for k, v in os.environ.items() if not k.startswith(("GENWORKER_", "PYTHONPATH"))}
        base_env["GENWORKER_CONFIG_DIR"] = str(Path(tmp) / "configs")
        model = {
            "GENWORKER_LLM_MODEL": "openai/bench",
            "GENWORKER_LLM_API_BASE": f"http://127.0.0.1:{free_port()}/v1",  # configured; never called
            "GENWORKER_LLM_API_KEY": "k",
        }
        names = ["bare", "bare + LiteLLM", "genworker run, no model", "genworker run", FIRST_USE]
        samples: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
        for i in range(args.rounds):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                port = free_port()
                signal_file = Path(tmp) / f"signal-{i}-{port}"
                configured = name != "genworker run, no model"
                env = {**base_env, **(model if configured else {})}
                if name == FIRST_USE:
                    env["GENWORKER_LLM_LOAD"] = "first_use"
                if name.startswith("genworker"):
                    workspace = shutil.copytree(demo, Path(tmp) / f"ws-{i}-{port}")
                    server = [str(ROOT / "src"), "--port", str(port), "--workspace", str(workspace)]
                    command = [sys.executable, "-c", GENWORKER, str(signal_file), *server]
                else:
                    mode = "litellm" if "LiteLLM" in name else "-"
                    command = [sys.executable, "-c", BARE, str(signal_file), str(port), mode]
                samples[name].append(idle_rss(command, port, env, args.idle, signal_file, model=configured))
    result = report(samples, args.idle)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({**result, "samples": samples}, indent=2), encoding="utf-8")
    print(f"wrote {RESULTS}")
    return 0


def report(samples: dict[str, list[dict[str, Any]]], idle_s: float) -> dict[str, Any]:
    med = {name: statistics.median(s["rss_mb"] for s in runs) for name, runs in samples.items()}
    rounds = len(next(iter(samples.values())))
    print(f"idle RSS once /readiness is 200 and {idle_s:g} s idle, demo workspace, {rounds} launches each, medians")
    print(f"  {'server':<28}{'RSS':>8}{'modules':>9}  optional heavy packages loaded")
    for name, runs in samples.items():
        modules = statistics.median(s["modules"] for s in runs)
        heavy = sorted({h for s in runs for h in s["heavy"]})
        print(f"  {name:<28}{med[name]:>5.0f} MB{modules:>9.0f}  {', '.join(heavy) or 'none'}")
    ours, deferred = med["genworker run"], med[FIRST_USE]
    ratios = {
        "vs_bare": ours / med["bare"],
        "vs_bare_litellm": ours / med["bare + LiteLLM"],
        "litellm_share_mb": med["bare + LiteLLM"] - med["bare"],
        "genworker_own_mb": med["genworker run, no model"] - med["bare"],
        "first_use_vs_bare": deferred / med["bare"],
    }
    verdict = "ok" if ours < TARGET_MB else "MISSED"
    print(
        f"  genworker run: {ours:.0f} MB, target < {TARGET_MB:g} MB {verdict}; {ratios['vs_bare']:.2f}x bare, "
        f"{ratios['vs_bare_litellm']:.2f}x bare + LiteLLM"
    )
    verdict = "ok" if deferred < TARGET_MB else "MISSED"
    print(f"  {FIRST_USE}: {deferred:.0f} MB, target < {TARGET_MB:g} MB {verdict}; {deferred / med['bare']:.2f}x bare")
    print(
        f"  of which LiteLLM ~{ratios['litellm_share_mb']:.0f} MB (bare + LiteLLM - bare), "
        f"genworker's own ~{ratios['genworker_own_mb']:.0f} MB (no model - bare)"
    )
    return {"medians_mb": med, "ratios": ratios, "target_mb": TARGET_MB}


if __name__ == "__main__":
    sys.exit(main())
