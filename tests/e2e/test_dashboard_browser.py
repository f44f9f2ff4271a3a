"""The dashboard in a real browser: Playwright driving Debian's Chromium against the real app (uvicorn,
the demo workspace, LiteLLM to the scripted model server).

Log in with a key made by the auth store, see the demo workers, approve a pending confirmation from the
keyboard and see the task run, see a failing block degrade, and check accessibility basics. Screenshots
go to test-artifacts/dashboard/ (printed). Skips with one line when Playwright or /usr/bin/chromium
(or $GENWORKER_CHROMIUM) is missing, unless GENWORKER_REQUIRE_BROWSER=1 (CI), which makes that a failure.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest

from genworker.auth import ApiKeyStore
from genworker.testing import Reply, ScriptedModelServer, serve

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("GENWORKER_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(os.environ.get("GENWORKER_TEST_ARTIFACTS", ROOT / "test-artifacts")) / "dashboard"
GATED = (
    "---\nduty_id: pay-invoice\ntitle: Pay an approved invoice\ntriggers: [{id: m, type: manual}]\n"
    "posture: {default: execute}\ncontract: {version: '1', approval: {required: true}}\n"
    "---\nPay the invoice from Globex.\n"
)
WAIT_MS = 15_000


def _unusable(reason: str) -> None:
    if os.environ.get("GENWORKER_REQUIRE_BROWSER") == "1":
        pytest.fail(f"GENWORKER_REQUIRE_BROWSER=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One Chromium for the module."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unusable("playwright is not installed (pip install playwright)")
    if not Path(CHROMIUM).is_file():
        _unusable(f"{CHROMIUM} is missing (apt-get install -y chromium)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(WAIT_MS)
    try:
        yield context.new_page()
    finally:
        context.close()


@pytest.fixture
def workspace(demo_workspace: Path) -> Path:
    """The shipped demo workspace, plus one duty that needs a person's yes."""
    root = demo_workspace
    (root / "tenants/demo/workers/assistant/duties/pay-invoice.md").write_text(GATED, encoding="utf-8")
    return root


def shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")


def log_in(page: Any, url: str, key: str) -> None:
    from playwright.sync_api import expect

    page.goto(url + "/dashboard")
    field = page.get_by_label("API key")
    expect(field).to_be_focused()  # the login form is ready to type into
    page.keyboard.type(key)
    page.keyboard.press("Enter")
    expect(page.locator("#main")).to_be_visible()
    expect(page.locator("body[data-loaded]")).to_have_count(1)


def block(page: Any, name: str) -> Any:
    return page.locator(f'[data-block="{name}"]')


def go(page: Any, hash_route: str) -> None:
    """Follow a console deep link (`#/workers/assistant`, ...) and wait until its data is shown."""
    from playwright.sync_api import expect

    before = page.locator("body").get_attribute("data-loaded") or ""
    page.evaluate("(h) => { location.hash = h; }", hash_route)
    expect(page.locator("body")).not_to_have_attribute("data-loaded", before)


def open_worker(page: Any, worker: str) -> None:
    """The worker's page, chosen from the header's worker list as a person would."""
    from playwright.sync_api import expect

    before = page.locator("body").get_attribute("data-loaded") or ""
    page.get_by_label("Worker", exact=True).select_option(worker)
    expect(page.locator("body[data-page=worker]")).to_have_count(1)
    expect(page.locator("body")).not_to_have_attribute("data-loaded", before)


