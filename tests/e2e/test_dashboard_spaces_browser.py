"""A worker's context spaces in a real browser (Playwright driving Chromium, with the fixtures and helpers of
test_dashboard_browser.py): two facts sensed through the inbox and the heartbeat's API become two spaces (the
model unsure about the second: a pending NEW); the worker page's spaces block counts them, the spaces page
lists them by state with their evidence, a space's facts open from the event log, and the pending one is
confirmed from the page. Another tenant's key
gets "Not found" and a 404. Screenshots go to test-artifacts/dashboard/console-spaces*.png.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from tests.e2e.test_dashboard_browser import A11Y_PROBLEMS, GLOBEX, go, log_in
from tests.e2e.test_dashboard_browser import browser as browser
from tests.e2e.test_dashboard_browser import page as page
from tests.e2e.test_dashboard_console_browser import OVERFLOW, PHONE, doc_shot, raw_badges

from genworker.auth import ApiKeyStore
from genworker.autonomy.inbox import FileInboxStore, new_item
from genworker.testing import Reply, ScriptedModelServer, ToolCallReply, serve
from genworker.testing.live_server import LiveServer


@pytest.fixture
def workspace(small_workspace: Callable[..., Path]) -> Path:
    root = small_workspace({"acme": ["alice"]}, GLOBEX)
    persona = root / "tenants/acme/workers/alice/PERSONA.md"
    persona.write_text(
        persona.read_text(encoding="utf-8").replace("---\nYou", "context_spaces: {enabled: true}\n---\nYou"),
        encoding="utf-8",
    )
    return root


def sense(workspace: Path, server: LiveServer, key: str, subject: str) -> None:
    """A fact in alice's inbox, then her heartbeat through the API (it files the fact into a space)."""
    item = new_item("acme", "alice", "email", "mailbox", "email.received", {"subject": subject, "from": "erin"})
    with ThreadPoolExecutor(1) as pool:  # this thread's loop is Playwright's
        assert pool.submit(lambda: asyncio.run(FileInboxStore(workspace).write(item))).result()
    answer = httpx.post(
        f"{server.url}/api/v1/workers/alice/heartbeat/run", headers={"Authorization": f"Bearer {key}"}, timeout=60
    )
    assert answer.status_code == 200, answer.text


def test_spaces_block_and_page_with_facts(
    browser: Any, page: Any, tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    from playwright.sync_api import expect

    unsure = {"choice": "SPACE_1", "confidence": 0.4, "reason": "maybe the same invoices"}
    model_server.expect(Reply(tool_calls=(ToolCallReply("choose_space", unsure),)))
    key = ApiKeyStore(workspace).create("acme")[1]
    globex = ApiKeyStore(workspace).create("globex")[1]
    with serve(tmp_path, workspace, model_server) as server:
        sense(workspace, server, key, "Stripe invoices failed for March")
        sense(workspace, server, key, "Quarterly board deck draft")  # the model is unsure: a pending NEW

        log_in(page, server.url, key)
        go(page, "#/workers/alice")
        block = page.locator('[data-block="spaces"]')
        expect(block.locator(".stat", has_text="Active").locator(".stat-value")).to_have_text("2")
        expect(block).to_contain_text("1 new space waits to be confirmed.")
        expect(block).to_contain_text("Stripe invoices failed for March")
        block.get_by_role("link", name="Every space, with its facts").click()
        expect(page.locator("body[data-page=spaces]")).to_have_count(1)
        assert page.evaluate("location.hash") == "#/workers/alice/spaces"

        view = page.locator("#view-spaces")
        pending = view.locator("section.panel", has_text="New, waiting for a person (1)")
        expect(pending).to_contain_text("Quarterly board deck draft")
        expect(pending).to_contain_text("maybe the same invoices")
        expect(pending.locator("td[data-label='Space']")).to_contain_text("SPACE_2 Pending")
        expect(view).not_to_contain_text("[object")
        active = view.locator("section.panel", has_text="Active (1)")
        row = active.locator("tr", has_text="Stripe invoices failed for March")
        expect(row).to_contain_text("1 fact from Email")
        row.locator("summary", has_text="Facts (1)").click()
        expect(row.locator(".space-facts")).to_contain_text("Email · erin: ")
        expect(row.locator(".space-facts")).to_contain_text("Stripe invoices failed for March")
        before = page.locator("body").get_attribute("data-loaded") or ""
        page.get_by_role("button", name="Refresh").click()  # a refresh keeps the facts opened
        expect(page.locator("body")).not_to_have_attribute("data-loaded", before)
        expect(row.locator(".space-facts")).to_contain_text("Stripe invoices failed for March")
        assert raw_badges(page) == []
        assert page.evaluate(A11Y_PROBLEMS) == []
        doc_shot(page, "spaces", full_page=True)

        pending.get_by_role("button", name="Confirm: Quarterly board deck draft").click()  # through the spaces API
        expect(page.locator("#status")).to_have_text("SPACE_2 is confirmed as a space of its own.")
        expect(view.locator("section.panel", has_text="New, waiting for a person (0)")).to_have_count(1)
        expect(view.locator("section.panel", has_text="Active (2)")).to_contain_text("Quarterly board deck draft")
        assert (
            page.request.get(server.url + "/api/v1/workers/alice/spaces/SPACE_2").json()["space"]["review"]
            == "confirmed"
        )

        phone = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True).new_page()
        log_in(phone, server.url, key)
        go(phone, "#/workers/alice/spaces")
        expect(phone.locator("#view-spaces .stats")).to_be_visible()
        assert phone.evaluate(OVERFLOW) <= 0, "the spaces page scrolls sideways on a phone"
        phone.context.close()

        page.get_by_role("button", name="Log out").click()
        log_in(page, server.url, globex)
        page.goto(f"{server.url}/dashboard#/workers/alice/spaces")
        expect(page.locator("body[data-page=missing]")).to_have_count(1)
        for path in ("/api/v1/workers/alice/spaces", "/api/v1/workers/alice/spaces/SPACE_1/events"):
            assert page.request.get(server.url + path).status == 404, path
        text = page.evaluate("() => document.body.textContent")
        assert "Stripe invoices" not in text
        model_server.assert_done()
