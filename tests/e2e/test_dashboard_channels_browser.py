"""The console's channels page in a real browser (Playwright driving Chromium, with the fixtures and helpers
of test_dashboard_browser.py): from a worker's page to its channels, enter Feishu credentials, test the
connection against the local Feishu stand-in (genworker.testing.vendors, which accepts only the app it
was given) — refused with the vendor's error, then, with the right secret, OK — and no secret ever on the
page. Screenshot: test-artifacts/dashboard/console-channels.png (and docs/img/ with
GENWORKER_DOCS_SCREENSHOTS=1).
"""

from __future__ import annotations

import json
from pathlib import Path
from secrets import token_hex
from typing import Any

from tests.e2e.test_dashboard_browser import A11Y_PROBLEMS, log_in, shot
from tests.e2e.test_dashboard_browser import browser as browser
from tests.e2e.test_dashboard_browser import page as page
from tests.e2e.test_dashboard_console_browser import OVERFLOW, PHONE, doc_shot

from genworker.auth import ApiKeyStore
from genworker.testing import ScriptedModelServer, serve
from genworker.testing.live_server import LiveServer
from genworker.testing.vendors import Vendor

ADAPTER = "demo~assistant~acme-feishu"  # the demo assistant's Feishu binding (PERSONA.md channels[])
APP = {"app_id": "cli_console_test", "app_secret": token_hex(16)}
WRONG = token_hex(16)
PAGE_TEXT = "() => document.body.textContent + [...document.querySelectorAll('input')].map((i) => i.value).join(' ')"


TOKEN = "/open-apis/auth/v3/tenant_access_token/internal"


def save(page: Any, fields: dict[str, str]) -> None:
    """Type the fields into the credentials form and save; what was typed is never shown back."""
    from playwright.sync_api import expect

    for name, value in fields.items():
        page.locator(f"#cred-{name}").fill(value)
    page.get_by_role("button", name="Save credentials").click()
    expect(page.locator("#channel-result")).to_have_text(
        "Saved the Feishu / Lark credentials; the worker reloaded them."
    )
    expect(page.locator("#cred-app_secret")).to_have_attribute("placeholder", "set: type to replace it")
    expect(page.locator("#cred-app_secret")).to_have_value("")


def press_test_connection(page: Any, vendor: Vendor) -> Any:
    """Press the binding's Test connection button; its result once the stand-in has been asked."""
    asked = len(vendor.calls(TOKEN))
    page.get_by_role("button", name=f"Test connection: {ADAPTER}").click()
    vendor.wait_for(TOKEN, asked + 1)
    return page.locator("table.channel-bindings tr", has_text=ADAPTER).locator(".test-result")


def test_enter_credentials_and_test_the_connection(page: Any, demo_workspace: Path, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    key = ApiKeyStore(demo_workspace).create("demo", label="channels browser test")[1]
    vendor = Vendor(accounts={"feishu": APP})
    with (
        ScriptedModelServer() as model,
        LiveServer(vendor.app()) as feishu,
        serve(tmp_path, demo_workspace, model, GENWORKER_FEISHU_API_BASE=feishu.url) as server,
    ):
        log_in(page, server.url, key)
        page.get_by_label("Worker", exact=True).select_option("assistant")
        page.locator("#view-worker .worker-head").get_by_role("link", name="Channels").click()
        expect(page.locator("body[data-page=channels]")).to_have_count(1)
        assert page.evaluate("location.hash") == "#/workers/assistant/channels"
        status = page.locator("table.channel-bindings tr", has_text=ADAPTER).locator("td[data-label=Status]")
        expect(status).to_have_text("No credentials")
        expect(page.get_by_label("Platform")).to_have_value("feishu")  # a bound platform comes first

        save(page, {"app_id": APP["app_id"], "app_secret": WRONG})
        refused = press_test_connection(page, vendor)
        expect(refused).to_contain_text(
            "Refused by the vendor: feishu tenant_access_token: code 10014 app secret invalid"
        )
        expect(status).to_have_text("Connected")  # credentials present, no delivery failed

        save(page, {"app_secret": APP["app_secret"]})
        ok = press_test_connection(page, vendor)
        expect(ok).to_contain_text("OK tenant_access_token/internal answered in")
        text = page.evaluate(PAGE_TEXT)
        assert APP["app_secret"] not in text and WRONG not in text and APP["app_id"] not in text
        assert page.evaluate(A11Y_PROBLEMS) == []
        doc_shot(page, "channels", full_page=True)

        page.set_viewport_size(PHONE)
        assert page.evaluate(OVERFLOW) <= 0, "the channels page scrolls sideways on a phone"
        shot(page, "console-phone-channels")
        model.assert_done()
    stored = json.loads((demo_workspace / "tenants/demo/workers/assistant/CHANNEL_CREDENTIALS.json").read_text("utf-8"))
    assert stored["feishu"] == APP
