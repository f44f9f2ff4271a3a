"""Two real runtime processes (`genworker run`) on one workspace, sharing Redis, both scheduling the
same every-second duty: each slot runs exactly once — one run, one model call — and neither
process interrupts the other's live runs."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from genworker.testing import Reply, ScriptedModelServer

DUTY = (
    "---\nduty_id: tick\ntitle: Tick\ntriggers: [{id: s, type: schedule, interval: 1, misfire_policy: skip}]\n"
    "---\nSay tick.\n"
)
WANTED_RUNS = 4


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def runs(workspace: Path) -> list[dict[str, object]]:
    folder = workspace / "tenants/acme/workers/alice/runs"
    found = []
    for path in folder.glob("*.json") if folder.is_dir() else []:
        try:
            found.append(json.loads(path.read_text(encoding="utf-8")))
        except ValueError:  # being replaced right now; read it next time
            continue
    return found


def test_two_processes_fire_each_slot_once(
    small_workspace: Callable[..., Path], tmp_path: Path, redis_url: str
) -> None:
    workspace = small_workspace({"acme": ["alice"]}, {"tenants/acme/workers/alice/duties/tick.md": DUTY})
    home = tmp_path / "home"
    (home / "configs").mkdir(parents=True)
    with ScriptedModelServer() as model:
        model.expect(*(Reply("tick") for _ in range(200)))
        env = {
            **os.environ,
            "GENWORKER_LLM_MODEL": "openai/scripted",
            "GENWORKER_LLM_API_BASE": model.base_url,
            "GENWORKER_LLM_API_KEY": "k",
            "GENWORKER_HOT_RELOAD": "false",
            "REDIS_URL": redis_url,
        }
        genworker = Path(sys.executable).with_name("genworker")
        procs = []
        for i in range(2):
            with (tmp_path / f"p{i}.log").open("wb") as log:  # the child keeps its own copy of the handle
                command = [str(genworker), "run", "--port", str(free_port()), "--workspace", str(workspace)]
                procs.append(subprocess.Popen(command, cwd=home, env=env, stdout=subprocess.DEVNULL, stderr=log))
        try:
            deadline = time.monotonic() + 120
            while sum(r["state"] == "completed" for r in runs(workspace)) < WANTED_RUNS:
                assert all(p.poll() is None for p in procs), "a runtime process exited early"
                assert time.monotonic() < deadline, "the duty did not fire"
                time.sleep(0.2)  # polling the workspace, not timing anything
        finally:
            for p in procs:
                p.send_signal(signal.SIGTERM)
            for p in procs:
                p.wait(60)
        logs = [(tmp_path / f"p{i}.log").read_text(encoding="utf-8") for i in range(2)]
        records = runs(workspace)
        slots = Counter(str(r["provenance"]["scheduled_for"]) for r in records)  # type: ignore[index]
        assert slots and max(slots.values()) == 1, f"a slot ran twice: {slots}"
        assert len(model.requests) == len(records)  # one model call per run: no fire reached the model twice
        assert all(str(r["owner"]).startswith("rt_") for r in records)  # each run names the process that ran it
        assert not any(r["state"] == "interrupted" for r in records), logs  # nobody interrupted a live run
        assert all("Traceback" not in log for log in logs), logs

