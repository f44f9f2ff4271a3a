"""Idle memory (issue #28 item 2, bench/idle_rss.py): a started runtime with a model configured holds
the model layer (LiteLLM and the OpenAI types it imports) and the tokenizer, and nothing heavier that
the demo workspace does not ask for: no torch or sentence-transformers (semantic memory is opt-in,
GENWORKER_MEMORY_EMBEDDINGS), no vendor SDK, no LangGraph. Under GENWORKER_LLM_LOAD=first_use not
even the model layer: it loads with the first model call. Runs in a fresh interpreter."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

MODEL_LAYER = ("litellm", "openai", "tiktoken")
NOT_AT_IDLE = (
    "torch",
    "sentence_transformers",
    "transformers",
    "numpy",
    "langgraph",
    "lark_oapi",
    "slack_sdk",
    "dingtalk_stream",
    "wechatpy",
    "schemathesis",
    "playwright",
)


@pytest.mark.parametrize(
    ("load", "loaded"), [("start", list(MODEL_LAYER)), ("first_use", ["tiktoken"])], ids=["start", "first-use"]
)
def test_a_started_runtime_with_a_model_loads_only_the_model_layer_and_the_tokenizer(
    tmp_path: Path, demo_workspace: Path, load: str, loaded: list[str]
) -> None:
    code = (
        "import json, sys\n"
        "from fastapi.testclient import TestClient\n"
        "from genworker.api.app import create_app\n"
        "with TestClient(create_app()) as client:\n"
        "    status = client.get('/readiness').status_code\n"
        f"print(json.dumps([status, sorted(m for m in {MODEL_LAYER + NOT_AT_IDLE!r} if m in sys.modules)]))\n"
    )
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens once the socket is closed
    (tmp_path / "configs").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GENWORKER_", "REDIS_"))}
    env |= {
        "GENWORKER_WORKSPACE": str(demo_workspace),
        "GENWORKER_CONFIG_DIR": str(tmp_path / "configs"),
        "GENWORKER_LLM_MODEL": "openai/bench",
        "GENWORKER_LLM_API_BASE": f"http://127.0.0.1:{port}/v1",  # configured, never called
        "GENWORKER_LLM_API_KEY": "k",
        "GENWORKER_LLM_LOAD": load,
    }
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, encoding="utf-8", env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == [200, loaded]