def tab_to(page: Any, selector: str, limit: int = 120) -> None:
    """Press Tab until the element matching `selector` has the focus (keyboard reachability)."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        if page.evaluate("(s) => document.activeElement !== null && document.activeElement.matches(s)", selector):
            return
    pytest.fail(f"{selector} is not reachable with the Tab key")


A11Y_PROBLEMS = """() => {
  const problems = [];
  if (!document.documentElement.lang) problems.push("html has no lang");
  for (const e of document.querySelectorAll("input, select, textarea")) {
    const named = e.labels.length > 0 || e.getAttribute("aria-label");
    if (e.type !== "hidden" && !named) problems.push(`unlabelled ${e.id}`);
  }
  for (const b of document.querySelectorAll("button")) {
    if (!(b.getAttribute("aria-label") || b.textContent).trim()) problems.push("a button without a name");
    if (b.tabIndex < 0) problems.push(`button ${b.textContent} is not focusable`);
  }
  for (const s of document.querySelectorAll("section[aria-labelledby]")) {
    if (!document.getElementById(s.getAttribute("aria-labelledby"))) problems.push(`section without heading`);
  }
  return problems;
}"""


def test_log_in_see_the_demo_workers_and_approve_from_the_keyboard(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer, page: Any
) -> None:
    from playwright.sync_api import expect

    # the run, then the evaluator turn for the demo's _defaults.md (two quality criteria, one escalation condition)
    judged = {
        "criteria": [{"n": n, "met": True, "reason": "shown"} for n in (1, 2)],
        "evidence": [],
        "conditions": [{"n": 1, "holds": False, "reason": "not seen"}],
    }
    model_server.expect(Reply("Paid the Globex invoice."), Reply(json.dumps(judged)))
    key = ApiKeyStore(workspace).create("demo", label="browser test")[1]
    with serve(tmp_path, workspace, model_server) as server:
        gated = httpx.post(
            server.url + "/api/v1/workers/assistant/duties/pay-invoice/run",
            headers={"Authorization": f"Bearer {key}"},
            timeout=60,
        )
        assert gated.json()["run"]["state"] == "waiting_approval", gated.text

        page.goto(server.url + "/dashboard")
        expect(page.get_by_role("heading", name="Log in")).to_be_visible()
        assert page.evaluate(A11Y_PROBLEMS) == []
        shot(page, "01-login")
        page.get_by_label("API key").fill("gwk_000000000000_" + "x" * 43)
        page.get_by_role("button", name="Log in").click()
        expect(page.get_by_role("alert")).to_contain_text("invalid or revoked")

        page.get_by_label("API key").fill("")
        log_in(page, server.url, key)
        expect(page.locator("#tenant")).to_have_text("Tenant demo")
        expect(page.locator("body[data-page=overview]")).to_have_count(1)  # the console opens on the overview
        workers = page.locator("#worker option[value]:not([value=''])").all_inner_texts()
        assert workers == ["analyst", "assistant", "helpdesk"]
        open_worker(page, "assistant")
        assert page.evaluate("location.hash") == "#/workers/assistant"
        expect(page.get_by_label("Worker", exact=True)).to_have_value("assistant")
        expect(block(page, "workers")).to_contain_text("Iris")
        expect(block(page, "workers")).to_contain_text("Milo")
        expect(block(page, "profile")).to_contain_text("Personal assistant to the CEO")
        expect(block(page, "calendar")).to_contain_text("Morning brief for Dana")
        expect(block(page, "calendar")).to_contain_text("Times in America/New_York")
        expect(block(page, "capabilities")).to_contain_text("file_read")
        expect(block(page, "channels")).to_contain_text("Missing credentials")
        approve = page.get_by_role("button", name=re.compile(r"^Approve: "))
        expect(approve).to_have_count(1)
        assert page.evaluate(A11Y_PROBLEMS) == []
        shot(page, "02-pending-confirmation")

        tab_to(page, "button.approve")
        page.keyboard.press("Enter")
        expect(page.get_by_role("status")).to_contain_text("the task ran: completed")
        expect(page.get_by_role("status")).to_contain_text("Paid the Globex invoice.")
        expect(block(page, "pending")).to_contain_text("Nothing waits for a decision.")
        expect(block(page, "tasks")).to_contain_text("Done (1)")
        expect(block(page, "runs")).to_contain_text("2 model calls")  # the run and its evaluator turn
        expect(block(page, "decisions")).to_contain_text("Needs approval")
        shot(page, "03-approved-and-ran")

        open_worker(page, "analyst")
        expect(block(page, "goals")).to_contain_text("KPI baseline")
        expect(block(page, "goals")).to_contain_text("waits on automate-freshness-check")

        tab_to(page, "#logout")
        page.keyboard.press("Enter")
        expect(page.get_by_role("heading", name="Log in")).to_be_visible()
        after = page.request.get(server.url + "/api/v1/workers/assistant/dashboard")
        assert after.status == 401


def test_a_failing_block_degrades_and_the_rest_of_the_page_stays(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer, page: Any
) -> None:
    from playwright.sync_api import expect

    key = ApiKeyStore(workspace).create("demo")[1]
    with serve(tmp_path, workspace, model_server) as server:
        log_in(page, server.url, key)
        open_worker(page, "assistant")
        expect(block(page, "runs")).to_have_attribute("data-status", "ok")
        runs = workspace / "tenants/demo/workers/assistant/runs"
        runs.mkdir(parents=True, exist_ok=True)
        (runs / "run-broken.json").write_text('{"schema_version": 99}', encoding="utf-8")  # the run store now raises
        page.get_by_role("button", name="Refresh").click()
        expect(block(page, "runs")).to_have_attribute("data-status", "error")
        expect(block(page, "runs")).to_contain_text("Failed:")
        expect(block(page, "tasks")).to_have_attribute("data-status", "error")
        for healthy in ("profile", "calendar", "goals", "capabilities", "pending"):
            expect(block(page, healthy)).to_have_attribute("data-status", "ok")
        expect(block(page, "calendar")).to_contain_text("Morning brief for Dana")
        shot(page, "04-degraded-block")


SKELETON = ("#session", "#tenant", "#worker", "#refresh", "#logout", "#updated", "#main", "#skip", "[data-block]")
# Texts only tenant demo's page shows (its tenant line, workers, profile, calendar, goals).
DEMO_TEXTS = ("Tenant demo", "Iris", "Milo", "Personal assistant to the CEO", "Morning brief for Dana", "assistant")
GLOBEX = {
    "tenants/globex/TENANT.json": '{"tenant_id": "globex", "name": "Globex", "default_worker": "gina"}',
    "tenants/globex/workers/gina/PERSONA.md": (
        "---\nidentity: {name: Gina, worker_id: gina, role: Globex bookkeeper}\n---\nYou keep the books.\n"
    ),
}
SHOWN_ELEMENTS = """(selectors) => selectors.flatMap((s) => [...document.querySelectorAll(s)])
  .filter((e) => e.checkVisibility({ checkOpacity: true, checkVisibilityCSS: true }))
  .map((e) => e.id || e.dataset.block || e.tagName)"""
# Records every text later added to the page that contains one of the given strings.
WATCH = """(texts) => {
  window.__leaks = [];
  new MutationObserver((records) => {
    for (const r of records) {
      const added = r.type === "characterData" ? [r.target] : [...r.addedNodes];
      for (const n of added) {
        const text = n.textContent || "";
        for (const t of texts) if (text.includes(t)) window.__leaks.push(`${t} in ${text.slice(0, 80)}`);
      }
    }
  }).observe(document.body, { childList: true, subtree: true, characterData: true });
}"""


def shown(page: Any, selectors: tuple[str, ...] = SKELETON) -> list[str]:
    """The elements matching `selectors` that are rendered (computed style, not the hidden attribute)."""
    found: list[str] = page.evaluate(SHOWN_ELEMENTS, list(selectors))
    return found


def demo_texts_on(page: Any) -> list[str]:
    rendered = page.evaluate("() => document.body.innerText")
    everywhere = page.evaluate("() => document.body.textContent + document.title")
    return [t for t in DEMO_TEXTS if t in rendered or t in everywhere]


def until(page: Any, done: Any, limit: int = 500) -> None:
    """Let Playwright dispatch events (route handlers run then) until `done()`; each round trips to the page."""
    for _ in range(limit):
        if done():
            return
        page.evaluate("0")
    pytest.fail("the awaited browser event never came")


def test_before_login_only_the_login_form_shows(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer, page: Any
) -> None:
    from playwright.sync_api import expect

    with serve(tmp_path, workspace, model_server) as server:
        held: list[Any] = []
        # hold the page's question "am I logged in?" to see the page while it waits for the answer
        page.route("**/dashboard/session", lambda route: held.append(route))
        page.goto(server.url + "/dashboard")
        until(page, lambda: bool(held))
        assert shown(page, (*SKELETON, "#login")) == []  # while it checks: neither controls nor the form
        held[0].continue_()
        expect(page.get_by_role("heading", name="Log in")).to_be_visible()
        assert shown(page) == []
        for control in ("#worker", "#refresh", "#logout", "#main"):
            expect(page.locator(control)).to_be_hidden()
        text = page.evaluate("() => document.body.innerText")
        assert "API key" in text
        assert not [w for w in ("Worker", "Refresh", "Log out", "Profile", "Pending actions") if w in text], text
        shot(page, "05-before-login")


def test_log_out_clears_every_block_and_the_next_tenant_never_sees_the_last_ones_data(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer, page: Any
) -> None:
    from playwright.sync_api import expect

    for rel, text in GLOBEX.items():
        (workspace / rel).parent.mkdir(parents=True, exist_ok=True)
        (workspace / rel).write_text(text, encoding="utf-8")
    demo = ApiKeyStore(workspace).create("demo")[1]
    globex = ApiKeyStore(workspace).create("globex")[1]
    with serve(tmp_path, workspace, model_server) as server:
        log_in(page, server.url, demo)
        open_worker(page, "assistant")
        expect(block(page, "profile")).to_contain_text("Personal assistant to the CEO")
        expect(block(page, "workers")).to_contain_text("Milo")
        assert demo_texts_on(page) == list(DEMO_TEXTS)

        # A refresh of demo's page answered by the server, still on its way when the user logs out
        # and globex logs in on the same page.
        held: list[Any] = []
        page.route("**/api/v1/workers/assistant/dashboard", lambda route: held.append((route, route.fetch())))
        page.get_by_role("button", name="Refresh").click()
        until(page, lambda: bool(held))
        page.evaluate(WATCH, list(DEMO_TEXTS))
        page.get_by_role("button", name="Log out").click()
        expect(page.get_by_role("heading", name="Log in")).to_be_visible()
        expect(page.get_by_role("status")).to_have_text("Logged out.")
        assert shown(page) == []
        assert demo_texts_on(page) == []
        shot(page, "06-logged-out")

        page.get_by_label("API key").fill(globex)
        page.keyboard.press("Enter")
        expect(page.locator("#tenant")).to_have_text("Tenant globex")
        assert page.evaluate("location.hash") == ""  # logging out left demo's worker page
        open_worker(page, "gina")
        expect(block(page, "profile")).to_contain_text("Globex bookkeeper")
        route, answer = held[0]
        assert answer.ok and "Personal assistant to the CEO" in answer.text()
        with page.expect_request_finished(lambda r: r.url.endswith("/workers/assistant/dashboard")):
            route.fulfill(response=answer)
        loaded = page.locator("body").get_attribute("data-loaded")
        page.get_by_role("button", name="Refresh").click()  # its answer comes after demo's, already received
        expect(page.locator("body")).not_to_have_attribute("data-loaded", loaded or "")
        expect(block(page, "profile")).to_contain_text("Globex bookkeeper")
        assert demo_texts_on(page) == []
        assert page.evaluate("() => window.__leaks") == []
        shot(page, "07-next-tenant")


BROKEN_ROLE = "  role: {a: 1}"  # line 6 of the demo assistant's PERSONA.md: identity.role must be a string


def test_a_rejected_reload_shows_until_the_file_is_fixed(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer, page: Any
) -> None:
    from playwright.sync_api import expect

    key = ApiKeyStore(workspace).create("demo")[1]
    persona = workspace / "tenants/demo/workers/assistant/PERSONA.md"
    good = persona.read_text(encoding="utf-8")
    lines = good.split("\n")
    assert lines[5].startswith("  role: ")
    refused = block(page, "load_errors")

    def reload() -> dict[str, Any]:
        response = httpx.post(
            server.url + "/api/v1/worker/ops/reload",
            json={"worker_id": "assistant"},
            headers={"Authorization": f"Bearer {key}"},
            timeout=60,
        )
        assert response.status_code == 200, response.text
        outcome: dict[str, Any] = response.json()
        return outcome

    with serve(tmp_path, workspace, model_server) as server:
        log_in(page, server.url, key)
        open_worker(page, "assistant")
        expect(refused).to_be_hidden()

        persona.write_text("\n".join([*lines[:5], BROKEN_ROLE, *lines[6:]]), encoding="utf-8")
        outcome = reload()
        assert outcome["kept_last_good"] and not outcome["ok"]
        page.get_by_role("button", name="Refresh").click()
        expect(refused).to_be_visible()
        expect(refused).to_contain_text("Worker assistant")
        expect(refused).to_contain_text("the last good version is still serving")
        expect(refused).to_contain_text("tenants/demo/workers/assistant/PERSONA.md, line 6")
        expect(refused).to_contain_text("identity.role: Input should be a valid string")
        expect(block(page, "profile")).to_contain_text("Personal assistant to the CEO")  # the last good version
        shot(page, "08-rejected-reload")

        persona.write_text(good, encoding="utf-8")
        assert reload()["ok"]
        page.get_by_role("button", name="Refresh").click()
        expect(refused).to_be_hidden()
        assert shown(page, ('[data-block="load_errors"]',)) == []
