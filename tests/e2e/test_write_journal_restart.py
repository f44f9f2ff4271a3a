"""The runtime's write journal across a crash: a server process finishes a chat turn and is killed
before its journal is checkpointed; the next start-up finishes that journal and the turn is there
(run record, manifest, thread history). Real processes, real HTTP, LiteLLM to the scripted model."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx2 as httpx
import pytest

from genworker.auth import ApiKeyStore
from genworker.testing import ScriptedModelServer
from genworker.testing.live_server import serve
from genworker.write_journal import JOURNAL_DIR

KILLED_AFTER_ONE_TURN = """
import json, os, sys
from pathlib import Path
import httpx2 as httpx
from genworker.testing import Reply, ScriptedModelServer
from genworker.testing.live_server import serve

tmp, workspace, key = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
with ScriptedModelServer() as model:
    model.expect(Reply("Noted: the Hamburg lease renews in May."))
    with serve(tmp, workspace, model, GENWORKER_WRITE_JOURNAL_CHECKPOINT_S="3600") as server:
        body = {"worker_id": "alice", "message": "The Hamburg lease renews in May."}
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.stream("POST", server.url + "/api/v1/chat/stream", json=body, headers=headers, timeout=60) as r:
            events = [json.loads(line[5:]) for line in r.iter_lines() if line.startswith("data:")]
        print(json.dumps(events), flush=True)
        os._exit(0)  # killed: no shutdown, no checkpoint
"""


@pytest.fixture
def workspace(small_workspace: Callable[..., Path]) -> Path:
    return small_workspace({"acme": ["alice"]})


def test_a_turn_journaled_by_a_killed_server_is_there_after_restart(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    key = ApiKeyStore(workspace).create("acme")[1]
    for run in ("first", "second"):
        (tmp_path / run).mkdir()
    child = subprocess.run(
        [sys.executable, "-c", KILLED_AFTER_ONE_TURN, str(tmp_path / "first"), str(workspace), key],
        capture_output=True,
        encoding="utf-8",
        timeout=120,
    )
    assert child.returncode == 0, child.stderr
    events = json.loads(child.stdout.strip().splitlines()[-1])
    assert events[-1]["type"] == "RUN_FINISHED", events
    thread_id, run_id = events[0]["threadId"], events[0]["runId"]
    left = [p for p in (workspace / JOURNAL_DIR).glob("*.jsonl") if '"op"' in p.read_text(encoding="utf-8")]
    assert len(left) == 1, "the killed server left its journal unfinished"

    with serve(tmp_path / "second", workspace, model_server) as server:
        assert not left[0].exists()  # finished at start-up
        headers = {"Authorization": f"Bearer {key}"}
        tasks = httpx.get(f"{server.url}/api/v1/chat/{thread_id}/tasks", headers=headers, timeout=30).json()
        run = httpx.get(f"{server.url}/api/v1/workers/alice/runs/{run_id}", headers=headers, timeout=30).json()
    assert [t["run_id"] for t in tasks["tasks"]] == [run_id]
    assert run["state"] == "completed"
    worker = workspace / "tenants" / "acme" / "workers" / "alice"
    assert (worker / "tasks" / "done").is_dir() and not list((worker / "tasks" / "active").glob("*.json"))
    session = next((workspace / "tenants" / "acme" / "sessions").glob(f"*{thread_id}*.json"))
    assert "the Hamburg lease renews in May" in session.read_text(encoding="utf-8")
    assert [p.name for p in (workspace / JOURNAL_DIR).iterdir()] == []  # a clean stop leaves none
