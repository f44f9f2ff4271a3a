"""The one error format: HTTPException, ApiError, validation errors and unhandled exceptions."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI, HTTPException
from fastapi.testclient import TestClient
from pydantic import BaseModel

from genworker.api.app import create_app
from genworker.api.errors import ApiError, install_error_handlers
from genworker.ids import validate_id
from genworker.settings import load_settings


class Item(BaseModel):
    name: str
    count: int


def build() -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)

    @app.get("/boom")
    def boom() -> None:
        raise RuntimeError("db password is hunter2")

    @app.get("/boom-async")
    async def boom_async() -> None:
        raise KeyError("internal detail")

    @app.get("/conflict")
    def conflict() -> None:
        raise ApiError(409, "conflict", "the task is already running", {"Retry-After": "3"})

    @app.get("/forbidden")
    def forbidden() -> None:
        raise HTTPException(403, "not for you")

    @app.get("/teapot")
    def teapot() -> None:
        raise HTTPException(418, {"why": "short and stout"})

    @app.post("/items")
    def items(item: Item, limit: int = 10) -> dict[str, int]:
        return {"count": item.count, "limit": limit}

    @app.get("/things/{thing_id}")
    def thing(thing_id: str) -> str:
        return validate_id(thing_id, "thing id")

    return app


@pytest.fixture
def client() -> Iterator[TestClient]:
    with TestClient(build()) as client:
        yield client


def test_unhandled_exception_is_a_500_with_an_error_id_and_no_trace(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    for path in ("/boom", "/boom-async"):
        caplog.clear()
        with caplog.at_level(logging.ERROR, "genworker.api"):
            response = client.get(path)
        assert response.status_code == 500
        error = response.json()["error"]
        assert error["code"] == "internal_error" and error["error_id"].startswith("err_")
        assert error["error_id"] in error["message"]
        for leak in ("Traceback", "hunter2", "internal detail", "RuntimeError", "KeyError", ".py"):
            assert leak not in response.text
        [record] = caplog.records
        assert error["error_id"] in record.getMessage() and record.exc_info is not None


def test_api_error_keeps_its_code_and_headers(client: TestClient) -> None:
    response = client.get("/conflict")
    assert response.status_code == 409 and response.headers["retry-after"] == "3"
    assert response.json() == {"error": {"code": "conflict", "message": "the task is already running"}}


def test_http_exceptions_get_stable_codes(client: TestClient) -> None:
    assert client.get("/forbidden").json() == {"error": {"code": "forbidden", "message": "not for you"}}
    teapot = client.get("/teapot")
    assert teapot.status_code == 418 and teapot.json()["error"]["code"] == "client_error"
    missing = client.get("/nowhere")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    wrong = client.delete("/items")
    assert wrong.status_code == 405 and wrong.json()["error"]["code"] == "method_not_allowed"
    assert wrong.headers["allow"] == "POST"


def test_an_invalid_id_a_route_did_not_check_is_a_422_not_a_500(client: TestClient) -> None:
    response = client.get("/things/-rf")
    assert response.status_code == 422
    assert response.json()["error"] == {
        "code": "invalid_id",
        "message": "thing id '-rf' is not a valid id: use 1-128 letters, digits, '_', '-' or '.', "
        "starting with a letter or digit, with no '..'",
    }


def test_validation_error_names_the_fields(client: TestClient) -> None:
    response = client.post("/items?limit=many", json={"count": "x", "secret": "s3cr3t-value"})
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    locations = {tuple(f["loc"]) for f in error["fields"]}
    assert locations == {("body", "name"), ("body", "count"), ("query", "limit")}
    assert "body.name: Field required" in error["message"]
    assert "s3cr3t-value" not in response.text  # inputs are not echoed
    bad_json = client.post("/items", content=b"{nope", headers={"content-type": "application/json"})
    assert bad_json.status_code == 422 and bad_json.json()["error"]["code"] == "validation_error"


def test_the_real_app_uses_the_format(tmp_path: Path, small_workspace: Callable[..., Path]) -> None:
    env = {"GENWORKER_HOT_RELOAD": "false", "GENWORKER_ADMIN_TOKEN": "t"}
    settings = load_settings(tmp_path, env, workspace=small_workspace())
    with TestClient(create_app(settings)) as client:
        assert client.get("/nowhere").json()["error"]["code"] == "not_found"
        assert client.post("/health").json()["error"]["code"] == "method_not_allowed"
        denied = client.get("/api/v1/debug/runtime")
        assert denied.status_code == 401 and denied.json()["error"]["code"] == "unauthorized"
        # Allow: every method the schema gives the path (separate routes), from its most literal template
        assert client.options("/api/v1/workers/alice/feedback").headers["allow"] == "GET, HEAD, POST"
        assert client.options("/api/v1/workers/alice/goals/g1").headers["allow"] == "GET, HEAD, PATCH"
        assert client.get("/api/v1/workers/alice/briefs/generate").status_code != 405  # GET …/briefs/{brief_id}
        assert client.options("/api/v1/workers/alice/briefs/generate").headers["allow"] == "POST"
