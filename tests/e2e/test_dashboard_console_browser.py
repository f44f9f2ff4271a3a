"""The console's pages in a real browser (Playwright driving Chromium, with the fixtures and helpers of
test_dashboard_browser.py): the overview, a worker's page, the run view of a completed run (its tool
call's audited arguments) and of a failed run (its reason), usage charts, workspace health, deep links
and the back button, readable labels, a 390x844 phone, another tenant's key, and logging out.

One server for the module: the demo workspace plus tenant globex and a worker whose PERSONA.md does not
load; two runs made through the real API (LiteLLM to the scripted model server). Screenshots go to
test-artifacts/dashboard/console-*.png; with GENWORKER_DOCS_SCREENSHOTS=1 the ones docs/dashboard.md
shows are written to docs/img/ as well.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from tests.e2e.test_dashboard_browser import (
    A11Y_PROBLEMS,
    ARTIFACTS,
    GLOBEX,
    ROOT,
    WAIT_MS,
    go,
    log_in,
    shot,
)
from tests.e2e.test_dashboard_browser import browser as browser
from tests.e2e.test_dashboard_browser import page as page

from genworker.auth import ApiKeyStore
from genworker.testing import Fail, Reply, ScriptedModelServer, ToolCallReply, serve

BROKEN = "---\nidentity:\n  name: Bruno\n  worker_id: broken\n  role: {a: 1}\n---\nYou are broken.\n"  # line 5
DOCS_IMG = ROOT / "docs" / "img"
PHONE = {"width": 390, "height": 844}


@dataclass(frozen=True)
class Console:
    url: str
    demo: str  # API keys
    globex: str
    ok_run: str  # a completed run of assistant with one file_read call
    failed_run: str  # a run of assistant whose model call failed


def _task(url: str, key: str, text: str) -> str:
    auth = {"Authorization": f"Bearer {key}"}
    body = {"worker_id": "assistant", "task": text}
    answer = httpx.post(url + "/api/v1/worker/task/stream", json=body, headers=auth, timeout=60)
    assert answer.status_code == 200, answer.text
    runs = httpx.get(url + "/api/v1/workers/assistant/runs", headers=auth, timeout=30).json()["runs"]
    return str(runs[0]["run_id"])


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory, demo_workspace_src: Path) -> Iterator[Console]:
    tmp = tmp_path_factory.mktemp("console")
    workspace = tmp / "workspace"
    shutil.copytree(demo_workspace_src, workspace)
    files = {**GLOBEX, "tenants/demo/workers/broken/PERSONA.md": BROKEN}
    for rel, text in files.items():
        (workspace / rel).parent.mkdir(parents=True, exist_ok=True)
        (workspace / rel).write_text(text, encoding="utf-8")
    demo = ApiKeyStore(workspace).create("demo", label="console browser test")[1]
    globex = ApiKeyStore(workspace).create("globex")[1]
    with ScriptedModelServer() as model:
        read = ToolCallReply("file_read", {"path": "data/calendar.md"}, "c1")
        model.expect(Reply(tool_calls=(read,)), Reply("Hello, team."), Fail(500, "upstream exploded"))
        with serve(tmp, workspace, model) as server:
            ok = _task(server.url, demo, "Say hello to the team")
            failed = _task(server.url, demo, "Say goodbye to the team")
            model.assert_done()
            yield Console(server.url, demo, globex, ok, failed)


def doc_shot(page: Any, name: str, *, full_page: bool = False) -> None:
    """The test artifact, and with GENWORKER_DOCS_SCREENSHOTS=1 the picture docs/dashboard.md shows."""
    shot(page, f"console-{name}")
    if os.environ.get("GENWORKER_DOCS_SCREENSHOTS") == "1":
        DOCS_IMG.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(DOCS_IMG / f"console-{name}.png"), full_page=full_page)


def run_route(run_id: str) -> str:
    return f"#/workers/assistant/runs/{run_id}"


BADGES = """() => [...document.querySelectorAll('main .badge')]
  .filter((b) => b.checkVisibility()).map((b) => b.textContent)"""
OVERFLOW = "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"


def raw_badges(page: Any) -> list[str]:
    """Badges that show an enum's raw value (snake_case, or not starting with a capital)."""
    texts: list[str] = page.evaluate(BADGES)
    assert texts, "no badge on the page"
    return [t for t in texts if "_" in t or not t[:1].isupper()]


