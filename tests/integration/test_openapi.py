"""Every HTTP API is in the OpenAPI schema, request bodies with examples."""

from __future__ import annotations

from pathlib import Path

from genworker.api.app import create_app
from genworker.settings import load_settings


def test_openapi_lists_every_route_with_examples(tmp_path: Path) -> None:
    spec = create_app(load_settings(tmp_path, {}, workspace=tmp_path)).openapi()
    expected = {
        "/api/v1/chat/stream",
        "/api/v1/worker/task/stream",
        "/api/v1/chat/{thread_id}/tasks",
        "/api/v1/chat/{thread_id}/queue",
        "/v1/chat/completions",
        "/v1/models",
        "/api/v1/workers/{worker_id}/runs",
        "/api/v1/workers/{worker_id}/runs/{run_id}",
        "/api/v1/worker/ops/overview",
        "/api/v1/worker/ops/reload",
        "/health",
        "/readiness",
    }
    assert expected <= set(spec["paths"])
    schemas = spec["components"]["schemas"]
    for name in ("ChatRequest", "TaskRequest", "CompletionRequest", "RunDutyBody"):
        assert any("examples" in field for field in schemas[name]["properties"].values()), name
    # an inferred action's evidence for the Policy Gate: on the task and manual duty routes, not on chat
    for name in ("TaskRequest", "RunDutyBody"):
        assert schemas[name]["properties"]["evidence"]["examples"][0]["confidence"] == 0.97, name
    assert set(schemas["EvidenceBody"]["properties"]) == {
        "confidence", "evidence_sources", "sources", "requested_actions", "requested_effects", "planned_effects"
    }  # fmt: skip
    assert "evidence" not in schemas["ChatRequest"]["properties"]
