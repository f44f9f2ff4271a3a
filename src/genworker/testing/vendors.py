"""A local stand-in for the Slack, Feishu, WeCom and DingTalk HTTP APIs (one app answering each
vendor's documented paths and shapes), recording every request so tests check what really went
over the wire. Serve `Vendor().app()` with LiveServer and point VendorEndpoints (or the
GENWORKER_*_API_BASE settings) at it."""

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
                self.arrived.notify_all()
            status, payload, headers = answer or (200, vendor_answer(request.method, route, n), {})
            return JSONResponse(payload, status, headers)

        return app

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
    if path == "/chat.postMessage":
        return {"ok": True, "channel": "C-OPS", "ts": f"1700000000.{n:06d}"}
    if path == "/chat.update":
        return {"ok": True}
    return {"error": f"unknown path {method} {path}"}