def test_overview_worker_page_and_the_run_views_by_link_and_deep_link(page: Any, console: Console) -> None:
    from playwright.sync_api import expect

    log_in(page, console.url, console.demo)
    overview = page.locator("#view-overview")
    expect(overview).to_be_visible()
    expect(overview).to_contain_text("Iris")
    expect(overview).to_contain_text("Milo")
    expect(overview).to_contain_text("Workers that did not load")
    row = overview.locator("tr", has_text="Iris")
    expect(row.locator("td[data-label='Runs (7 d)']")).to_have_text("2")
    expect(row.locator("td[data-label='Failed']")).to_have_text("1")
    assert raw_badges(page) == []
    assert page.evaluate(A11Y_PROBLEMS) == []
    doc_shot(page, "overview")

    overview.get_by_role("link", name="Iris").click()
    expect(page.locator("body[data-page=worker]")).to_have_count(1)
    assert page.evaluate("location.hash") == "#/workers/assistant"
    expect(page.locator("#h-worker")).to_have_text("Iris (assistant)")
    runs = page.locator('[data-block="runs"]')
    expect(runs).to_contain_text("every model in the fallback chain failed")  # a failed run shows why
    assert raw_badges(page) == []
    doc_shot(page, "worker")

    runs.get_by_role("link", name=console.failed_run).click()
    expect(page.locator("body[data-page=run]")).to_have_count(1)
    view = page.locator("#view-run")
    expect(view.locator(".failure")).to_contain_text("Why it failed: provider_error")
    expect(view.locator(".failure")).to_contain_text("every model in the fallback chain failed")
    expect(view).to_contain_text("Automatic")
    expect(view.locator("table.context-segments")).to_contain_text("Identity")  # the context it was given
    assert raw_badges(page) == []
    doc_shot(page, "run-failed", full_page=True)

    page.go_back()  # the browser's back button returns to the worker's page
    expect(page.locator("body[data-page=worker]")).to_have_count(1)

    page.goto(f"{console.url}/dashboard{run_route(console.ok_run)}")  # a deep link, opened fresh
    expect(page.locator("body[data-page=run]")).to_have_count(1)
    expect(view.locator("h2")).to_have_text(f"Run {console.ok_run}")
    calls = view.locator("table.tool-calls")
    expect(calls).to_contain_text("file_read")
    expect(calls).to_contain_text('"path": "data/calendar.md"')  # as the tool audit kept it
    expect(calls).to_contain_text("Reads")
    expect(view.locator("table.model-calls tbody tr")).to_have_count(2)
    expect(view.locator(".failure")).to_have_count(0)
    assert page.evaluate(A11Y_PROBLEMS) == []
    doc_shot(page, "run", full_page=True)


def test_usage_charts_and_workspace_health(page: Any, console: Console) -> None:
    from playwright.sync_api import expect

    log_in(page, console.url, console.demo)
    page.get_by_role("link", name="Usage", exact=True).click()
    expect(page.locator("body[data-page=usage]")).to_have_count(1)
    usage = page.locator("#view-usage")
    expect(usage.locator("svg.chart")).to_have_count(3)  # runs and failures, tokens by tier, latency by tier
    runs_chart = usage.get_by_role("img", name="Runs and failures per day: Runs 2, Failed 1 over 14 days")
    expect(runs_chart).to_have_count(1)
    expect(usage.locator("svg.chart rect.bar.bad")).to_have_count(1)
    expect(usage).to_contain_text("Latency percentiles")
    numbers = usage.locator("details.numbers").first
    numbers.locator("summary").click()
    expect(numbers.locator("td[data-label='Failed']").last).to_have_text("1")  # today's failure, as a number
    before = page.locator("body").get_attribute("data-loaded") or ""
    page.get_by_role("button", name="Refresh").click()
    expect(page.locator("body")).not_to_have_attribute("data-loaded", before)
    expect(numbers).to_have_attribute("open", "")  # a refresh keeps the table the reader opened
    doc_shot(page, "usage", full_page=True)

    go(page, "#/workers/assistant/usage")
    expect(page.locator("#h-usage")).to_have_text("Usage of assistant")

    page.get_by_role("link", name="Workspace health", exact=True).click()
    expect(page.locator("body[data-page=health]")).to_have_count(1)
    broken = page.locator('[data-file="tenants/demo/workers/broken/PERSONA.md"]')
    expect(broken).to_contain_text("line 5")
    expect(broken).to_contain_text("identity.role")
    expect(broken).to_contain_text("did not load")
    assert raw_badges(page) == []
    doc_shot(page, "health")

    page.locator("#skip").focus()  # the skip link keeps the page's address
    page.keyboard.press("Enter")
    expect(page.locator("#main")).to_be_focused()
    assert page.evaluate("location.hash") == "#/health"
    expect(page.locator("body[data-page=health]")).to_have_count(1)


