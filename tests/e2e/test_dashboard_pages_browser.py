"""A worker's drawn console pages in a real browser (Playwright driving Chromium, with the fixtures and
helpers of test_dashboard_browser.py): the autonomy charts (heartbeat runs, interruption-budget use and
inbox arrivals per day, the inbox's depth) and the calendar timeline (a heartbeat run, the next fires,
a goal's due date), each by link and by deep link, readable labels, a 390x844 phone, another tenant's
key, and logging out.

One server for the module: the demo workspace plus tenant globex; inbox items and the day's
interruptions written through the real stores before it starts, then one heartbeat run through the API
(LiteLLM to the scripted model server). Screenshots go to test-artifacts/dashboard/console-*.png.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from tests.e2e.test_dashboard_browser import A11Y_PROBLEMS, GLOBEX, WAIT_MS, go, log_in, shot
from tests.e2e.test_dashboard_browser import browser as browser
from tests.e2e.test_dashboard_browser import page as page
from tests.e2e.test_dashboard_console_browser import OVERFLOW, PHONE, doc_shot, raw_badges

from genworker.auth import ApiKeyStore
from genworker.autonomy.briefs.file_store import FileBriefStore
from genworker.autonomy.conflicts import ConflictCase, ConflictStore
from genworker.autonomy.inbox import FileInboxStore, new_item
from genworker.autonomy.learning import LearningState, LearningStore, PolicyChange, PolicyVersion
from genworker.memory.episodes import EpisodeStore, tenant_memory_dir, worker_memory_dir
from genworker.memory.models import Episode, Provenance, Scope, ScopeKind, new_episode_id
from genworker.memory.preferences import StatementStore
from genworker.testing import Reply, ScriptedModelServer, serve

MEMORIES = (
    ("duty:inbox-triage", "Invoices from Acme", "Invoices from Acme go to the finance folder, never to Dana."),
    ("conversation:th-1", "Board meeting", "Dana asked for the board pack two days before the meeting."),
)
ROUTES = ("autonomy", "timeline", "memory", "supervision")  # GET /api/v1/workers/{w}/dashboard/{route}
DUE_SOON = (datetime.now(UTC) + timedelta(days=3)).date()
GOAL = (
    "---\ngoal_id: board-pack\ntitle: Board pack ready\nstatus: active\npriority: high\n"
    f"deadline: {DUE_SOON.isoformat()}\n---\n# Board pack ready\n"
)


@dataclass(frozen=True)
class Pages:
    url: str
    demo: str  # API keys
    globex: str
    heartbeat_run: str


def _remember(workspace: Path) -> None:
    """Iris's memory, written through the real stores: two episodes, a preference, a tenant episode."""
    own = worker_memory_dir(workspace, "demo", "assistant")
    now = datetime.now(UTC)
    episodes = EpisodeStore(own)
    for n, (scope, title, body) in enumerate(MEMORIES):
        at = now - timedelta(hours=n)
        duty = "inbox-triage" if scope.startswith("duty") else None
        episode = Episode(episode_id=new_episode_id(at), tenant_id="demo", worker_id="assistant", scope=scope,
                          title=title, created_at=at, body=body, provenance=Provenance(duty_id=duty))  # fmt: skip
        episodes.write(episode)
    shared = Episode(episode_id=new_episode_id(now), tenant_id="demo", worker_id="assistant", scope="tenant:demo",
                     title="Office hours", created_at=now, body="The office is closed on public holidays.")  # fmt: skip
    EpisodeStore(tenant_memory_dir(workspace, "demo")).write(shared)
    StatementStore(own, "preference").add(
        "reply language", "Dana wants replies in English", Scope(ScopeKind.WORKER, "assistant")
    )


