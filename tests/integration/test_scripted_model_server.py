"""The scripted model server the e2e tests lean on: a step's `check` must be able to fail the test.

It is a real HTTP server; the requests here are plain httpx posts, as LiteLLM would send them.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from genworker.testing import Reply, ScriptedModelServer


def _ask(server: ScriptedModelServer, text: str) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": text}]}
    response = httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=30)
    assert response.status_code == 200


def _mentions_hello(body: dict[str, Any]) -> bool:
    return "hello" in str(body["messages"])


@pytest.mark.parametrize(
    ("text", "passes"),
    [("hello there", True), ("goodbye", False)],
)
def test_a_check_that_returns_false_fails_at_assert_done(text: str, passes: bool) -> None:
    with ScriptedModelServer() as server:
        server.expect(Reply("ok", check=_mentions_hello))
        _ask(server, text)
        if passes:
            server.assert_done()
        else:
            with pytest.raises(AssertionError, match="_mentions_hello was false"):
                server.assert_done()


def test_a_check_that_raises_fails_at_assert_done() -> None:
    def refuse(body: dict[str, Any]) -> None:
        raise AssertionError("not this request")

    with ScriptedModelServer() as server:
        server.expect(Reply("ok", check=refuse))
        _ask(server, "hi")
        with pytest.raises(AssertionError, match="not this request"):
            server.assert_done()
