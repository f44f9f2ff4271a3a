"""The console's experiments pages in a real browser (Playwright driving Chromium, with the fixtures and
helpers of test_dashboard_browser.py; issue #33): an experiment of three variants, one failing, created
over the API with the scripted model and a supervisor that comments, is listed with its state, and its
page by deep link shows the question, the variants side by side (settings, run link, each check, score,
tokens, run time, the supervisor's comment and what it cites), the winner among the variants that
succeeded, the failed one's reason, the candidate file and a bar chart of the scores; a 390x844 phone
sees it without sideways scrolling; another tenant's key gets not found. Screenshots go to
test-artifacts/dashboard/console-experiments*.png (docs/img with GENWORKER_DOCS_SCREENSHOTS=1)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from tests.e2e.test_dashboard_browser import A11Y_PROBLEMS, GLOBEX, WAIT_MS, go, log_in, shot
from tests.e2e.test_dashboard_browser import browser as browser
from tests.e2e.test_dashboard_browser import page as page
from tests.e2e.test_dashboard_console_browser import OVERFLOW, PHONE, doc_shot, raw_badges

from genworker.auth import ApiKeyStore
from genworker.testing import Fail, Reply, Respond, ScriptedModelServer, When, serve

# Words split over two lines in the variants table's headers and cells (an id or a path may break).
SPLIT_WORDS = """() => [...document.querySelectorAll('.experiment-variants :is(th, td)')].flatMap((cell) => {
  const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
  const split = [];
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (node.parentElement.closest('code')) continue;
    for (const m of node.textContent.matchAll(/[A-Za-z]+/g)) {
      const range = document.createRange();
      range.setStart(node, m.index);
      range.setEnd(node, m.index + m[0].length);
      if (new Set([...range.getClientRects()].map((r) => Math.round(r.top))).size > 1) split.push(m[0]);
    }
  }
  return split;
})"""
QUESTION = "Which three points belong in this morning's brief for Dana?"
LONG_ANSWER = "The board pack, the budget review, the hiring plan and the offsite."  # over 60 characters
COMMENT = {"concern": "no_evidence", "text": "Nothing shows the board meeting moved.", "cites": ["output"]}


@dataclass(frozen=True)
class Lab:
    url: str
    demo: str  # API keys
    globex: str
    experiment: dict[str, Any]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, demo_workspace_src: Path) -> Iterator[Lab]:
    tmp = tmp_path_factory.mktemp("experiments")
    workspace = tmp / "workspace"
    shutil.copytree(demo_workspace_src, workspace)
    model_review = {"enabled": True, "events": ["final"], "max_calls": 1}
    reviewer = {"attach": {"experiments": ["exp_brief"]}, "model": model_review}
    files = {**GLOBEX, "tenants/demo/workers/assistant/supervisors/reviewer.json": json.dumps(reviewer)}
    for rel, text in files.items():
        (workspace / rel).parent.mkdir(parents=True, exist_ok=True)
        (workspace / rel).write_text(text, encoding="utf-8")
    demo = ApiKeyStore(workspace).create("demo", label="experiments browser test")[1]
    globex = ApiKeyStore(workspace).create("globex")[1]
    body = {
        "experiment_id": "exp_brief",
        "question": QUESTION,
        "variants": {
            "thorough": {"instructions": "VARIANT-THOROUGH: cover every meeting in detail.", "tier": "strong"},
            "broken": {"instructions": "VARIANT-BROKEN"},
            "brief": {"instructions": "VARIANT-BRIEF: three short lines.", "tier": "fast", "tools": ["file_read"]},
        },
        "protocol": {
            "checks": [
                {"kind": "contains", "value": "board"},
                {"kind": "max_chars", "value": 60, "required": False},
            ]
        },
        "target": {"kind": "skill", "id": "daily-brief"},
        "max_parallel": 3,
    }
    with ScriptedModelServer() as model:
        model.expect(
            Respond(lambda _: Reply(json.dumps({"comments": [COMMENT]})), "You supervise"),
            Respond(lambda _: Reply(LONG_ANSWER), "VARIANT-THOROUGH"),
            When("VARIANT-BROKEN", Fail(500)),
            When("VARIANT-DOWN", Fail(500)),
            Respond(lambda _: Reply("Nothing to report."), "VARIANT-VAGUE"),
            Respond(lambda _: Reply("The board pack is due Friday."), "VARIANT-BRIEF"),
        )
        with serve(tmp, workspace, model) as server:
            answer = httpx.post(
                server.url + "/api/v1/workers/assistant/experiments?wait=true",
                json=body, headers={"Authorization": f"Bearer {demo}"}, timeout=120,
            )  # fmt: skip
            assert answer.status_code == 201, answer.text
            experiment = answer.json()["experiment"]
            variants = {"down": {"instructions": "VARIANT-DOWN"}, "vague": {"instructions": "VARIANT-VAGUE"}}
            none = {**body, "experiment_id": "exp_none", "variants": variants, "target": None}
            failed = httpx.post(
                server.url + "/api/v1/workers/assistant/experiments?wait=true",
                json=none, headers={"Authorization": f"Bearer {demo}"}, timeout=120,
            )  # fmt: skip
            assert failed.json()["experiment"]["state"] == "failed", failed.text
            assert experiment["state"] == "succeeded" and experiment["winner"] == "brief", experiment
            yield Lab(server.url, demo, globex, experiment)


def test_the_list_and_one_experiment_compared_with_its_winner_failure_and_chart(page: Any, lab: Lab) -> None:
    from playwright.sync_api import expect

    log_in(page, lab.url, lab.demo)
    go(page, "#/workers/assistant")
    page.locator("#view-worker .page-links").get_by_role("link", name="Experiments").click()
    expect(page.locator("body[data-page=experiments]")).to_have_count(1)
    listing = page.locator("#view-experiments table.experiments-list")
    expect(listing).to_contain_text("exp_brief")
    expect(listing).to_contain_text(QUESTION)
    expect(listing).to_contain_text("Succeeded")
    listing.get_by_role("link", name="exp_brief").click()
    expect(page.locator("#h-experiments")).to_have_text("Experiment exp_brief of assistant")

    page.goto(f"{lab.url}/dashboard#/workers/assistant/experiments/exp_brief")  # a deep link, opened fresh
    view = page.locator("#view-experiments")
    expect(page.locator("body[data-page=experiments]")).to_have_count(1)
    expect(page.locator("#crumbs")).to_have_text("Overview › assistant › Experiments")
    expect(view.locator(".question")).to_have_text(QUESTION)
    expect(view.locator(".outcome")).to_have_text("Winner: brief, the best of the variants that succeeded.")
    rows = view.locator("table.experiment-variants tbody tr")
    expect(rows).to_have_count(3)
    thorough, broken, brief = (rows.nth(i) for i in range(3))
    expect(brief.locator("td[data-label=Variant]")).to_contain_text("Winner")
    for row in (thorough, broken):
        expect(row.locator("td[data-label=Variant] .badge[data-value=winner]")).to_have_count(0)
    expect(brief.locator("td[data-label=Settings]")).to_contain_text("Fast")
    expect(brief.locator("td[data-label=Settings]")).to_contain_text("file_read")
    expect(brief.locator("td[data-label=Checks]")).to_contain_text("Passed Contains “board”")
    expect(brief.locator("td[data-label=Score]")).to_have_text("1.00")
    expect(thorough.locator("td[data-label=Score]")).to_have_text("0.50")
    expect(thorough.locator("td[data-label=Checks]")).to_contain_text("Failed At most 60 characters")
    expect(brief.locator("td[data-label=Supervisor]")).to_contain_text(COMMENT["text"])
    expect(brief.locator("td[data-label=Supervisor]")).to_contain_text("Cites output")
    expect(broken.locator("td[data-label=Variant]")).to_contain_text("Failed")
    expect(broken.locator("td[data-label=Run] .badge")).to_have_text("Failed")
    expect(broken.locator("td[data-label='Why it failed']")).not_to_have_text("None")
    expect(view).to_contain_text("runtime/experiments/exp_brief/candidate.md")
    chart = view.get_by_role("img", name="Score per variant: thorough 0.50, broken 0.50 (failed), brief 1.00")
    expect(chart).to_have_count(1)
    expect(chart.locator("rect.bar.bad")).to_have_count(1)  # the failed variant's bar in the failure colour
    expect(chart.locator("rect.bar.s0")).to_have_count(2)
    expect(view).not_to_contain_text("null")
    expect(view).not_to_contain_text("undefined")
    assert raw_badges(page) == []
    assert page.evaluate(A11Y_PROBLEMS) == []
    assert page.evaluate(SPLIT_WORDS) == []
    doc_shot(page, "experiments", full_page=True)

    go(page, "#/workers/assistant/experiments/exp_none")  # every variant failed: no winner, and why
    expect(view.locator(".outcome")).to_have_text("No winner: no variant succeeded")
    expect(view).to_contain_text("No candidate file.")
    expect(view.locator("table.experiment-variants .badge[data-value=winner]")).to_have_count(0)
    expect(view.locator("tbody tr", has_text="vague").locator("td[data-label='Why it failed']")).to_contain_text(
        "required checks failed"
    )
    go(page, "#/workers/assistant/experiments/exp_brief")

    run_id = next(v["run_id"] for v in lab.experiment["variants"] if v["name"] == "broken")
    broken.locator(f'a[href$="/runs/{run_id}"]').click()  # the variant's run opens in the run view
    expect(page.locator("body[data-page=run]")).to_have_count(1)


@contextmanager
def phone_of(browser: Any) -> Iterator[Any]:
    """A page in a 390x844 touch viewport of its own, closed after."""
    context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    context.set_default_timeout(WAIT_MS)
    try:
        yield context.new_page()
    finally:
        context.close()


def test_a_phone_and_another_tenants_key(browser: Any, page: Any, lab: Lab) -> None:
    from playwright.sync_api import expect

    with phone_of(browser) as phone:
        log_in(phone, lab.url, lab.demo)
        go(phone, "#/workers/assistant/experiments/exp_brief")
        expect(phone.locator("#view-experiments table.experiment-variants")).to_be_visible()
        assert phone.evaluate(OVERFLOW) <= 0, "the experiment page scrolls sideways on a phone"
        assert phone.evaluate(SPLIT_WORDS) == []
        shot(phone, "console-phone-experiments")

    log_in(page, lab.url, lab.globex)
    for route in ("experiments", "experiments/exp_brief"):
        page.goto(f"{lab.url}/dashboard#/workers/assistant/{route}")
        expect(page.locator("body[data-page=missing]")).to_have_count(1)
    for path in ("", "/exp_brief"):
        assert page.request.get(f"{lab.url}/api/v1/workers/assistant/experiments{path}").status == 404
    gina = page.request.get(f"{lab.url}/api/v1/workers/gina/experiments/exp_brief")
    assert gina.status == 404
    assert QUESTION not in page.evaluate("() => document.body.textContent")