def _learned(workspace: Path) -> None:
    """Iris's learned policy and decision log, and a conflict case, written through the real stores:
    version 1 applied, version 2 out of its shadow period (ready to apply), version 3 rolled back."""
    now = datetime.now(UTC)
    week = timedelta(days=7)
    versions = (
        PolicyVersion(1, (PolicyChange("send_email", "confirm", "rejected twice"),), "active", now - 3 * week,
                      now - 2 * week, ("fb_1", "fb_2"), applied_at=now - 2 * week, applied_by="key:owner"),
        PolicyVersion(2, (PolicyChange("label_issue", "auto", "approved 5 times"),), "shadow", now - 2 * week,
                      now - timedelta(days=1), ("fb_3",)),
        PolicyVersion(3, (PolicyChange("archive_mail", "confirm"),), "rolled_back", now - week, now - week,
                      ended_at=now - week, ended_by="key:owner"),
    )  # fmt: skip
    store = LearningStore(workspace)
    state = LearningState()
    for version in versions:
        state = state.with_version(version)
    store.update("demo", "assistant", lambda _: state)
    store.log("demo", "assistant", {"kind": "policy", "step": "shadow_started", "version": 2,
                                    "changes": "label_issue -> auto", "at": (now - 2 * week).isoformat()})  # fmt: skip
    store.log("demo", "assistant", {"kind": "gate", "at": now.isoformat(), "actions": ["send_email"],
                                    "source_type": "duty", "duty_id": "inbox-triage", "gate_result": "confirm",
                                    "policy_version": 1,
                                    "shadow": [{"version": 2, "would_have": "confirm"}],
                                    "reasons": ["learned_confirm"]})  # fmt: skip
    case = ConflictCase("cc_20261204_1", "demo", "plan_a", "plan_b", "resource", "serialize", "resolved", now,
                        resource_key="mailbox:dana/inbox", worker_a_id="assistant", worker_b_id="analyst",
                        operation_a="archive_mail", operation_b="label_issue",
                        detail="the analyst's labelling waits for the archive to finish")  # fmt: skip
    ConflictStore(workspace).add_case(case)


def _sense(workspace: Path) -> None:
    """Three facts for Iris's inbox: two of today, one of two days ago."""
    store = FileInboxStore(workspace)
    old = new_item("demo", "assistant", "webhook", "office-webhooks", "webhook.fact", {"title": "old invoice"})
    items = [
        replace(old, created_at=old.created_at - timedelta(days=2)),
        new_item("demo", "assistant", "webhook", "office-webhooks", "webhook.fact", {"title": "db1 disk at 91%"}),
        new_item("demo", "assistant", "webhook", "office-webhooks", "webhook.fact", {"title": "db1 disk at 93%"}),
    ]

    async def write() -> None:
        for item in items:
            assert await store.write(item)

    with ThreadPoolExecutor(1) as pool:  # this thread's loop is Playwright's
        pool.submit(lambda: asyncio.run(write())).result()


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory, demo_workspace_src: Path) -> Iterator[Pages]:
    tmp = tmp_path_factory.mktemp("pages")
    workspace = tmp / "workspace"
    shutil.copytree(demo_workspace_src, workspace)
    files = {**GLOBEX, "tenants/demo/workers/assistant/goals/board-pack.md": GOAL}
    for rel, text in files.items():
        (workspace / rel).parent.mkdir(parents=True, exist_ok=True)
        (workspace / rel).write_text(text, encoding="utf-8")
    demo = ApiKeyStore(workspace).create("demo", label="pages browser test")[1]
    globex = ApiKeyStore(workspace).create("globex")[1]
    _sense(workspace)
    _remember(workspace)
    _learned(workspace)
    briefs = FileBriefStore(workspace)
    with ScriptedModelServer() as model:
        model.expect(Reply('{"attention": false, "message": ""}'))
        with serve(tmp, workspace, model) as server:
            auth = {"Authorization": f"Bearer {demo}"}
            policy = httpx.get(server.url + "/api/v1/workers/assistant/briefs/pending", headers=auth, timeout=30).json()
            day = policy["interruption_budget"]["day"]
            for n in range(2):
                briefs.take_interruption("demo", "assistant", day, 3, f"item-{n}")
            watch = {
                "schema_version": 1,
                "attach": {"all": True},
                "stop_on_text": ["attention"],
                "on_violation": "warn",
            }
            put = httpx.put(server.url + "/api/v1/workers/assistant/supervisors/watch-all", json=watch, headers=auth)
            assert put.status_code == 200, put.text
            beat = httpx.post(
                server.url + "/api/v1/workers/assistant/heartbeat/run?wait=true", headers=auth, timeout=60
            )
            assert beat.status_code == 200, beat.text
            run_id = beat.json()["report"]["summary"]["run_id"]
            assert run_id, beat.json()
            model.assert_done()
            yield Pages(server.url, demo, globex, run_id)


def from_worker_page(page: Any, pages: Pages, link: str, name: str) -> None:
    """Log in as demo and open `link` under More on Iris's page."""
    from playwright.sync_api import expect

    log_in(page, pages.url, pages.demo)
    go(page, "#/workers/assistant")
    page.locator("#view-worker .page-links").get_by_role("link", name=link).click()
    expect(page.locator(f"body[data-page={name}]")).to_have_count(1)


