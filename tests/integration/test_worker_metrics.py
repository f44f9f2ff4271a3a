"""WorkerMetrics, the default MetricSource: reported values survive a restart, inbox counts are built
in, bad names and values are refused; over the API a reported value fires a condition duty once."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from genworker.api.app import create_app
from genworker.auth import ApiKeyStore
from genworker.autonomy.duties import MetricError, WorkerMetrics
from genworker.autonomy.inbox import FileInboxStore, new_item
from genworker.settings import load_settings
from genworker.testing import Reply, ScriptedModelServer, scripted_env

pytestmark = pytest.mark.anyio

DUTY = (
    "---\nduty_id: drain\ntitle: Drain\ntriggers: [{id: deep, type: condition, metric: queue_depth, "
    "rule: '> 10', check_interval: 1}]\n---\nThe queue is deep: drain it.\n"
)


async def test_reported_and_builtin_metrics(tmp_path: Path) -> None:
    inbox = FileInboxStore(tmp_path)
    metrics = WorkerMetrics(tmp_path, inbox)
    assert await metrics.read("acme", "alice", "queue_depth") is None  # never reported: unknown
    await metrics.report("acme", "alice", "queue_depth", 12)
    await metrics.report("acme", "alice", "deploy_ok", True)
    again = WorkerMetrics(tmp_path, inbox)  # a restart
    assert await again.read("acme", "alice", "queue_depth") == 12.0
    assert await again.read("acme", "alice", "deploy_ok") is True
    assert await again.read("acme", "bob", "queue_depth") is None  # per worker
    await inbox.write(new_item("acme", "alice", "webhook", "hook", "webhook.fact", {}))
    assert await again.read("acme", "alice", "inbox.pending") == 1.0
    assert await again.read("acme", "alice", "inbox.nonsense") is None
    for name, value in [("Bad Name", 1), ("inbox.pending", 3), ("x", float("nan")), ("y", float("inf"))]:
        with pytest.raises(MetricError):
            await metrics.report("acme", "alice", name, value)
    path = metrics.path("acme", "alice")
    path.write_text('{"schema_version": 9}', encoding="utf-8")
    with pytest.raises(MetricError, match="schema_version 9"):
        await metrics.read("acme", "alice", "queue_depth")


def test_a_reported_metric_fires_its_condition_duty_once(
    small_workspace: Callable[..., Path], tmp_path: Path, model_server: ScriptedModelServer
) -> None:
    workspace = small_workspace(
        {"acme": ["alice"], "zero": ["zed"]}, {"tenants/acme/workers/alice/duties/drain.md": DUTY}
    )
    model_server.expect(Reply("drained"))
    keys = ApiKeyStore(workspace)
    acme = {"Authorization": f"Bearer {keys.create('acme')[1]}"}
    zero = {"Authorization": f"Bearer {keys.create('zero')[1]}"}
    (tmp_path / "configs").mkdir()
    env = scripted_env(model_server, GENWORKER_HEARTBEAT_ENABLED="true")
    with TestClient(create_app(load_settings(tmp_path / "configs", env, workspace=workspace))) as client:
        put = client.put("/api/v1/workers/alice/metrics/queue_depth", headers=acme, json={"value": 12})
        assert put.status_code == 200, put.text
        assert put.json()["value"] == 12
        assert (
            client.put("/api/v1/workers/alice/metrics/queue_depth", headers=zero, json={"value": 1}).status_code == 404
        )
        bad = client.put("/api/v1/workers/alice/metrics/inbox.pending", headers=acme, json={"value": 1})
        assert bad.status_code == 409 and bad.json()["error"]["code"] == "metric_builtin"  # exists, read-only
        assert client.put("/api/v1/workers/alice/metrics/q", headers=acme, json={"value": "x"}).status_code == 422
        deadline = time.monotonic() + 60
        while not (
            records := client.get("/api/v1/workers/alice/duties/drain/executions", headers=acme).json()["executions"]
        ):
            assert time.monotonic() < deadline, "the condition duty did not fire"
            time.sleep(0.1)  # the check runs every second in the runtime's scheduler
        assert [r["trigger_type"] for r in records] == ["condition"]
        runtime = client.app.state.runtime  # type: ignore[attr-defined]
        assert client.portal.call(runtime.services.duties.check, "acme", "alice", "drain", "deep") is None  # still true
        listed = client.get("/api/v1/workers/alice/metrics", headers=acme).json()
        assert listed["reported"]["queue_depth"]["value"] == 12 and listed["builtin"]["inbox.pending"] == 0
