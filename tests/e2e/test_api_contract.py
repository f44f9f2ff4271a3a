"""The API keeps its OpenAPI contract under fuzzing: Schemathesis (`st run --checks all`, every phase)
against the real server over HTTP, with a tenant key, on this test's copy of the demo workspace.

Two runs: one where every id is drawn (so mostly invalid or unknown ones: 422 and 404 must be what the
schema says), one where the path names the demo's own worker, goal and duty, so requests reach the
routes' own logic (goal commands, duty runs, chats).

- The server runs in this process on asyncio's loop (`LiveServer`), not as a uvloop subprocess: the
  suite's network guard (tests/conftest.py) patches this process's `socket.getaddrinfo`, and fuzzed
  bodies name hosts (IM credentials, IMAP servers) that must never be looked up, let alone reached.
- Every model call goes to the scripted model server with no step scripted: it answers 500, so a run
  fails fast as a provider error. A chat stream then still answers 200 (its RUN_ERROR is an event),
  the OpenAI-compatible route 502 and an unconfigured component 503: declared, deliberate answers
  about something upstream or missing, so `not_a_server_error` accepts those two. A 500 fails the run.
- No operation is excluded. The examples per operation and the seed are fixed: the run is bounded and
  repeatable. One worker: several at once hit a thread-safety error inside Hypothesis.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from genworker.api.app import create_app
from genworker.auth import ApiKeyStore
from genworker.settings import load_settings
from genworker.testing import ScriptedModelServer, scripted_env
from genworker.testing.live_server import LiveServer

MAX_EXAMPLES = 10
SEED = 20_260_521
# a request the schema forbids must be refused; 413 is among the refusals, not only Schemathesis'
# default list: webhook ingest answers a list longer than its maxItems 413 `too_many_items`, as declared
CONFIG = """
[checks.not_a_server_error]
expected-statuses = ["2xx", "3xx", "4xx", "502", "503"]

[checks.negative_data_rejection]
expected-statuses = ["400", "401", "403", "404", "406", "413", "422", "428", "5xx"]
"""
DEMO_ITEMS = """
[parameters]
worker_id = "assistant"
goal_id = "inbox-under-control"
duty_id = "inbox-triage"
"""


@pytest.mark.parametrize("parameters", ["", DEMO_ITEMS], ids=["drawn-ids", "demo-items"])
def test_the_api_keeps_its_openapi_contract_under_fuzzing(
    tmp_path: Path, demo_workspace: Path, parameters: str
) -> None:
    worker = demo_workspace / "tenants/demo/workers/assistant"
    assert (worker / "goals/inbox-under-control.md").is_file() and (worker / "duties/inbox-triage.md").is_file()
    key = ApiKeyStore(demo_workspace).create("demo")[1]
    (tmp_path / "configs").mkdir()
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG + parameters, encoding="utf-8")
    # no step scripted: every model call is answered 500 (not the `model_server` fixture, which fails on that)
    with ScriptedModelServer() as model:
        settings = load_settings(tmp_path / "configs", scripted_env(model), workspace=demo_workspace)
        with LiveServer(create_app(settings)) as server:
            command = [
                sys.executable, "-m", "schemathesis.cli", "--config-file", str(config), "--no-color",
                "run", f"{server.url}/openapi.json", "--checks", "all", "-H", f"Authorization: Bearer {key}",
                "--max-examples", str(MAX_EXAMPLES), "--seed", str(SEED), "--generation-database", "none",
                "--workers", "1", "--request-timeout", "30",
            ]  # fmt: skip
            env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
            done = subprocess.run(
                command,
                capture_output=True,
                text=True,
                encoding="utf-8",
                env=env,
                cwd=tmp_path,
                timeout=600,
                check=False,
            )
    assert done.returncode == 0, done.stdout[-20_000:] + done.stderr[-5_000:]
