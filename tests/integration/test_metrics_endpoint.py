"""`GET /metrics` over real HTTP: a chat with a tool call through LiteLLM to the scripted model
moves the run, model and tool counters; the page parses with prometheus_client's own parser;
access is configurable; every response carries X-Request-ID.

The metrics registry is process-wide, so every check compares a scrape before and after.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path

import httpx2 as httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from genworker.auth import ApiKeyStore
from genworker.testing import Fail, Reply, ScriptedModelServer, ToolCallReply, serve
from genworker.testing.live_server import LiveServer

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture
def workspace(small_workspace: Callable[..., Path]) -> Path:
    return small_workspace({"acme": ["alice", "bob"]})


def scrape(server: LiveServer, headers: Mapping[str, str] | None = None) -> tuple[httpx.Response, Samples]:
    response = httpx.get(server.url + "/metrics", headers=dict(headers or {}), timeout=30)
    assert response.status_code == 200, response.text
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return response, samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def chat(server: LiveServer, api_key: str, message: str) -> list[dict[str, object]]:
    with httpx.stream(
        "POST",
        server.url + "/api/v1/chat/stream",
        json={"worker_id": "alice", "message": message},
        headers={"Authorization": f"Bearer {api_key}"},
        timeout=60,
    ) as response:
        assert response.status_code == 200, response.read()
        return [json.loads(line[5:]) for line in response.iter_lines() if line.startswith("data:")]


def test_a_chat_with_a_tool_call_moves_run_model_and_tool_metrics(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    (workspace / "tenants/acme/workers/alice/files").mkdir()
    (workspace / "tenants/acme/workers/alice/files/notes.md").write_text("buy milk", encoding="utf-8")
    model_server.expect(
        Reply("Looking.", tool_calls=(ToolCallReply("file_read", {"path": "files/notes.md"}, "c1"),)),
        Reply("Your note says: buy milk.", prompt_tokens=30, completion_tokens=7),
    )
    api_key = ApiKeyStore(workspace).create("acme")[1]
    with serve(tmp_path, workspace, model_server) as server:
        _, before = scrape(server)
        events = chat(server, api_key, "What does my note say?")
        assert events[-1]["type"] == "RUN_FINISHED"
        response, after = scrape(server)

    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    model = {"model": "openai/scripted"}

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("genworker_runs_total", state="queued") == 1
    assert delta("genworker_runs_total", state="completed") == 1
    tiers = {dict(labels)["tier"] for (name, labels) in after if name == "genworker_llm_calls_total"}
    calls = sum(delta("genworker_llm_calls_total", tier=t, outcome="ok", **model) for t in tiers)
    assert calls == 2
    assert sum(delta("genworker_llm_tokens_total", tier=t, **model) for t in tiers) == 10 + 5 + 30 + 7
    assert sum(delta("genworker_llm_call_duration_seconds_count", tier=t, **model) for t in tiers) == 2
    assert delta("genworker_tool_calls_total", tool="file_read", outcome="completed") == 1
    assert delta("genworker_gate_results_total", result="auto") == 1  # the Policy Gate's verdict on the chat
    assert ("genworker_inbox_items", frozenset({("state", "pending")})) in after
    assert value(after, "genworker_workers", status="loaded") == 2
    assert value(after, "genworker_ready") == 1
    assert value(after, "genworker_component_status", component="llm", status="ready") == 1
    assert value(after, "genworker_component_status", component="llm", status="failed") == 0
    assert "acme" not in response.text and "alice" not in response.text  # counts only, no tenant data


def test_a_provider_failure_counts_as_a_model_error(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    model_server.expect(Fail(400, "bad request"))  # not retried: one failed call
    api_key = ApiKeyStore(workspace).create("acme")[1]
    with serve(tmp_path, workspace, model_server) as server:
        _, before = scrape(server)
        events = chat(server, api_key, "hello")
        assert events[-1]["type"] == "RUN_ERROR"
        _, after = scrape(server)
    errors = {
        labels: v - before.get((name, labels), 0.0)
        for (name, labels), v in after.items()
        if name == "genworker_llm_calls_total" and ("outcome", "error") in labels
    }
    assert sum(errors.values()) == 1
    failed = ("genworker_runs_total", frozenset({("state", "failed")}))
    assert after.get(failed, 0.0) - before.get(failed, 0.0) == 1


def test_metrics_token_switch_and_an_unreadable_inbox(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    token = "scrape-secret-0123456789"
    broken = workspace / "tenants/acme/workers/bob/runtime/inbox"
    broken.mkdir(parents=True)
    (broken / "pending").write_text("not a folder", encoding="utf-8")  # the inbox store cannot count it
    with serve(tmp_path, workspace, model_server, GENWORKER_METRICS_TOKEN=token) as server:
        refused = httpx.get(server.url + "/metrics", timeout=30)
        wrong = httpx.get(server.url + "/metrics", headers={"Authorization": "Bearer nope"}, timeout=30)
        _, samples = scrape(server, {"Authorization": f"Bearer {token}"})
    assert refused.status_code == wrong.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
    assert not any(name == "genworker_inbox_items" for name, _ in samples)  # that gauge is left out, not the page
    assert value(samples, "genworker_workers", status="loaded") == 2
    assert "GENWORKER_METRICS_TOKEN" in refused.json()["error"]["message"]
    with serve(tmp_path, workspace, model_server, GENWORKER_METRICS="off") as server:
        off = httpx.get(server.url + "/metrics", timeout=30)
    assert off.status_code == 404 and off.json()["error"]["code"] == "not_found"


def test_request_ids_go_in_and_out_and_webhook_failures_and_heartbeats_are_counted(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    acme = {"Authorization": f"Bearer {ApiKeyStore(workspace).create('acme')[1]}"}
    with serve(tmp_path, workspace, model_server) as server:
        _, before = scrape(server)
        kept = httpx.get(server.url + "/health", headers={"X-Request-ID": "proxy-42.a:b"}, timeout=30)
        replaced = httpx.get(server.url + "/health", headers={"X-Request-ID": "bad id\u00e9"[:6]}, timeout=30)
        fresh = httpx.get(server.url + "/api/v1/workers/alice/runs", timeout=30)  # a 401 carries one too
        unsigned = httpx.post(server.url + "/api/v1/webhook/ingest/acme/alice", content=b"{}", timeout=30)
        beat = httpx.post(server.url + "/api/v1/workers/alice/heartbeat/run", headers=acme, timeout=30)
        _, after = scrape(server)
    assert kept.headers["x-request-id"] == "proxy-42.a:b"
    assert replaced.headers["x-request-id"] != "bad id" and len(replaced.headers["x-request-id"]) == 32
    assert fresh.status_code == 401 and len(fresh.headers["x-request-id"]) == 32
    assert unsigned.status_code == 401
    name = "genworker_webhook_verification_failures_total"
    labels = {"platform": "webhook", "check": "invalid_signature"}
    assert value(after, name, **labels) - value(before, name, **labels) == 1
    assert beat.status_code == 200 and beat.json()["report"]["claimed"] == 0  # an empty inbox: nothing to say
    silent = "genworker_heartbeat_runs_total", {"outcome": "silent"}
    assert value(after, silent[0], **silent[1]) - value(before, silent[0], **silent[1]) == 1
