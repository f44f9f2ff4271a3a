"""Execution depth end to end: a duty's quick / standard / deep picks the model tier, the rounds cap
and the token budget from its tenant's `execution_depths`, and the run record and the dashboard
show it. Real app and runtime; LiteLLM reaches the scripted model server over HTTP, one model name
per tier, so each request says which tier's group served it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from genworker.api.app import create_app
from genworker.auth import ApiKeyStore
from genworker.settings import load_settings
from genworker.testing import Reply, ScriptedModelServer, ToolCallReply, scripted_env

TENANT = {
    "tenant_id": "acme",
    "trust_level": 2,
    "default_worker": "alice",
    # quick: 2 rounds; standard: a small token budget; deep: the defaults (strong tier, 20 rounds)
    "execution_depths": {"quick": {"max_rounds": 2}, "standard": {"token_budget": 100}},
}


def duty(duty_id: str, policy: str) -> str:
    return (
        f"---\nduty_id: {duty_id}\ntitle: {duty_id.title()} check\n"
        "triggers: [{id: go, type: manual, description: Asked from the dashboard}]\n"
        f"execution_policy: {policy}\nquality_criteria: [Name the files]\n---\nList the files.\n"
    )


@pytest.fixture
def workspace(small_workspace: Callable[..., Path]) -> Path:
    return small_workspace(
        {"acme": ["alice"]},
        {
            "tenants/acme/TENANT.json": json.dumps(TENANT),
            "tenants/acme/workers/alice/duties/glance.md": duty("glance", "{default: quick}"),
            "tenants/acme/workers/alice/duties/dig.md": duty("dig", "{default: standard, overrides: {go: deep}}"),
            "tenants/acme/workers/alice/duties/tally.md": duty("tally", "{default: standard}"),
        },
    )


@contextmanager
def running(tmp_path: Path, workspace: Path, model: ScriptedModelServer) -> Iterator[TestClient]:
    (tmp_path / "configs").mkdir(exist_ok=True)
    tiers = {
        f"GENWORKER_LLM_{tier}_{key}": value
        for tier in ("FAST", "STANDARD", "STRONG")
        for key, value in (("MODEL", f"openai/{tier.lower()}-model"), ("API_BASE", model.base_url), ("API_KEY", "k"))
    }
    env = scripted_env(model, **tiers)
    with TestClient(create_app(load_settings(tmp_path / "configs", env, workspace=workspace))) as client:
        yield client


def sees(*texts: str) -> Callable[[dict[str, Any]], None]:
    def check(body: dict[str, Any]) -> None:
        system = body["messages"][0]["content"]
        missing = [t for t in texts if t not in system]
        assert not missing, f"the system prompt lacks {missing}"

    return check


LIST = ToolCallReply("file_list", {"path": "."})


def run_duty(client: TestClient, headers: dict[str, str], duty_id: str) -> dict[str, Any]:
    ran = client.post(f"/api/v1/workers/alice/duties/{duty_id}/run", headers=headers)
    assert ran.status_code == 200, ran.text
    run = client.get(f"/api/v1/workers/alice/runs/{ran.json()['run']['run_id']}", headers=headers)
    assert run.status_code == 200, run.text
    return dict(run.json())


def test_quick_and_deep_duties_use_their_tier_rounds_and_budget(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    model_server.expect(
        # glance (quick): the fast tier, stopped after the tenant's 2 rounds although the skill allows 10
        Reply(tool_calls=(LIST,), check=sees("Execution depth: quick", "Quick run:", "1. Name the files")),
        Reply(tool_calls=(LIST,)),
        # dig (deep for trigger go): the strong tier, and the root-cause section
        Reply("Two files; nothing anomalous.", check=sees("Execution depth: deep", "Root-cause analysis")),
        # ... completed: the evaluator turn judges its quality criterion (the fast tier)
        Reply('{"criteria": [{"n": 1, "met": true, "reason": "two files"}]}'),
        # tally (standard): a 100-token budget, spent by the first turn
        Reply(tool_calls=(LIST,), prompt_tokens=90, completion_tokens=20),
    )
    key = ApiKeyStore(workspace).create("acme")[1]
    headers = {"Authorization": f"Bearer {key}"}
    with running(tmp_path, workspace, model_server) as client:
        glance = run_duty(client, headers, "glance")
        dig = run_duty(client, headers, "dig")
        tally = run_duty(client, headers, "tally")
        login = client.post("/dashboard/login", json={"api_key": key})
        assert login.status_code == 200, login.text
        blocks = client.get("/api/v1/workers/alice/dashboard").json()["blocks"]

    models = ["fast-model", "fast-model", "strong-model", "fast-model", "standard-model"]
    assert [r["model"] for r in model_server.requests] == models

    assert glance["provenance"]["execution_depth"] == "quick"
    assert (glance["state"], glance["error"]["code"]) == ("budget_exceeded", "max_turns_exceeded")
    assert "stopped after 2 turns (the quick depth's limit)" in glance["deliverables"][0]["content"]
    assert [(u["tier"], u["group"]) for u in glance["model_usage"]] == [("fast", "fast"), ("fast", "fast")]

    assert dig["provenance"]["execution_depth"] == "deep"
    assert dig["state"] == "completed"
    assert [(u["tier"], u["group"]) for u in dig["model_usage"]] == [("strong", "strong"), ("fast", "fast")]
    assert [(c["check"], c["verdict"]) for c in dig["checks"]] == [("quality", "passed")]

    assert tally["provenance"]["execution_depth"] == "standard"
    assert (tally["state"], tally["error"]["code"]) == ("budget_exceeded", "budget_exceeded")
    assert "used 110 tokens, the standard depth allows 100" in tally["deliverables"][0]["content"]

    shown = {r["run_id"]: r["execution_depth"] for r in blocks["runs"]["data"]["runs"]}
    assert shown == {glance["run_id"]: "quick", dig["run_id"]: "deep", tally["run_id"]: "standard"}


def test_chat_runs_at_standard_depth_without_a_duty_brief(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    def no_brief(body: dict[str, Any]) -> None:
        assert "Execution depth" not in body["messages"][0]["content"]

    model_server.expect(Reply("hello", check=no_brief))
    headers = {"Authorization": f"Bearer {ApiKeyStore(workspace).create('acme')[1]}"}
    with running(tmp_path, workspace, model_server) as client:
        answer = client.post("/api/v1/chat/stream", headers=headers, json={"message": "hi", "worker_id": "alice"})
        assert answer.status_code == 200, answer.text
        [listed] = client.get("/api/v1/workers/alice/runs", headers=headers).json()["runs"]
        run = client.get(f"/api/v1/workers/alice/runs/{listed['run_id']}", headers=headers).json()
    assert (run["state"], run["provenance"]["execution_depth"]) == ("completed", "standard")
    assert [r["model"] for r in model_server.requests] == ["standard-model"]