def test_autonomy_charts_from_the_worker_page_and_by_deep_link(page: Any, pages: Pages) -> None:
    from playwright.sync_api import expect

    from_worker_page(page, pages, "Autonomy charts", "autonomy")
    assert page.evaluate("location.hash") == "#/workers/assistant/autonomy"
    view = page.locator("#view-autonomy")
    expect(view.locator("h2")).to_have_text("Autonomy charts of assistant")
    expect(view.locator("svg.chart")).to_have_count(3)
    expect(view.get_by_role("img", name="Heartbeat runs per day: Runs 1, Failed 0 over 14 days")).to_have_count(1)
    expect(
        view.get_by_role("img", name="Interruption budget used per day (limit 3): Interruptions 2 over 14 days")
    ).to_have_count(1)
    inbox = "Pending 0, Being processed 0, Failed 0, Dead-lettered 0, Consumed 3"
    expect(
        view.get_by_role("img", name=f"Inbox items per day of arrival, by their state now: {inbox} over 14 days")
    ).to_have_count(1)
    expect(view.locator(".stat", has_text="Interruptions today").locator(".stat-value")).to_have_text("2 of 3")
    expect(view).not_to_contain_text("null")
    numbers = view.locator("details.numbers").nth(2)
    numbers.locator("summary").click()
    expect(numbers.locator("td[data-label='Consumed']").nth(11)).to_have_text("1")  # the fact of two days ago
    assert raw_badges(page) == []
    assert page.evaluate(A11Y_PROBLEMS) == []
    doc_shot(page, "autonomy", full_page=True)

    page.goto(f"{pages.url}/dashboard#/workers/assistant/autonomy")  # a deep link, opened fresh
    expect(page.locator("body[data-page=autonomy]")).to_have_count(1)
    expect(view.locator("svg.chart")).to_have_count(3)


def test_calendar_timeline_with_runs_fires_and_due_dates(page: Any, pages: Pages) -> None:
    from playwright.sync_api import expect

    from_worker_page(page, pages, "Calendar timeline", "timeline")
    view = page.locator("#view-timeline")
    chart = view.locator("svg.timeline")
    expect(chart).to_have_attribute("aria-label", _re(r"1 runs, \d+ scheduled fires, \d+ due dates"))
    expect(chart.locator("text.lane")).to_contain_text(["Runs", "Morning brief for Dana"])
    expect(view.locator("table.timeline-due")).to_contain_text("Board pack ready")
    expect(view.locator("table.timeline-due")).to_contain_text("Backlog older than 30 days triaged (milestone of")
    runs = view.locator("table.timeline-runs")
    expect(runs).to_contain_text("Heartbeat")
    expect(runs).to_contain_text("Completed")
    assert raw_badges(page) == []
    assert page.evaluate(A11Y_PROBLEMS) == []
    doc_shot(page, "timeline", full_page=True)

    chart.locator(f'a[href$="/runs/{pages.heartbeat_run}"]').click()  # a run on the axis opens its run view
    expect(page.locator("body[data-page=run]")).to_have_count(1)
    page.go_back()
    expect(page.locator("body[data-page=timeline]")).to_have_count(1)


def _re(pattern: str) -> Any:
    import re

    return re.compile(pattern)


