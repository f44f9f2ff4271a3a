"""require_principal on the real app: 401 shapes, tenant from the key, worker-bound keys, and
keys created or revoked by the CLI in another process honoured without a restart."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from fastapi import Depends, FastAPI
from fastapi.testclient import TestClient
from pydantic import BaseModel

from genworker.api.app import create_app
from genworker.api.auth import principal_worker, require_principal
from genworker.api.errors import install_error_handlers
from genworker.auth import ApiKeyStore, Principal
from genworker.settings import load_settings

GENWORKER = Path(sys.executable).with_name("genworker")
TENANTS = {"acme": ["alice", "bob"], "globex": ["carol"]}


class ChatBody(BaseModel):
    model: str
    tenant_id: str | None = None


def chat(body: ChatBody, principal: Annotated[Principal, Depends(require_principal)]) -> dict[str, str]:
    tenant_id, worker_id = principal_worker(principal, body.model)
    return {"tenant": tenant_id, "worker": worker_id, "key_id": principal.key_id}


@pytest.fixture
def workspace(small_workspace: Callable[..., Path]) -> Path:
    return small_workspace(TENANTS)


@pytest.fixture
def client(tmp_path: Path, workspace: Path) -> Iterator[TestClient]:
    configs = tmp_path / "configs"
    configs.mkdir()
    settings = load_settings(configs, {"GENWORKER_HOT_RELOAD": "false"}, workspace=workspace)
    app = create_app(settings)
    app.add_api_route("/test/chat", chat, methods=["POST"])
    with TestClient(app) as client:
        yield client


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GENWORKER_CONFIG_DIR": str(tmp_path / "configs")}
    return subprocess.run(
        [str(GENWORKER), "keys", *args], capture_output=True, text=True, encoding="utf-8", env=env, timeout=60
    )


def assert_unauthorized(response: Any, fragment: str) -> None:
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    error = response.json()["error"]
    assert error["code"] == "unauthorized" and fragment in error["message"]
    assert set(response.json()) == {"error"}


def test_missing_malformed_and_invalid_keys_are_401(client: TestClient, workspace: Path) -> None:
    body = {"model": "alice"}
    assert_unauthorized(client.post("/test/chat", json=body), "missing API key")
    assert_unauthorized(client.post("/test/chat", json=body, headers={"Authorization": "Basic abc"}), "malformed")
    assert_unauthorized(client.post("/test/chat", json=body, headers={"Authorization": "Bearer"}), "malformed")
    assert_unauthorized(client.post("/test/chat", json=body, headers=bearer("gwk_nope")), "invalid or revoked")
    _, plaintext = ApiKeyStore(workspace).create("acme")
    assert_unauthorized(client.post("/test/chat", json=body, headers=bearer(plaintext + "x")), "invalid or revoked")
    response = client.post("/test/chat", json=body, headers={"Authorization": f"bearer   {plaintext}"})
    assert response.status_code == 200 and response.json()["tenant"] == "acme"


def test_cli_keys_in_another_process_apply_to_the_running_app(
    client: TestClient, tmp_path: Path, workspace: Path
) -> None:
    created = cli(tmp_path, "create", "--tenant", "acme", "--workspace", str(workspace))
    assert created.returncode == 0, created.stderr
    plaintext = created.stdout.splitlines()[-1]
    key_id = plaintext.split("_")[1]
    response = client.post("/test/chat", json={"model": "alice"}, headers=bearer(plaintext))
    assert response.status_code == 200 and response.json()["key_id"] == key_id

    revoked = cli(tmp_path, "revoke", "--tenant", "acme", "--workspace", str(workspace), key_id)
    assert revoked.returncode == 0, revoked.stderr
    assert_unauthorized(client.post("/test/chat", json={"model": "alice"}, headers=bearer(plaintext)), "revoked")


def test_the_tenant_comes_from_the_key_never_the_request(client: TestClient, workspace: Path) -> None:
    _, plaintext = ApiKeyStore(workspace).create("acme")
    headers = {**bearer(plaintext), "X-Tenant-Id": "globex", "X-Genworker-Tenant": "globex"}
    response = client.post("/test/chat", json={"model": "alice", "tenant_id": "globex"}, headers=headers)
    assert response.json()["tenant"] == "acme"
    assert client.post("/test/chat", json={"model": "acme/bob"}, headers=headers).json()["worker"] == "bob"
    for model in ("globex/carol", "nope/alice", "../alice", "acme/../x", ""):
        response = client.post("/test/chat", json={"model": model}, headers=headers)
        assert response.status_code == 404, model
        assert response.json()["error"]["code"] == "worker_not_found"


def test_worker_bound_key_reaches_only_its_workers(client: TestClient, workspace: Path) -> None:
    _, plaintext = ApiKeyStore(workspace).create("acme", ["alice"])
    ok = client.post("/test/chat", json={"model": "acme/alice"}, headers=bearer(plaintext))
    assert ok.status_code == 200 and ok.json() == {"tenant": "acme", "worker": "alice", "key_id": plaintext[4:16]}
    denied = client.post("/test/chat", json={"model": "bob"}, headers=bearer(plaintext))
    # a worker outside the key answers exactly like one that does not exist
    missing = client.post("/test/chat", json={"model": "zed"}, headers=bearer(plaintext))
    assert denied.status_code == missing.status_code == 404
    assert denied.json()["error"]["code"] == missing.json()["error"]["code"] == "worker_not_found"


def test_the_store_is_created_once_per_app_from_the_runtime_workspace(client: TestClient, workspace: Path) -> None:
    _, plaintext = ApiKeyStore(workspace).create("globex")
    assert client.post("/test/chat", json={"model": "carol"}, headers=bearer(plaintext)).status_code == 200
    store = client.app.state.api_keys  # type: ignore[attr-defined]
    assert isinstance(store, ApiKeyStore) and store.root == workspace.resolve()
    client.post("/test/chat", json={"model": "carol"}, headers=bearer(plaintext))
    assert client.app.state.api_keys is store  # type: ignore[attr-defined]


def test_a_bare_app_can_bring_its_own_store(workspace: Path) -> None:
    app = FastAPI()
    app.state.runtime = app.state.api_keys = None  # what create_app declares
    install_error_handlers(app)
    app.add_api_route("/test/chat", chat, methods=["POST"])
    with TestClient(app) as client:
        response = client.post("/test/chat", json={"model": "alice"}, headers=bearer(f"gwk_{'0' * 12}_{'s' * 43}"))
        assert response.status_code == 503  # no runtime and no store yet
        assert response.json()["error"]["code"] == "unavailable"
        app.state.api_keys = ApiKeyStore(workspace)
        _, plaintext = app.state.api_keys.create("acme", ["bob"])
        assert client.post("/test/chat", json={"model": "bob"}, headers=bearer(plaintext)).status_code == 200
