""" "Test connection" of an email channel (POST /api/v1/channel/{adapter_id}/test) on the real app over
HTTP, against real mail servers on loopback (genworker.testing.mail: aiosmtpd with AUTH, pymap for
IMAP): the SMTP login a send makes and the IMAP login the poller makes, sending nothing."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from genworker.api.app import create_app
from genworker.auth import ApiKeyStore
from genworker.settings import load_settings
from genworker.testing.live_server import LiveServer
from genworker.testing.mail import SMTP_WARNINGS, ImapServer, SmtpServer

pytestmark = [pytest.mark.filterwarnings(w) for w in SMTP_WARNINGS]
USER, PASSWORD = "alice@acme.example", "mail-password-123"
PERSONA = (
    "---\nidentity:\n  name: Alice\n  worker_id: alice\n  role: assistant\nmode: personal\n"
    "channels:\n  - type: email\n    features:\n      smtp_security: plain\n      imap_security: plain\n"
    "---\nYou are Alice.\n"
)


def closed_port() -> int:
    with socket.socket() as probe:  # nothing listens on it once closed
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def check(
    tmp_path: Path, write_tree: Callable[[Mapping[str, str]], Path], email: dict[str, Any], tenant: str = "acme"
) -> dict[str, Any]:
    workspace = write_tree(
        {
            "tenants/acme/TENANT.json": '{"tenant_id": "acme", "name": "Acme", "default_worker": "alice"}',
            "tenants/acme/workers/alice/PERSONA.md": PERSONA,
            "tenants/acme/workers/alice/CHANNEL_CREDENTIALS.json": json.dumps({"email": email}),
            "tenants/globex/TENANT.json": '{"tenant_id": "globex", "name": "Globex"}',
        }
    )
    configs = tmp_path / "configs"
    configs.mkdir(exist_ok=True)
    env = {"GENWORKER_HOT_RELOAD": "false", "GENWORKER_HEARTBEAT_ENABLED": "false"}
    headers = {"Authorization": f"Bearer {ApiKeyStore(workspace).create(tenant)[1]}"}
    with LiveServer(create_app(load_settings(configs, env, workspace=workspace))) as app:
        response = httpx.post(f"{app.url}/api/v1/channel/acme~alice~email/test", headers=headers, timeout=60)
    if tenant != "acme":
        return {"status_code": response.status_code, **response.json()}
    assert response.status_code == 200, response.text
    assert PASSWORD not in response.text
    body: dict[str, Any] = response.json()
    return body


def account(smtp_port: int, imap_port: int | None, password: str = PASSWORD) -> dict[str, Any]:
    email: dict[str, Any] = {"worker_address": USER, "worker_password": password}
    email |= {"worker_smtp_host": "127.0.0.1", "worker_smtp_port": smtp_port}
    if imap_port is not None:
        email |= {"worker_imap_host": "127.0.0.1", "worker_imap_port": imap_port}
    return email


def test_good_credentials_log_in_to_smtp_and_imap_and_send_nothing(
    tmp_path: Path, write_tree: Callable[[Mapping[str, str]], Path]
) -> None:
    with SmtpServer(USER, PASSWORD) as smtp, ImapServer(USER, PASSWORD) as imap:
        body = check(tmp_path, write_tree, account(smtp.port, imap.port))
        assert smtp.logins == [USER] and smtp.sent == []
    assert (body["status"], body["check"], body["failure"]) == ("ok", "smtp + imap login", None)
    assert body["identity"] == {
        "address": USER,
        "smtp": f"127.0.0.1:{smtp.port} (plain)",
        "imap": f"127.0.0.1:{imap.port} (plain)",
    }


def test_a_wrong_password_is_refused_with_the_servers_words_and_no_secret(
    tmp_path: Path, write_tree: Callable[[Mapping[str, str]], Path]
) -> None:
    with SmtpServer(USER, "the-right-one") as smtp:
        body = check(tmp_path, write_tree, account(smtp.port, None))
    assert (body["status"], body["failure"]) == ("failed", "refused")
    assert body["error"].startswith("smtp: 535")


def test_an_imap_login_refused_after_smtp_passed_is_refused(
    tmp_path: Path, write_tree: Callable[[Mapping[str, str]], Path]
) -> None:
    with SmtpServer(USER, PASSWORD) as smtp, ImapServer(USER, "another-password") as imap:
        body = check(tmp_path, write_tree, account(smtp.port, imap.port))
    assert (body["status"], body["failure"]) == ("failed", "refused")
    assert body["error"].startswith("imap: ")


def test_an_unreachable_mail_server_says_so(tmp_path: Path, write_tree: Callable[[Mapping[str, str]], Path]) -> None:
    body = check(tmp_path, write_tree, account(closed_port(), None))
    assert (body["status"], body["failure"]) == ("failed", "unreachable")
    assert "ConnectionRefusedError" in body["error"]


def test_another_tenants_key_cannot_test_it(tmp_path: Path, write_tree: Callable[[Mapping[str, str]], Path]) -> None:
    body = check(tmp_path, write_tree, account(closed_port(), None), tenant="globex")
    assert body["status_code"] == 404 and body["error"]["code"] == "adapter_not_found"