def test_memory_by_partition_and_search_read_only(page: Any, pages: Pages) -> None:
    from playwright.sync_api import expect

    from_worker_page(page, pages, "Memory", "memory")
    view = page.locator("#view-memory")
    # the heartbeat's summary turn may have left an episode of its own: the total is the API's
    total = sum(page.request.get(pages.url + "/api/v1/workers/assistant/dashboard/memory").json()["counts"].values())
    assert total >= 4
    expect(view.locator(".memory-count")).to_have_text(f"{total} of {total} entries.")
    for name in ("Duty", "Worker", "Tenant"):
        expect(view.locator(".stat", has_text=name).locator(".stat-value")).to_have_text("1")
    rows = view.locator("table.memory-entries tbody tr")
    expect(rows).to_have_count(total)
    expect(view).to_contain_text("Dana wants replies in English")
    expect(view).to_contain_text("The office is closed on public holidays.")
    assert raw_badges(page) == []
    assert page.evaluate(A11Y_PROBLEMS) == []
    doc_shot(page, "memory", full_page=True)

    page.get_by_label("Search what it remembers").fill("acme FINANCE")
    page.get_by_role("button", name="Search").click()
    expect(view.locator(".memory-count")).to_have_text(f"1 of {total} entries matching “acme FINANCE”.")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("Invoices from Acme")
    expect(rows.first).to_contain_text("duty inbox-triage")
    page.get_by_label("Search what it remembers").fill("")
    page.get_by_label("Partition").select_option("tenant")
    page.get_by_role("button", name="Search").click()
    expect(view.locator(".memory-count")).to_have_text(f"1 of {total} entries in the tenant partition.")
    expect(rows.first).to_contain_text("Office hours")
    before = page.locator("body").get_attribute("data-loaded") or ""
    page.get_by_role("button", name="Refresh").click()  # a refresh keeps the search
    expect(page.locator("body")).not_to_have_attribute("data-loaded", before)
    expect(view.locator(".memory-count")).to_have_text(f"1 of {total} entries in the tenant partition.")
    assert view.locator("button", has_text="Delete").count() == 0  # read-only


def test_decision_log_policy_versions_apply_and_roll_back(page: Any, pages: Pages) -> None:
    from playwright.sync_api import expect

    from_worker_page(page, pages, "Decision log and policy", "learning")
    view = page.locator("#view-learning")
    expect(view).to_contain_text("Deciding now: Version 1")
    versions = view.locator("table.policy-versions")
    expect(versions.locator("tbody tr")).to_have_count(3)
    expect(versions.locator("tr", has_text="Version 1")).to_contain_text("Applied")
    expect(versions.locator("tr", has_text="Version 1")).to_contain_text("send_email → asks a person")
    expect(versions.locator("tr", has_text="Version 3")).to_contain_text("Rolled back")
    log = view.locator("table.decision-log")
    gate = log.locator("tr", has_text="Gate decision").filter(has_text="send_email")
    expect(gate.locator("td[data-label='Decided by']")).to_have_text("Version 1")
    expect(gate).to_contain_text("version 2 would have: asks a person")
    expect(log.locator("tr", has_text="Shadow started")).to_contain_text("Policy step")
    expect(log.locator("tr", has_text="Shadow started")).to_contain_text("Shadow started version 2")
    expect(log.locator("tr", has_text="Proposed")).to_contain_text("version 2")  # its shadow period is over

    conflicts = view.locator("table.conflicts")
    expect(conflicts).to_contain_text("mailbox:dana/inbox")
    expect(conflicts).to_contain_text("One after the other")
    assert raw_badges(page) == []
    assert page.evaluate(A11Y_PROBLEMS) == []
    doc_shot(page, "learning", full_page=True)

    page.get_by_label("Show").select_option("policy")  # the log's filter
    expect(log.locator("tbody tr")).to_have_count(2)
    expect(log.locator("tbody tr").filter(has_not_text="Policy step")).to_have_count(0)

    page.get_by_role("button", name="Apply policy version 2").click()
    expect(page.locator("#status")).to_contain_text("Policy version 2 is now applied")
    expect(versions.locator("tr", has_text="Version 2")).to_contain_text("Applied")
    expect(view).to_contain_text("Deciding now: Version 2")
    page.get_by_role("button", name="Roll back policy version 2").click()
    expect(page.locator("#status")).to_contain_text("Policy version 2 is now rolled back")
    expect(versions.locator("tr", has_text="Version 2")).to_contain_text("Rolled back")
    learning = page.request.get(pages.url + "/api/v1/workers/assistant/learning").json()
    assert {v["version"]: v["status"] for v in learning["versions"]} == {
        1: "active",
        2: "rolled_back",
        3: "rolled_back",
    }
    steps = page.request.get(pages.url + "/api/v1/workers/assistant/learning/decisions?kind=policy").json()["decisions"]
    assert [s["step"] for s in steps[:2]] == ["rolled_back", "applied"]


