"""The run view's context segments and AG-UI event timeline in a real browser (Playwright driving Chromium,
with the fixtures and helpers of test_dashboard_browser.py), from runs made through the real API (LiteLLM
to the scripted model server): a run with two tool calls, one of whose arguments carries a key the audit
redacts, and a run whose model call failed. Another tenant's key opens neither. Screenshots go to
test-artifacts/dashboard/ (run-view-*.png, console-run-trace.png; with GENWORKER_DOCS_SCREENSHOTS=1 also
docs/img/console-run-trace.png).
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.test_dashboard_browser import A11Y_PROBLEMS, GLOBEX, go, log_in, shot
from tests.e2e.test_dashboard_browser import browser as browser  # the page fixture's
from tests.e2e.test_dashboard_browser import page as page
from tests.e2e.test_dashboard_console_browser import OVERFLOW, PHONE, _task, doc_shot, run_route

from genworker.auth import ApiKeyStore
from genworker.testing import Fail, Reply, ScriptedModelServer, ToolCallReply, serve

LEAKED_KEY = "sk-" + "r3dact3dR3dact3dR3d"  # an OpenAI-shaped key the model put in a tool call's arguments


@dataclass(frozen=True)
class Runs:
    url: str
    demo: str  # API keys
    globex: str
    ok_run: str  # assistant read its calendar, tried a second path carrying LEAKED_KEY, then answered
    failed_run: str  # assistant's model call failed


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, demo_workspace_src: Path) -> Iterator[Runs]:
    tmp = tmp_path_factory.mktemp("run-view")
    workspace = tmp / "workspace"
    shutil.copytree(demo_workspace_src, workspace)
    for rel, text in GLOBEX.items():
        (workspace / rel).parent.mkdir(parents=True, exist_ok=True)
        (workspace / rel).write_text(text, encoding="utf-8")
    demo = ApiKeyStore(workspace).create("demo", label="run view browser test")[1]
    globex = ApiKeyStore(workspace).create("globex")[1]
    with ScriptedModelServer() as model:
        read = ToolCallReply("file_read", {"path": "data/calendar.md"}, "c1")
        leaky = ToolCallReply("file_read", {"path": f"keys/{LEAKED_KEY}.txt"}, "c2")
        model.expect(Reply(tool_calls=(read, leaky)), Reply("Hello, team."), Fail(500, "upstream exploded"))
        with serve(tmp, workspace, model) as server:
            ok = _task(server.url, demo, "Say hello to the team")
            failed = _task(server.url, demo, "Say goodbye to the team")
            model.assert_done()
            yield Runs(server.url, demo, globex, ok, failed)


def test_a_run_shows_its_context_segments_model_calls_redacted_tool_calls_and_timeline(page: Any, runs: Runs) -> None:
    from playwright.sync_api import expect

    log_in(page, runs.url, runs.demo)
    page.goto(f"{runs.url}/dashboard{run_route(runs.ok_run)}")  # a deep link
    expect(page.locator("body[data-page=run]")).to_have_count(1)
    view = page.locator("#view-run")
    expect(view.locator("h2")).to_have_text(f"Run {runs.ok_run}")

    segments = view.locator("table.context-segments")
    for name in ("Identity", "Conversation history", "Task"):
        expect(segments.locator("td[data-label='Segment']", has_text=name)).to_have_count(1)
    expect(segments.locator(".tok-bar")).not_to_have_count(0)
    task_bar = segments.locator(".tok-bar[aria-label^='Task: ']")
    expect(task_bar).to_have_count(1)
    assert task_bar.locator(".tok-fill").bounding_box()["width"] > 0  # drawn, not only labelled
    expect(view).to_contain_text("-token input budget")

    expect(view.locator("table.model-calls tbody tr")).to_have_count(2)
    calls = view.locator("table.tool-calls")
    expect(calls.locator("tbody tr")).to_have_count(2)
    expect(calls).to_contain_text('"path": "data/calendar.md"')
    expect(calls).to_contain_text('"path": "keys/[REDACTED].txt"')  # as the tool audit redacted it

    timeline = view.locator("table.timeline")
    types = timeline.locator("tbody tr").evaluate_all("(rows) => rows.map((r) => r.dataset.type)")
    assert types[0] == "RUN_STARTED" and types[-1] == "RUN_FINISHED", types
    assert types.count("TOOL_CALL_START") == 2 and types.count("TOOL_CALL_RESULT") == 2, types
    expect(timeline.locator("tr[data-type=TOOL_CALL_START]").first).to_contain_text("Tool call")
    expect(timeline.locator("tr[data-type=TOOL_CALL_START]").first).to_contain_text("file_read (call c1)")
    expect(timeline.locator("tr[data-type=TOOL_CALL_ARGS]").last).to_contain_text("keys/[REDACTED].txt")
    expect(timeline.locator("tr[data-type=RUN_FINISHED]")).to_contain_text("completed: Hello, team.")
    expect(timeline.locator("tr[data-type=RUN_STARTED] time")).to_have_text(re.compile(r"^\+\d+ ms$"))  # since accepted

    text = page.evaluate("() => document.body.textContent")
    assert LEAKED_KEY not in text
    assert page.evaluate(A11Y_PROBLEMS) == []
    segments.evaluate("(e) => e.closest('section').scrollIntoView()")  # the docs' picture starts at the context
    doc_shot(page, "run-trace")


def test_a_failed_run_shows_its_reason_and_its_timeline_ends_in_the_error(page: Any, runs: Runs) -> None:
    from playwright.sync_api import expect

    log_in(page, runs.url, runs.demo)
    go(page, run_route(runs.failed_run))
    view = page.locator("#view-run")
    expect(view.locator(".failure")).to_contain_text("Why it failed: provider_error")
    error = view.locator("table.timeline tr[data-type=RUN_ERROR]")
    expect(error).to_contain_text("Run failed")
    expect(error).to_contain_text("every model in the fallback chain failed")
    expect(view.locator("table.context-segments")).to_be_visible()  # the context it was given, though it failed
    shot(page, "run-view-failed")


def test_on_a_phone_the_timeline_is_cards_without_sideways_scrolling(page: Any, runs: Runs) -> None:
    from playwright.sync_api import expect

    page.set_viewport_size(PHONE)  # the console's layout follows the width alone
    log_in(page, runs.url, runs.demo)
    go(page, run_route(runs.ok_run))
    assert page.evaluate(OVERFLOW) <= 0, "the run view scrolls sideways on a phone"
    cell = page.locator("table.timeline td[data-label='Event']").first
    expect(cell).to_be_visible()
    assert page.evaluate("(e) => getComputedStyle(e, '::before').content", cell.element_handle()) == '"Event"'
    shot(page, "run-view-phone")


def test_another_tenants_key_cannot_open_the_run_view(page: Any, runs: Runs) -> None:
    from playwright.sync_api import expect

    log_in(page, runs.url, runs.globex)
    page.goto(f"{runs.url}/dashboard{run_route(runs.ok_run)}")
    expect(page.locator("body[data-page=missing]")).to_have_count(1)
    for worker in ("assistant", "demo%2Fassistant", "gina"):
        answer = page.request.get(f"{runs.url}/api/v1/workers/{worker}/dashboard/runs/{runs.ok_run}")
        assert answer.status == 404, worker
        assert "RUN_STARTED" not in answer.text() and "system_identity" not in answer.text()
