"""CORS: off by default; GENWORKER_CORS_ORIGINS allows exactly the origins it lists."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from genworker.api.app import create_app
from genworker.settings import SettingsError, load_settings

ALLOWED = "https://a.example"


def app_client(tmp_path: Path, workspace: Path, **env: str) -> TestClient:
    settings = load_settings(tmp_path, {"GENWORKER_HOT_RELOAD": "false", **env}, workspace=workspace)
    return TestClient(create_app(settings))


def preflight(client: TestClient, origin: str) -> dict[str, str]:
    headers = {
        "Origin": origin,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization",
    }
    return dict(client.options("/health", headers=headers).headers)


def test_cors_is_off_by_default(tmp_path: Path, small_workspace: Callable[..., Path]) -> None:
    with app_client(tmp_path, small_workspace()) as client:
        response = client.get("/health", headers={"Origin": ALLOWED})
        assert "access-control-allow-origin" not in response.headers
        assert "access-control-allow-origin" not in preflight(client, ALLOWED)


def test_listed_origins_only(tmp_path: Path, small_workspace: Callable[..., Path]) -> None:
    env = {"GENWORKER_CORS_ORIGINS": f" {ALLOWED}/ , https://b.example:8443"}
    with app_client(tmp_path, small_workspace(), **env) as client:
        for origin in (ALLOWED, "https://b.example:8443"):
            response = client.get("/health", headers={"Origin": origin})
            assert response.headers["access-control-allow-origin"] == origin
            allowed = preflight(client, origin)
            assert allowed["access-control-allow-origin"] == origin
            assert "authorization" in allowed["access-control-allow-headers"].lower()
        for origin in ("https://evil.example", "http://a.example", "https://b.example"):
            assert "access-control-allow-origin" not in client.get("/health", headers={"Origin": origin}).headers
            assert "access-control-allow-origin" not in preflight(client, origin)
        # error responses carry the header too, so a browser app can read the error
        denied = client.get("/api/v1/debug/runtime", headers={"Origin": ALLOWED, "Authorization": "Bearer x"})
        assert denied.status_code in (401, 403) and denied.headers["access-control-allow-origin"] == ALLOWED


def test_settings_parse_and_reject_origins(tmp_path: Path) -> None:
    assert load_settings(tmp_path, {}).cors_origins == ()
    parsed = load_settings(tmp_path, {"GENWORKER_CORS_ORIGINS": "https://a.example,http://localhost:3000,"})
    assert parsed.cors_origins == ("https://a.example", "http://localhost:3000")
    for bad in ("*", "a.example", "https://a.example/app", "ftp://a.example"):
        with pytest.raises(SettingsError, match="GENWORKER_CORS_ORIGINS"):
            load_settings(tmp_path, {"GENWORKER_CORS_ORIGINS": bad})
