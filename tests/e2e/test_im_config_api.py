"""The IM configuration and channel status API on the real app: API keys, tenant scoping,
write-only secrets, validated atomic writes of CHANNEL_CREDENTIALS.json, reloads, and the
status an adapter reports after a real delivery to a stand-in vendor API.
"""

from __future__ import annotations

import json
import stat
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient

from genworker.api.app import create_app
from genworker.auth import ApiKeyStore
from genworker.delivery.messages import OutboundMessage
from genworker.settings import load_settings
from genworker.testing.credentials import SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET
from genworker.testing.live_server import LiveServer

BOT_TOKEN, SIGNING = SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET


def persona(worker: str, channels: str) -> str:
    return (
        f"---\nidentity:\n  name: {worker.title()}\n  worker_id: {worker}\n  role: assistant\nmode: personal\n"
        f"channels:\n{channels}---\nYou are {worker}.\n"
    )


SLACK_AND_FEISHU = "  - type: slack\n    chat_ids: [C-OPS]\n  - type: feishu\n    chat_ids: [oc_team]\n"


@pytest.fixture
def workspace(write_tree: Callable[[Mapping[str, str]], Path]) -> Path:
    return write_tree(
        {
            "tenants/acme/TENANT.json": '{"tenant_id": "acme", "name": "Acme", "default_worker": "alice"}',
            "tenants/acme/workers/alice/PERSONA.md": persona("alice", SLACK_AND_FEISHU),
            "tenants/acme/workers/alice/CHANNEL_CREDENTIALS.json": json.dumps(
                {"slack": {"bot_token": BOT_TOKEN, "signing_secret": SIGNING}}
            ),
            "tenants/acme/workers/bob/PERSONA.md": persona("bob", "  - type: wecom\n"),
            "tenants/globex/TENANT.json": '{"tenant_id": "globex", "name": "Globex"}',
            "tenants/globex/workers/gina/PERSONA.md": persona("gina", "  - type: slack\n"),
        }
    )


def settings_env(**extra: str) -> dict[str, str]:
    return {"GENWORKER_HOT_RELOAD": "false", "GENWORKER_HEARTBEAT_ENABLED": "false", **extra}


@pytest.fixture
def server(tmp_path: Path, workspace: Path) -> Iterator[LiveServer]:
    configs = tmp_path / "configs"
    configs.mkdir()
    with LiveServer(create_app(load_settings(configs, settings_env(), workspace=workspace))) as live:
        yield live


def auth(workspace: Path, tenant: str, workers: list[str] | None = None) -> dict[str, str]:
    return {"Authorization": f"Bearer {ApiKeyStore(workspace).create(tenant, workers)[1]}"}


def call(server: LiveServer, method: str, path: str, headers: dict[str, str], **kw: Any) -> httpx.Response:
    return httpx.request(method, server.url + path, headers=headers, timeout=60, **kw)


