"""The console's JSON routes over the real app: overview, workspace health, usage and the run view,
each scoped to the key's tenant (a key of one tenant never reads another's: 404), and a failed run's
view carrying its reason. LiteLLM reaches the scripted model server over HTTP."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.integration.test_dashboard_api import running

from genworker.auth import ApiKeyStore
from genworker.dashboard.run_view import failure_reason
from genworker.dashboard.usage import percentile, usage
from genworker.testing import Fail, Reply, ScriptedModelServer, ToolCallReply
from genworker.worker.task import ModelUsage, RunError, RunRecord, RunState, RunTimings, StateChange

# an unknown field is a warning (line 3), a goal title that is not a string an error (line 3)
ODD_PERSONA = "---\nidentity: {name: Alice, worker_id: alice, role: assistant}\ncolour: blue\n---\nYou are alice.\n"
BROKEN_GOAL = "---\ngoal_id: launch\ntitle: [not, a, string]\n---\n"


@pytest.fixture
def workspace(small_workspace: Callable[..., Path]) -> Path:
    return small_workspace({"acme": ["alice", "bob"], "globex": ["gina"]})


def chat(client: TestClient, key: str, worker: str, text: str) -> str:
    """Run one task; return its run id."""
    body = {"worker_id": worker, "task": text}
    answer = client.post("/api/v1/worker/task/stream", json=body, headers={"Authorization": f"Bearer {key}"})
    assert answer.status_code == 200, answer.text
    runs = client.get(f"/api/v1/workers/{worker}/runs", headers={"Authorization": f"Bearer {key}"}).json()["runs"]
    return str(runs[0]["run_id"])


def test_a_failed_run_shows_its_reason_and_a_tool_call_its_audited_arguments(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    key = ApiKeyStore(workspace).create("acme")[1]
    globex = ApiKeyStore(workspace).create("globex")[1]
    call = ToolCallReply("file_read", {"path": "notes.md"}, "c1")
    model_server.expect(Reply(tool_calls=(call,)), Reply("Read it."), Fail(500, "upstream exploded"))
    with running(tmp_path, workspace, model_server) as client:
        auth = {"Authorization": f"Bearer {key}"}
        ok = chat(client, key, "alice", "Read notes.md")
        failed = chat(client, key, "alice", "Do something")

        view = client.get(f"/api/v1/workers/alice/dashboard/runs/{failed}", headers=auth)
        assert view.status_code == 200, view.text
        shown = view.json()
        assert shown["state"] == "failed"
        assert (
            shown["reason"].startswith("provider_error: ")
            and "every model in the fallback chain failed" in shown["reason"]
        )
        assert shown["context"]["recorded"] and "system_identity" in [s["name"] for s in shown["context"]["segments"]]
        assert shown["timeline"]["events"][-1]["type"] == "RUN_ERROR"  # its AG-UI timeline ends in the error
        assert "every model in the fallback chain failed" in shown["timeline"]["events"][-1]["summary"]

        done = client.get(f"/api/v1/workers/alice/dashboard/runs/{ok}", headers=auth).json()
        assert done["state"] == "completed" and done["reason"] is None
        assert [(c["name"], c["args"], c["audited"]) for c in done["tool_calls"]] == [
            ("file_read", {"path": "notes.md"}, True)
        ]
        assert done["tool_calls"][0]["effect"] == "read"
        assert done["totals"]["model_calls"] == 2 and done["totals"]["prompt_tokens"] == 20
        assert [c["tier"] for c in done["model_calls"]] and all(c["model"] for c in done["model_calls"])

        # another tenant's key, and a key of this tenant for another worker, read nothing
        as_globex = {"Authorization": f"Bearer {globex}"}
        for path in (f"alice/dashboard/runs/{ok}", f"acme%2Falice/dashboard/runs/{ok}", f"gina/dashboard/runs/{ok}"):
            assert client.get(f"/api/v1/workers/{path}", headers=as_globex).status_code == 404, path
        bob_only = {"Authorization": f"Bearer {ApiKeyStore(workspace).create('acme', ['bob'])[1]}"}
        assert client.get(f"/api/v1/workers/alice/dashboard/runs/{ok}", headers=bob_only).status_code == 404
        assert client.get("/api/v1/workers/alice/dashboard/runs/run-nope", headers=auth).status_code == 404

        overview = client.get("/api/v1/dashboard/overview", headers=auth).json()
        assert overview["tenant_id"] == "acme"
        alice = next(w for w in overview["workers"] if w["worker_id"] == "alice")
        assert (alice["runs"], alice["failed"], alice["tokens"]) == (2, 1, 30)
        assert client.get("/api/v1/dashboard/overview", headers=as_globex).json()["totals"]["runs"] == 0
        assert [
            w["worker_id"] for w in client.get("/api/v1/dashboard/overview", headers=bob_only).json()["workers"]
        ] == ["bob"]

        charts = client.get("/api/v1/dashboard/usage?days=7", headers=auth).json()
        assert charts["totals"]["runs"] == 2 and charts["totals"]["failed"] == 1
        assert len(charts["per_day"]) == 7 and charts["per_day"][-1]["runs"] == 2
        assert charts["latency_ms"]["model_calls"]["count"] == 2
        assert client.get("/api/v1/dashboard/usage", headers=as_globex).json()["totals"]["runs"] == 0
        assert client.get("/api/v1/dashboard/usage?worker_id=alice", headers=as_globex).status_code == 404
        assert client.get("/api/v1/dashboard/usage?worker_id=alice", headers=bob_only).status_code == 404


def test_workspace_health_lists_each_error_with_its_file_and_line_for_the_keys_tenant_only(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    (workspace / "tenants/acme/workers/bob/goals").mkdir(parents=True, exist_ok=True)
    (workspace / "tenants/acme/workers/bob/goals/launch.md").write_text(BROKEN_GOAL, encoding="utf-8")
    (workspace / "tenants/acme/workers/alice/PERSONA.md").write_text(ODD_PERSONA, encoding="utf-8")
    store = ApiKeyStore(workspace)
    acme, alice_only, globex = store.create("acme")[1], store.create("acme", ["alice"])[1], store.create("globex")[1]
    with running(tmp_path, workspace, model_server) as client:
        found = client.get("/api/v1/dashboard/health", headers={"Authorization": f"Bearer {acme}"}).json()
        assert found["errors"] >= 1
        files = {f["file"]: f["issues"] for f in found["files"]}
        goal = files["tenants/acme/workers/bob/goals/launch.md"]
        assert goal[0]["severity"] == "error" and goal[0]["worker_id"] == "bob" and goal[0]["status"] == "not_loaded"
        assert goal[0]["line"] == 3, goal
        assert {"worker_id": "bob", "status": "not_loaded"} in found["workers"]
        odd = files["tenants/acme/workers/alice/PERSONA.md"]
        shown = [(i["severity"], i["line"], i["field"], i["status"]) for i in odd]
        assert shown == [("warning", 3, "colour", "loaded")]
        assert found["warnings"] == 1

        hidden = client.get("/api/v1/dashboard/health", headers={"Authorization": f"Bearer {alice_only}"}).json()
        assert [f["file"] for f in hidden["files"]] == ["tenants/acme/workers/alice/PERSONA.md"]  # not bob's
        assert [w["worker_id"] for w in hidden["workers"]] == ["alice"]
        other = client.get("/api/v1/dashboard/health", headers={"Authorization": f"Bearer {globex}"}).json()
        assert other["tenant_id"] == "globex" and other["files"] == []
        assert client.get("/api/v1/dashboard/health").status_code == 401


def _run(n: int, state: RunState, day: datetime, *usage_: ModelUsage, **extra: Any) -> RunRecord:
    return RunRecord(
        f"run-{n}", f"task-{n}", "acme", "alice", state, RunTimings(day, run_ms=100.0 * n), model_usage=usage_, **extra
    )


def test_usage_series_cover_every_day_and_percentiles_use_nearest_rank() -> None:
    now = datetime(2026, 12, 4, 12, tzinfo=UTC)
    call = ModelUsage("run", "fast", "fast", "m", 100.0, 10, 5, 0.01)
    slow = ModelUsage("run", "strong", "strong", "m2", 900.0, 100, 50, None)
    runs = [
        _run(1, RunState.COMPLETED, now, call, slow),
        _run(2, RunState.FAILED, now - timedelta(days=1), call, error=RunError("model_error", "down")),
        _run(3, RunState.COMPLETED, now - timedelta(days=30), call),  # outside the window
    ]
    shown = usage(runs, days=3, now=now)
    assert shown["days"] == ["2026-12-02", "2026-12-03", "2026-12-04"]
    assert [(d["runs"], d["failed"], d["tokens"]) for d in shown["per_day"]] == [(0, 0, 0), (1, 1, 15), (1, 0, 165)]
    assert shown["per_tier"]["strong"][-1] == {"day": "2026-12-04", "tokens": 150, "cost_usd": 0.0}
    assert shown["latency_ms"]["per_tier"]["fast"] == {"count": 2, "p50": 100.0, "p90": 100.0, "p99": 100.0}
    assert shown["totals"]["cost_usd"] == 0.02
    assert percentile([1, 2, 3, 4], 50) == 2 and percentile([1, 2, 3, 4], 99) == 4 and percentile([], 50) is None


def test_a_failed_run_always_has_a_reason() -> None:
    at = datetime(2026, 12, 4, tzinfo=UTC)
    bare = _run(1, RunState.FAILED, at)
    assert failure_reason(bare) == "the run ended failed and recorded no reason"
    noted = _run(
        2, RunState.INTERRUPTED, at, history=(StateChange(at, RunState.RUNNING, RunState.INTERRUPTED, "restart"),)
    )
    assert failure_reason(noted) == "restart"
    errored = _run(3, RunState.FAILED, at, error=RunError("llm_unavailable", "no key"))
    assert failure_reason(errored) == "llm_unavailable: no key"
    assert failure_reason(_run(4, RunState.COMPLETED, at)) is None
