"""The dashboard's undelivered messages in a real browser (Playwright driving Chromium, as in
test_dashboard_browser.py, whose fixtures and helpers this uses).

Alice's send_message to Dana (a real tool call: LiteLLM to the scripted model) is refused by the Slack
stand-in; with no retry horizon the outbox gives it up at once. The page lists it with a Resend button;
once Slack takes messages again, Resend from the keyboard delivers it, once, and the block empties.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2 as httpx

# the fixtures `browser` and `page` (imported as `x as x`: used by pytest, not by name here)
from tests.e2e.test_dashboard_browser import A11Y_PROBLEMS, block, log_in, open_worker, shot, tab_to
from tests.e2e.test_dashboard_browser import browser as browser
from tests.e2e.test_dashboard_browser import page as page
from tests.integration.test_outbox_api import CREDENTIALS, PERSONA  # alice, whose contact Dana is on Slack

from genworker.api.app import create_app
from genworker.auth import ApiKeyStore
from genworker.delivery.redelivery import RedeliveryPolicy
from genworker.settings import load_settings
from genworker.testing import Reply, ScriptedModelServer, ToolCallReply, scripted_env
from genworker.testing.live_server import LiveServer
from genworker.testing.vendors import Vendor

POST = "/chat.postMessage"


def test_a_given_up_message_is_resent_from_the_page(
    tmp_path: Path, small_workspace: Callable[..., Path], model_server: ScriptedModelServer, page: Any
) -> None:
    from playwright.sync_api import expect

    workspace = small_workspace(
        {"acme": ["alice"]},
        {
            "tenants/acme/workers/alice/PERSONA.md": PERSONA,
            "tenants/acme/workers/alice/CHANNEL_CREDENTIALS.json": json.dumps(CREDENTIALS),
        },
    )
    key = ApiKeyStore(workspace).create("acme", label="outbox browser test")[1]
    call = ToolCallReply("send_message", {"to": "dana", "text": "The deploy is done."}, "c1")
    model_server.expect(Reply(tool_calls=(call,)), Reply("I could not reach Dana."))
    vendor = Vendor(down={POST: 403})  # Slack refuses the bot's messages
    (tmp_path / "configs").mkdir()
    with LiveServer(vendor.app()) as slack:
        env = scripted_env(model_server, GENWORKER_SLACK_API_BASE=slack.url)
        app = create_app(load_settings(tmp_path / "configs", env, workspace=workspace))
        with LiveServer(app) as server:
            app.state.runtime.services.outbox.policy = RedeliveryPolicy(
                horizon_s=0
            )  # a failed send is given up at once
            chat = {"worker_id": "alice", "message": "Tell Dana the deploy is done."}
            answer = httpx.post(
                server.url + "/api/v1/chat/stream", json=chat, headers={"Authorization": f"Bearer {key}"}, timeout=60
            )
            assert answer.status_code == 200 and "RUN_FINISHED" in answer.text, answer.text

            log_in(page, server.url, key)
            open_worker(page, "alice")
            outbox = block(page, "outbox")
            expect(outbox).to_contain_text("To Dana Lee (slack)")
            expect(outbox).to_contain_text("Given up")
            expect(outbox).to_contain_text("The deploy is done.")
            expect(outbox).to_contain_text("send_message")
            resend = page.get_by_role("button", name="Resend: to Dana Lee (slack)")
            expect(resend).to_have_count(1)
            assert page.evaluate(A11Y_PROBLEMS) == []
            shot(page, "outbox-01-given-up")

            vendor.down.clear()  # Slack takes messages again
            tab_to(page, "button.resend")
            page.keyboard.press("Enter")
            expect(page.get_by_role("status")).to_contain_text("Delivered to Dana Lee (slack).")
            expect(outbox).to_contain_text("Every message has been delivered.")
            shot(page, "outbox-02-resent")
    assert [(r.body["channel"], r.body["text"]) for r in vendor.calls(POST)] == [
        ("U-DANA", "The deploy is done."),  # refused
        ("U-DANA", "The deploy is done."),  # re-sent from the page, taken
    ]