def error(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    return str(response.json()["error"]["message"])


CONFIG = "/api/v1/workers/alice/im-config"


def test_secrets_are_never_echoed(server: LiveServer, workspace: Path) -> None:
    response = call(server, "GET", CONFIG, auth(workspace, "acme"))
    assert response.status_code == 200, response.text
    body = response.json()
    assert [c["adapter_id"] for c in body["channels"]] == ["acme~alice~slack", "acme~alice~feishu"]
    assert body["channels"][0]["reply_mode"] == "complete"
    assert body["credentials"] == {
        "slack": {"bot_token": "set", "signing_secret": "set", "app_token": "unset", "team_id": None},
    }
    assert BOT_TOKEN not in response.text and SIGNING not in response.text


def test_put_merges_validates_and_writes_atomically(server: LiveServer, workspace: Path) -> None:
    acme = auth(workspace, "acme")
    update = {
        "credentials": {"feishu": {"app_id": "cli_1", "app_secret": "feishu-secret"}, "slack": {"app_token": "xapp-1"}}
    }
    response = call(server, "PUT", CONFIG, acme, json=update)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["credentials"]["feishu"] == {
        "app_id": "set",
        "app_secret": "set",
        "verification_token": "unset",
        "encrypt_key": "unset",
    }
    assert body["credentials"]["slack"]["bot_token"] == "set" and body["credentials"]["slack"]["app_token"] == "set"
    assert body["reload"]["ok"] is True and "feishu-secret" not in response.text
    path = workspace / "tenants/acme/workers/alice/CHANNEL_CREDENTIALS.json"
    stored = json.loads(path.read_text(encoding="utf-8"))
    assert stored["schema_version"] == 1
    assert stored["slack"] == {"bot_token": BOT_TOKEN, "signing_secret": SIGNING, "app_token": "xapp-1"}
    assert stored["feishu"] == {"app_id": "cli_1", "app_secret": "feishu-secret"}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    status = call(server, "GET", CONFIG + "/status", acme).json()["channels"]
    assert [(c["adapter_id"], c["configured"], c["status"]) for c in status] == [
        ("acme~alice~slack", True, "connected"),
        ("acme~alice~feishu", True, "connected"),
    ]
    removed = call(server, "PUT", CONFIG, acme, json={"credentials": {"feishu": None, "slack": {"app_token": None}}})
    assert removed.status_code == 200, removed.text
    assert removed.json()["credentials"] == {
        "slack": {"bot_token": "set", "signing_secret": "set", "app_token": "unset", "team_id": None}
    }


@pytest.mark.parametrize(
    ("body", "status", "names"),
    [
        ({"credentials": {"telegram": {"token": "x"}}}, 422, "body.credentials.telegram: Extra inputs"),
        ({"credentials": {"slack": {"bot_tokn": "x"}}}, 422, "body.credentials.slack.bot_tokn: Extra inputs"),
        # well formed, but with what is stored the platform would lack a required field
        ({"credentials": {"feishu": {"app_id": "cli_only"}}}, 409, "credentials.feishu.app_secret"),
        ({"credentials": {"email": {"worker_address": "w@x", "worker_smtp_port": "many"}}}, 422, "worker_smtp_port"),
        ({"credentials": {"slack": "xoxb"}}, 422, "body.credentials.slack: Input should be"),
        ({"creds": {}}, 422, "body.creds: Extra inputs"),
    ],
)
def test_a_bad_body_names_the_field_and_loses_nothing(
    server: LiveServer, workspace: Path, body: dict[str, Any], status: int, names: str
) -> None:
    path = workspace / "tenants/acme/workers/alice/CHANNEL_CREDENTIALS.json"
    before = path.read_bytes()
    message = error(call(server, "PUT", CONFIG, auth(workspace, "acme"), json=body), status)
    assert names in message
    assert "cli_only" not in message and "many" not in message  # values are never echoed
    assert path.read_bytes() == before


def test_malformed_json_is_refused(server: LiveServer, workspace: Path) -> None:
    path = workspace / "tenants/acme/workers/alice/CHANNEL_CREDENTIALS.json"
    before = path.read_bytes()
    headers = {**auth(workspace, "acme"), "Content-Type": "application/json"}
    assert call(server, "PUT", CONFIG, headers, content=b'{"credentials": ').status_code == 422
    assert path.read_bytes() == before


def test_tenants_and_worker_scoped_keys_see_only_their_own(server: LiveServer, workspace: Path) -> None:
    globex, bob_only = auth(workspace, "globex"), auth(workspace, "acme", ["bob"])
    for headers in (globex, bob_only):
        assert call(server, "GET", CONFIG, headers).status_code == 404
        assert call(server, "PUT", CONFIG, headers, json={"credentials": {}}).status_code == 404
        assert call(server, "POST", CONFIG + "/reload", headers).status_code == 404
        assert call(server, "GET", "/api/v1/channel/acme~alice~slack/status", headers).status_code == 404
    assert call(server, "GET", "/api/v1/workers/acme/alice/im-config", globex).status_code == 404
    listing = call(server, "GET", "/api/v1/channel", globex).json()
    assert [a["adapter_id"] for a in listing["adapters"]] == ["globex~gina~slack"]
    assert listing["adapters"][0]["status"] == "unconfigured"
    scoped = call(server, "GET", "/api/v1/channel", bob_only).json()
    assert [a["adapter_id"] for a in scoped["adapters"]] == ["acme~bob~wecom"]
    assert call(server, "GET", "/api/v1/channel/globex~nobody~slack/status", globex).status_code == 404
    assert call(server, "GET", "/api/v1/channel/not-an-adapter/status", globex).status_code == 422  # malformed
    assert call(server, "GET", "/api/v1/channel", {}).status_code == 401


def test_reload_resets_only_that_workers_clients(server: LiveServer, workspace: Path) -> None:
    response = call(server, "POST", CONFIG + "/reload", auth(workspace, "acme"))
    assert response.status_code == 200, response.text
    assert response.json() == {
        "worker_id": "alice",
        "ok": True,
        "kept_last_good": False,
        "errors": [],
        "clients_reset": [],
    }


def test_adapter_status_follows_real_deliveries(tmp_path: Path, workspace: Path) -> None:
    """A Slack stand-in that first fails, then accepts; the status the API reports follows."""
    answers = [JSONResponse({"ok": False, "error": "not_in_channel"}), JSONResponse({"ok": True, "ts": "1.2"})]
    vendor = FastAPI()

    @vendor.post("/chat.postMessage")
    async def post_message() -> JSONResponse:
        return answers.pop(0)

    configs = tmp_path / "configs"
    configs.mkdir()
    acme = auth(workspace, "acme")
    with LiveServer(vendor) as slack:
        env = settings_env(GENWORKER_SLACK_API_BASE=slack.url)
        with TestClient(create_app(load_settings(configs, env, workspace=workspace))) as client:
            delivery = client.app.state.runtime.services.delivery  # type: ignore[attr-defined]
            failed = client.portal.call(lambda: delivery.send("acme", "alice", OutboundMessage("hi"), platform="slack"))
            assert not failed.ok and "not_in_channel" in (failed.error or "")
            status = client.get("/api/v1/channel/acme~alice~slack/status", headers=acme).json()
            assert status["status"] == "degraded" and status["last_delivery"] == "failed"
            assert "not_in_channel" in status["last_error"] and status["failures"] == 1
            sent = client.portal.call(lambda: delivery.send("acme", "alice", OutboundMessage("hi"), platform="slack"))
            assert sent.ok
            status = client.get("/api/v1/channel/acme~alice~slack/status", headers=acme).json()
            assert (status["status"], status["last_delivery"], status["deliveries"]) == ("connected", "ok", 1)
            reset = client.post(CONFIG + "/reload", headers=acme).json()
            assert reset["clients_reset"] == ["acme~alice~slack"]