def test_a_phone_sees_every_page_without_sideways_scrolling(browser: Any, console: Console) -> None:
    from playwright.sync_api import expect

    context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    context.set_default_timeout(WAIT_MS)
    try:
        phone = context.new_page()
        log_in(phone, console.url, console.demo)
        pages = {
            "overview": "#/",
            "worker": "#/workers/assistant",
            "run-failed": run_route(console.failed_run),
            "run": run_route(console.ok_run),
            "usage": "#/usage",
            "health": "#/health",
        }
        for name, route in pages.items():
            if route != "#/":
                go(phone, route)
            assert phone.evaluate(OVERFLOW) <= 0, f"{name} scrolls sideways on a phone"
            shot(phone, f"console-phone-{name}")
        # a table row is a card whose cells name their column
        go(phone, run_route(console.ok_run))
        cell = phone.locator("table.tool-calls td[data-label='Tool']")
        expect(cell).to_be_visible()
        before = phone.evaluate("(e) => getComputedStyle(e, '::before').content", cell.element_handle())
        assert before == '"Tool"'
        assert phone.locator("table.tool-calls thead").bounding_box()["x"] < 0  # headers moved off screen
        if os.environ.get("GENWORKER_DOCS_SCREENSHOTS") == "1":
            phone.screenshot(path=str(DOCS_IMG / "console-phone-run.png"))
    finally:
        context.close()


def test_another_tenants_key_reads_nothing_and_logging_out_clears_every_page(page: Any, console: Console) -> None:
    from playwright.sync_api import expect

    log_in(page, console.url, console.globex)
    page.goto(f"{console.url}/dashboard{run_route(console.ok_run)}")
    expect(page.locator("body[data-page=missing]")).to_have_count(1)
    expect(page.locator("#view-missing")).to_contain_text("may not use a worker named “assistant”")
    for path in (
        f"/api/v1/workers/assistant/dashboard/runs/{console.ok_run}",
        f"/api/v1/workers/demo%2Fassistant/dashboard/runs/{console.ok_run}",
        "/api/v1/dashboard/usage?worker_id=assistant",
    ):
        assert page.request.get(console.url + path).status == 404, path
    overview = page.request.get(console.url + "/api/v1/dashboard/overview").json()
    assert [w["worker_id"] for w in overview["workers"]] == ["gina"] and overview["totals"]["runs"] == 0
    health = page.request.get(console.url + "/api/v1/dashboard/health").json()
    assert health["tenant_id"] == "globex" and health["files"] == []
    page.get_by_role("button", name="Log out").click()
    expect(page.get_by_role("heading", name="Log in")).to_be_visible()

    # demo's pages, each opened, then a log out: none of demo's text stays anywhere in the document
    log_in(page, console.url, console.demo)
    secrets = ["Iris", "Milo", console.ok_run, console.failed_run, "provider_error", "broken/PERSONA.md"]
    routes = ("#/health", "#/usage", run_route(console.ok_run), run_route(console.failed_run), "#/workers/assistant")
    for route in routes:
        go(page, route)
    page.get_by_role("button", name="Log out").click()
    expect(page.get_by_role("heading", name="Log in")).to_be_visible()
    assert page.evaluate("location.hash") == ""
    text = page.evaluate("() => document.body.textContent + document.title")
    assert [s for s in secrets if s in text] == []
    assert ARTIFACTS.is_dir()
