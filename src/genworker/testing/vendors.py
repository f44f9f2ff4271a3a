"""A local stand-in for the Slack, Feishu, WeCom and DingTalk HTTP APIs (one app answering each
vendor's documented paths and shapes), recording every request so tests check what really went
over the wire. Serve `Vendor().app()` with LiveServer and point VendorEndpoints (or the
GENWORKER_*_API_BASE settings) at it. With `accounts`, the auth and token calls of a platform listed
there accept only those credentials and refuse others as the vendor does."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

__all__ = ["Recorded", "Vendor", "vendor_answer"]


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any


@dataclass
class Vendor:
    """The stand-in vendor API. `script[path]` answers come first; then, for a path in `down`, that
    status (an outage, until the test removes the path); then each path's default (`vendor_answer`)."""

    requests: list[Recorded] = field(default_factory=list)
    script: dict[str, list[tuple[int, dict[str, Any], dict[str, str]]]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    down: dict[str, int] = field(default_factory=dict)  # path: status answered while the vendor is down
    accounts: dict[str, dict[str, str]] = field(default_factory=dict)  # platform: the credentials it accepts
    arrived: threading.Condition = field(init=False)

    def __post_init__(self) -> None:
        self.arrived = threading.Condition(self.lock)

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.api_route("/{path:path}", methods=["GET", "POST", "PATCH", "PUT"])
        async def anything(path: str, request: Request) -> JSONResponse:
            raw = await request.body()
            body = json.loads(raw) if raw else None  # a malformed body fails the test here
            if raw:
                assert request.headers["content-type"].startswith("application/json")
            route = "/" + path
            with self.lock:
                self.requests.append(
                    Recorded(request.method, route, dict(request.query_params), dict(request.headers), body)
                )
                scripted = self.script.get(route)
                answer = scripted.pop(0) if scripted else None
                n = len(self.requests)
                if answer is None and route in self.down:
                    answer = (self.down[route], {"error": "service unavailable"}, {})
                if answer is None:
                    answer = self._refusal(self.requests[-1])
                self.arrived.notify_all()
            status, payload, headers = answer or (200, vendor_answer(request.method, route, n), {})
            return JSONResponse(payload, status, headers)

        return app

    def _refusal(self, call: Recorded) -> tuple[int, dict[str, Any], dict[str, str]] | None:
        """The vendor's refusal of an auth or token call with credentials other than `accounts`."""
        platform, checks = _AUTH_CALLS.get(call.path, ("", ()))
        account = self.accounts.get(platform)
        if account is None:
            return None
        bearer = call.headers.get("authorization", "").removeprefix("Bearer ")
        given = {"bearer": bearer, **call.query, **(call.body if isinstance(call.body, dict) else {})}
        for sent, stored, (status, refusal) in checks:
            if given.get(sent) != account[stored]:
                return status, refusal, {}
        return None

    def wait_for(self, path: str, count: int, timeout: float = 60) -> list[Recorded]:
        """Block until `path` has been called `count` times; those calls."""
        with self.arrived:
            reached = self.arrived.wait_for(lambda: len([r for r in self.requests if r.path == path]) >= count, timeout)
            found = [r for r in self.requests if r.path == path]
        assert reached, f"{path} called {len(found)} times within {timeout} s, not {count}"
        return found

    def calls(self, path: str) -> list[Recorded]:
        with self.lock:
            return [r for r in self.requests if r.path == path]


# auth or token path -> (platform, [(field sent, field of `accounts`, the vendor's refusal)]), checked in order
_AUTH_CALLS: dict[str, tuple[str, tuple[tuple[str, str, tuple[int, dict[str, Any]]], ...]]] = {
    "/auth.test": ("slack", (("bearer", "bot_token", (200, {"ok": False, "error": "invalid_auth"})),)),
    "/open-apis/auth/v3/tenant_access_token/internal": (
        "feishu",
        (
            ("app_id", "app_id", (400, {"code": 10003, "msg": "invalid param"})),
            ("app_secret", "app_secret", (400, {"code": 10014, "msg": "app secret invalid"})),
        ),
    ),
    "/cgi-bin/gettoken": (
        "wecom",
        (
            ("corpid", "corpid", (200, {"errcode": 40013, "errmsg": "invalid corpid"})),
            ("corpsecret", "corpsecret", (200, {"errcode": 40001, "errmsg": "invalid credential"})),
        ),
    ),
    "/v1.0/oauth2/accessToken": (
        "dingtalk",
        (
            ("appKey", "app_key", (400, {"code": "invalidClientIdOrSecret", "message": "invalid appKey"})),
            ("appSecret", "app_secret", (400, {"code": "invalidClientIdOrSecret", "message": "invalid appSecret"})),
        ),
    ),
}


def vendor_answer(method: str, path: str, n: int) -> dict[str, Any]:
    """What each vendor answers by default to the `n`-th request: success in its documented shape."""
    if path == "/open-apis/auth/v3/tenant_access_token/internal":
        return {"code": 0, "msg": "ok", "tenant_access_token": f"t-{n}", "expire": 7200}
    if path.startswith("/open-apis/im/v1/messages"):
        return {"code": 0, "msg": "success", "data": {"message_id": f"om_{n}"}}
    if path == "/cgi-bin/gettoken":
        return {"errcode": 0, "errmsg": "ok", "access_token": f"w-{n}", "expires_in": 7200}
    if path.startswith("/cgi-bin/"):
        return {"errcode": 0, "errmsg": "ok", "msgid": f"msg-{n}"}
    if path == "/v1.0/oauth2/accessToken":
        return {"accessToken": f"d-{n}", "expireIn": 7200}
    if path.startswith("/v1.0/robot/"):
        return {"processQueryKey": f"q-{n}"}
    if path == "/robot/sendBySession":
        return {"errcode": 0, "errmsg": "ok"}
    if path == "/auth.test":
        return {
            "ok": True,
            "url": "https://acme.slack.com/",
            "team": "Acme",
            "team_id": "T0001",
            "user": "genworker",
            "user_id": "U0001",
            "bot_id": "B0001",
        }
    if path == "/chat.postMessage":
        return {"ok": True, "channel": "C-OPS", "ts": f"1700000000.{n:06d}"}
    if path == "/chat.update":
        return {"ok": True}
    return {"error": f"unknown path {method} {path}"}
