"""/health, /readiness and /api/v1/debug/runtime against a real app lifespan."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from genworker.api.app import create_app
from genworker.settings import load_settings

TOKEN = "test-admin-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@contextmanager
def serve(tmp_path: Path, workspace: Path, **env: str) -> Iterator[TestClient]:
    configs = tmp_path / "configs"
    configs.mkdir(exist_ok=True)
    environ = {"GENWORKER_HOT_RELOAD": "false", "GENWORKER_ADMIN_TOKEN": TOKEN, **env}
    settings = load_settings(configs, environ, workspace=workspace)
    with TestClient(create_app(settings)) as client:
        yield client


MODEL = {"GENWORKER_LLM_MODEL": "openai/test-model"}


def test_not_ready_without_a_model_and_says_which_file_to_edit(
    tmp_path: Path, small_workspace: Callable[..., Path]
) -> None:
    with serve(tmp_path, small_workspace()) as client:
        response = client.get("/readiness")
        assert response.status_code == 503
        reasons = response.json()["reasons"]
        assert [r["code"] for r in reasons] == ["model_not_configured"]
        assert "config_local.env" in reasons[0]["message"] and "litellm_local.json" in reasons[0]["message"]
        assert client.get("/health").json() == {"status": "ok", "reasons": []}


def test_ready_when_model_and_default_worker_are_there(tmp_path: Path, small_workspace: Callable[..., Path]) -> None:
    with serve(tmp_path, small_workspace(), **MODEL) as client:
        response = client.get("/readiness")
        assert response.status_code == 200, response.json()
        assert response.json()["status"] == "ready"


def test_litellm_file_counts_as_model_config_and_broken_file_is_named(
    tmp_path: Path, small_workspace: Callable[..., Path]
) -> None:
    workspace = small_workspace()
    (tmp_path / "configs").mkdir()
    litellm = tmp_path / "configs" / "litellm_local.json"
    litellm.write_text(
        '{"model_list": [{"model_name": "fast", "litellm_params": {"model": "openai/x"}}]}', encoding="utf-8"
    )
    with serve(tmp_path, workspace) as client:
        assert client.get("/readiness").status_code == 200
    litellm.write_text('{"model_list": [', encoding="utf-8")
    with serve(tmp_path, workspace) as client:
        response = client.get("/readiness")
        assert response.status_code == 503
        reason = response.json()["reasons"][0]
        assert reason["code"] == "model_config_invalid" and "litellm_local.json:1" in reason["message"]
        assert client.get("/api/v1/debug/runtime", headers=AUTH).json()["components"]["llm"]["status"] == "failed"


def test_failed_default_worker_blocks_readiness_and_shows_in_debug(
    tmp_path: Path, small_workspace: Callable[..., Path]
) -> None:
    broken = {"tenants/acme/workers/alice/PERSONA.md": "---\nidentity: [not, a, mapping]\n---\n"}
    with serve(tmp_path, small_workspace(extra=broken), **MODEL) as client:
        response = client.get("/readiness")
        assert response.status_code == 503
        reason = response.json()["reasons"][0]
        assert reason["code"] == "default_worker_unavailable" and "acme/alice failed to load" in reason["message"]
        debug = client.get("/api/v1/debug/runtime", headers=AUTH).json()
        alice = debug["workspace"]["tenants"]["acme"]["workers"]["alice"]
        assert alice["status"] == "failed"
        assert alice["errors"][0]["file"] == "tenants/acme/workers/alice/PERSONA.md"
        assert alice["errors"][0]["field"] == "identity"
        assert debug["workspace"]["tenants"]["acme"]["workers"]["bob"]["status"] == "loaded"
        assert debug["components"]["workspace"]["status"] == "degraded"


def test_one_tenant_down_is_a_warning_when_another_can_serve(
    tmp_path: Path, small_workspace: Callable[..., Path]
) -> None:
    workspace = small_workspace(
        {"acme": ["alice"], "globex": ["gina"]}, {"tenants/globex/workers/gina/PERSONA.md": "no front matter"}
    )
    with serve(tmp_path, workspace, **MODEL) as client:
        response = client.get("/readiness")
        assert response.status_code == 200
        assert [w["code"] for w in response.json()["warnings"]] == ["default_worker_unavailable"]
    with serve(tmp_path, workspace, GENWORKER_DEFAULT_TENANT="globex", **MODEL) as client:
        assert client.get("/readiness").status_code == 503


def test_missing_workspace_starts_but_is_not_ready(tmp_path: Path) -> None:
    with serve(tmp_path, tmp_path / "nowhere", **MODEL) as client:
        assert client.get("/health").status_code == 200
        response = client.get("/readiness")
        assert response.status_code == 503
        assert "workspace_failed" in [r["code"] for r in response.json()["reasons"]]


def test_health_degraded_when_governance_is_required_but_missing(
    tmp_path: Path, small_workspace: Callable[..., Path]
) -> None:
    # no workspace: policy snapshots cannot be recorded, so the governance stage is not ready
    with serve(tmp_path, tmp_path / "nowhere", WORKER_GOVERNANCE_REQUIRED="true", **MODEL) as client:
        response = client.get("/health")
        assert response.status_code == 200
        body = response.json()
        assert body["status"] == "degraded"
        assert body["reasons"][0]["code"] == "governance_dependency_missing"
    with serve(tmp_path, small_workspace(), WORKER_GOVERNANCE_REQUIRED="true", **MODEL) as client:
        assert client.get("/health").json() == {"status": "ok", "reasons": []}


def test_debug_runtime_reports_profile_components_and_backends(
    tmp_path: Path, small_workspace: Callable[..., Path]
) -> None:
    with serve(tmp_path, small_workspace(), **MODEL) as client:
        assert client.get("/api/v1/debug/runtime").status_code == 401
        assert client.get("/api/v1/debug/runtime", headers={"Authorization": "Bearer nope"}).status_code == 401
        debug = client.get("/api/v1/debug/runtime", headers=AUTH).json()
    assert debug["profile"] == "local"
    assert debug["default_workers"] == {"acme": "acme/alice"}
    assert set(debug["components"]) == {
        "workspace",
        "redis",
        "llm",
        "task_governance",
        "tools",
        "sandbox",
        "hot_reload",
        "langgraph",
    }
    assert debug["components"]["langgraph"]["details"] == {"checkpoints": "filesystem"}  # the extra is a dev one
    assert {"file_read", "bash_execute", "execute_code"} <= set(debug["components"]["tools"]["details"]["tools"])
    assert debug["components"]["redis"]["status"] == "disabled"
    assert debug["components"]["hot_reload"]["status"] == "disabled"
    assert debug["backends"]["workspace"] == "filesystem"
    assert debug["workspace"]["version"] == 1
    assert debug["readiness"]["ready"] is True


def test_the_shared_profile_does_not_start_without_redis(tmp_path: Path, small_workspace: Callable[..., Path]) -> None:
    """`genworker run` waits for Redis before it starts the runtime (test_redis_faults.py); a runtime
    started anyway refuses, naming Redis but not its password, rather than run on the single-process
    file backends with its own sessions, inbox and locks."""
    workspace = small_workspace()
    with (
        pytest.raises(RuntimeError, match="the shared profile needs Redis") as refused,
        serve(tmp_path, workspace, REDIS_URL="redis://:pw@127.0.0.1:1/0", **MODEL),
    ):
        pass
    assert "127.0.0.1:1" in str(refused.value) and "pw" not in str(refused.value)


def test_reachable_redis_is_ready_and_in_use(
    tmp_path: Path, small_workspace: Callable[..., Path], redis_url: str
) -> None:
    with serve(tmp_path, small_workspace(), REDIS_URL=redis_url, **MODEL) as client:
        debug = client.get("/api/v1/debug/runtime", headers=AUTH).json()
    assert debug["profile"] == "shared"
    assert debug["components"]["redis"]["status"] == "ready"
    assert debug["backends"]["shared_state"] == "redis"


@pytest.mark.parametrize("path", ["/api/v1/debug/runtime"])
def test_operator_endpoint_is_loopback_only_without_a_token(
    tmp_path: Path, small_workspace: Callable[..., Path], path: str
) -> None:
    configs = tmp_path / "configs"
    configs.mkdir()
    settings = load_settings(configs, {"GENWORKER_HOT_RELOAD": "false"}, workspace=small_workspace())
    with TestClient(create_app(settings), client=("10.0.0.8", 5000)) as client:
        assert client.get(path).status_code == 403
    with TestClient(create_app(settings), client=("127.0.0.1", 5000)) as client:
        assert client.get(path).status_code == 200


def test_model_list_litellm_rejects_is_not_ready_and_named(
    tmp_path: Path, small_workspace: Callable[..., Path]
) -> None:
    (tmp_path / "configs").mkdir()
    litellm = tmp_path / "configs" / "litellm_local.json"
    litellm.write_text(
        '{"model_list": [{"model_name": "fast", "litellm_params": {"model": "nosuchprovider/x"}}]}', encoding="utf-8"
    )
    with serve(tmp_path, small_workspace()) as client:
        response = client.get("/readiness")
        assert response.status_code == 503
        reason = response.json()["reasons"][0]
        assert reason["code"] == "model_config_invalid" and "LiteLLM rejected" in reason["message"]


def test_the_server_process_freezes_its_start_up_objects_out_of_the_collector(
    tmp_path: Path, small_workspace: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`genworker run` turns the collector off before it serves, and the application its background
    start loads is built with freeze_gc: once started, a full collection skips what start-up made,
    and the collector is on."""
    import asyncio
    import gc

    import uvicorn

    from genworker import cli
    from genworker.cli.startup import RuntimeStart, StartingApp

    configs = tmp_path / "configs"
    configs.mkdir()
    workspace = small_workspace()
    settings = load_settings(configs, {"GENWORKER_HOT_RELOAD": "false"}, workspace=workspace)
    served: list[bool] = []

    def run(server: uvicorn.Server, sockets: object = None) -> None:
        served.append(gc.isenabled())
        server.started = True

    monkeypatch.setattr(uvicorn.Server, "run", run)
    with socket.socket() as probe:  # `genworker run` listens before it starts: on a free port, not 8000
        probe.bind(("127.0.0.1", 0))
        monkeypatch.setenv("HTTP_PORT", str(probe.getsockname()[1]))
    monkeypatch.setattr(cli, "configure_logging", lambda *_: None)  # keep pytest's log handlers
    monkeypatch.setenv("GENWORKER_CONFIG_DIR", str(configs))
    monkeypatch.setenv("GENWORKER_HOT_RELOAD", "false")

    async def start_in_background() -> tuple[int, bool]:
        starting = StartingApp(wait_s=0)
        started = asyncio.Event()
        runtime = RuntimeStart(settings, starting, on_started=started.set)
        runtime.begin({})
        await started.wait()
        frozen, collector_on = gc.get_freeze_count(), gc.isenabled()
        await runtime.stop()
        return frozen, collector_on

    gc.unfreeze()
    try:
        assert cli.main(["run", "--workspace", str(workspace)]) == 0
        assert served == [False]  # off from before anything loads
        with TestClient(create_app(settings)):
            assert gc.get_freeze_count() == 0  # tests and embedders build it without
        gc.disable()
        frozen, collector_on = asyncio.run(start_in_background())  # what `genworker run` does once it listens
        assert frozen > 0 and collector_on
    finally:
        gc.unfreeze()
        gc.enable()


def test_start_up_loads_the_tokenizer_in_a_worker_thread_before_serving(
    tmp_path: Path, small_workspace: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Otherwise the first turn loads it on the event loop (every other request stalled meanwhile)."""
    import asyncio

    from genworker.runtime import assembly

    loaded: list[str] = []

    def load() -> None:
        try:
            asyncio.get_running_loop()
            loaded.append("on the event loop")
        except RuntimeError:
            loaded.append("in a worker thread")

    monkeypatch.setattr(assembly, "load_tokenizer", load)
    with serve(tmp_path, small_workspace(), **MODEL) as client:
        assert loaded == ["in a worker thread"]  # and done before the first request
        assert client.get("/readiness").status_code == 200
    assert loaded == ["in a worker thread"]