def test_supervision_policies_records_and_mark_as_looked_at(page: Any, pages: Pages) -> None:
    from playwright.sync_api import expect

    from_worker_page(page, pages, "Supervision", "supervision")
    view = page.locator("#view-supervision")
    policies = view.locator("table.supervisor-policies")
    expect(policies).to_contain_text("supervisors/watch-all.json")
    expect(policies).to_contain_text("every run")
    expect(policies).to_contain_text("on a violation: warning")
    attention = view.locator("table.supervision-attention")
    row = attention.locator("tr", has_text=pages.heartbeat_run)
    expect(row.locator("td[data-label='State']")).to_have_text(
        "Paused"
    )  # a stop condition stops, whatever on_violation
    expect(row).to_contain_text("Stopped Stop condition: the answer contains 'attention' (watch-all)")
    expect(view.locator(".stat", has_text="Paused").locator(".stat-value")).to_have_text("1")
    assert raw_badges(page) == []
    assert page.evaluate(A11Y_PROBLEMS) == []
    doc_shot(page, "supervision", full_page=True)

    row.get_by_role("button", name=f"Mark as looked at: {pages.heartbeat_run}").click()
    expect(page.locator("#status")).to_contain_text("marked as looked at")
    expect(view.locator("table.supervision-attention")).to_have_count(0)
    expect(view.locator("table.supervision-records tr", has_text=pages.heartbeat_run)).to_contain_text("Resolved")
    record = page.request.get(f"{pages.url}/api/v1/workers/assistant/runs/{pages.heartbeat_run}/supervision").json()
    assert record["state"] == "resolved" and record["resolved_by"].startswith("key:")


def test_a_phone_another_tenant_and_logging_out(browser: Any, page: Any, pages: Pages) -> None:
    from playwright.sync_api import expect

    context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    context.set_default_timeout(WAIT_MS)
    try:
        phone = context.new_page()
        log_in(phone, pages.url, pages.demo)
        for name in ("autonomy", "timeline", "memory", "learning", "supervision"):
            go(phone, f"#/workers/assistant/{name}")
            expect(phone.locator(f"#view-{name} .content > *").first).to_be_visible()
            assert phone.evaluate(OVERFLOW) <= 0, f"{name} scrolls sideways on a phone"
            shot(phone, f"console-phone-{name}")
    finally:
        context.close()

    log_in(page, pages.url, pages.globex)
    for name in ("autonomy", "timeline", "memory", "learning", "supervision"):
        page.goto(f"{pages.url}/dashboard#/workers/assistant/{name}")
        expect(page.locator("body[data-page=missing]")).to_have_count(1)
    for path in (
        *(f"/api/v1/workers/{w}/dashboard/{name}" for w in ("assistant", "demo%2Fassistant") for name in ROUTES),
        "/api/v1/workers/assistant/learning",
        "/api/v1/workers/assistant/learning/decisions",
    ):
        assert page.request.get(pages.url + path).status == 404, path
    as_globex = {"Authorization": f"Bearer {pages.globex}"}  # a key, so no CSRF check comes first
    rollback = page.request.post(pages.url + "/api/v1/workers/assistant/learning/rollback", data={}, headers=as_globex)
    assert rollback.status == 404
    assert page.request.get(pages.url + "/api/v1/conflicts").json()["conflicts"] == []
    gina = page.request.get(pages.url + "/api/v1/workers/gina/dashboard/autonomy").json()
    memory = page.request.get(pages.url + "/api/v1/workers/gina/dashboard/memory").json()
    assert memory["entries"] == [] and set(memory["counts"].values()) == {0}  # demo's tenant memory is not globex's
    assert gina["heartbeat"]["per_day"][-1] == {"day": datetime.now(UTC).date().isoformat(), "runs": 0, "failed": 0}
    page.get_by_role("button", name="Log out").click()

    log_in(page, pages.url, pages.demo)
    titles = {"autonomy": "Autonomy charts", "timeline": "Calendar timeline", "memory": "Memory",
              "learning": "Decision log and policy", "supervision": "Supervision"}  # fmt: skip
    for name, title in titles.items():  # each page by a deep link, opened fresh
        page.goto(f"{pages.url}/dashboard#/workers/assistant/{name}")
        expect(page.locator(f"body[data-page={name}]")).to_have_count(1)
        expect(page.locator(f"#h-{name}")).to_have_text(f"{title} of assistant")
        expect(page.locator("#crumbs")).to_have_text(f"Overview › assistant › {title}")
    page.get_by_role("button", name="Log out").click()
    expect(page.get_by_role("heading", name="Log in")).to_be_visible()
    text = page.evaluate("() => document.body.textContent")
    secrets = (
        "Board pack ready",
        pages.heartbeat_run,
        "of assistant",
        "Morning brief",
        "Dana wants replies",
        "send_email",
    )
    leaked = [s for s in secrets if s in text]
    assert leaked == []
