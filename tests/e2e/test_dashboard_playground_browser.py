"""The console's playground in a real browser (Playwright driving Chromium, with the fixtures and helpers of
test_dashboard_browser.py): from a worker's page to its playground, send a message through the chat API
(POST /api/v1/chat/stream over the session's cookie, LiteLLM to the scripted model server), see the answer
stream in with its tool call inline, then a file_write that needs a person's approval, approved inline: the
call runs and the run finishes. Then a phone, logging out (nothing of the conversation stays on the page or
in storage) and another tenant's key (no playground and no chat with demo's worker).

Screenshots: test-artifacts/dashboard/console-playground*.png (and docs/img/console-playground.png with
GENWORKER_DOCS_SCREENSHOTS=1).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.e2e.test_dashboard_browser import A11Y_PROBLEMS, GLOBEX, WAIT_MS, go, log_in, shot
from tests.e2e.test_dashboard_browser import browser as browser
from tests.e2e.test_dashboard_browser import page as page
from tests.e2e.test_dashboard_console_browser import OVERFLOW, PHONE, doc_shot

from genworker.auth import ApiKeyStore
from genworker.testing import Reply, ScriptedModelServer, ToolCallReply, serve

ASSISTANT = "tenants/demo/workers/assistant"
APPROVAL = "tool_effect_overrides: {file_write: {requires_approval: true}}\n"
MESSAGE = "Hello Iris, please read the notes file and keep a note for me."
ANSWER = "The board meets at ten; I will note it."
AFTER = "Noted in files/notes.md."
PLAYGROUND = "#/workers/assistant/playground"
STORAGE = "() => localStorage.length + sessionStorage.length"


def _workspace(root: Path) -> None:
    persona = root / ASSISTANT / "PERSONA.md"
    text = persona.read_text(encoding="utf-8")
    persona.write_text(text.replace("\nmode: personal\n", f"\nmode: personal\n{APPROVAL}", 1), encoding="utf-8")
    for rel, body in GLOBEX.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(body, encoding="utf-8")


def _continues_with_the_approved_result(body: dict[str, Any]) -> None:
    *_, assistant, approved = body["messages"]
    assert [c["id"] for c in assistant["tool_calls"]] == ["c2"]
    assert approved["role"] == "tool" and approved["tool_call_id"] == "c2" and "notes.md" in approved["content"]


def send(page: Any, text: str) -> None:
    page.get_by_label("Message to assistant").fill(text)
    page.keyboard.press("Enter")


def test_chat_with_a_tool_call_and_an_approval_inline(
    page: Any, browser: Any, demo_workspace: Path, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    _workspace(demo_workspace)
    demo = ApiKeyStore(demo_workspace).create("demo", label="playground browser test")[1]
    globex = ApiKeyStore(demo_workspace).create("globex")[1]
    read = ToolCallReply("file_read", {"path": "data/calendar.md"}, "c1")
    write = ToolCallReply("file_write", {"path": "files/notes.md", "content": "Board at 10"}, "c2")
    notes = demo_workspace / ASSISTANT / "files/notes.md"
    with ScriptedModelServer() as model, serve(tmp_path, demo_workspace, model) as server:
        model.expect(
            Reply(tool_calls=(read,)),
            Reply(ANSWER, tool_calls=(write,)),
            Reply(AFTER, check=_continues_with_the_approved_result),
            Reply("You are welcome."),  # the phone's message
        )
        log_in(page, server.url, demo)
        go(page, "#/workers/assistant")
        page.locator("#view-worker").get_by_role("link", name="Playground").click()
        expect(page.locator("body[data-page=playground]")).to_have_count(1)
        assert page.evaluate("location.hash") == PLAYGROUND
        view = page.locator("#view-playground")
        expect(view.get_by_label("Message to assistant")).to_be_visible()
        assert page.evaluate(A11Y_PROBLEMS) == []

        send(page, MESSAGE)
        log = view.get_by_role("log")
        expect(log.locator(".pg-turn.user")).to_have_text("You" + MESSAGE)
        reading = log.locator("details.pg-tool[data-tool=file_read]")
        expect(reading.locator("summary")).to_contain_text("Done")
        reading.locator("summary").click()
        expect(reading).to_contain_text('"path": "data/calendar.md"')
        expect(reading).to_contain_text("Leadership sync")  # the tool's result, from the demo's calendar
        answer = log.locator(".pg-turn.worker p.pg-text").first
        expect(answer).to_have_text(ANSWER)
        assert int(answer.get_attribute("data-deltas") or 0) > 1  # streamed in pieces, as the SSE events came
        writing = log.locator("details.pg-tool[data-tool=file_write]")
        expect(writing).to_have_attribute("open", "")
        expect(writing.locator("summary")).to_contain_text("Needs approval")
        expect(writing).to_contain_text('"content": "Board at 10"')
        first = log.locator(".pg-turn.worker").first
        expect(first.locator(".pg-foot")).to_contain_text("Waiting for approval")
        run_id = first.locator(".pg-foot .run-link code").inner_text()
        approve = page.get_by_role("button", name="Approve: file_write")
        expect(approve).to_be_enabled()  # once the confirmation of this run's call was found
        thread = view.locator(".pg-thread code").inner_text()
        assert not notes.exists()
        shot(page, "console-playground-waiting")

        approve.click()
        expect(writing.locator("summary")).to_contain_text("Approved")
        expect(approve).to_have_count(0)  # decided: no second decision offered
        expect(first.locator(".pg-foot")).to_contain_text("Replaced")  # the waiting run, superseded
        after = log.locator(".pg-turn.worker").nth(1)
        expect(after.locator("p.pg-text")).to_have_text(AFTER)
        expect(after.locator(".pg-foot")).to_contain_text("Completed")
        assert notes.read_text(encoding="utf-8") == "Board at 10"
        continued = after.locator(".pg-foot .run-link code").inner_text()
        record = page.request.get(f"{server.url}/api/v1/workers/assistant/runs/{continued}").json()
        assert (record["state"], record["thread_id"]) == ("completed", thread)
        assert page.request.get(f"{server.url}/api/v1/workers/assistant/runs/{run_id}").json()["state"] == "superseded"
        assert page.evaluate(A11Y_PROBLEMS) == []
        doc_shot(page, "playground", full_page=True)

        phone_context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
        phone_context.set_default_timeout(WAIT_MS)
        try:
            phone = phone_context.new_page()
            log_in(phone, server.url, demo)
            go(phone, PLAYGROUND)
            expect(phone.get_by_role("log").locator("li")).to_have_count(0)  # a conversation is the page's own
            send(phone, "Thanks!")
            expect(phone.get_by_role("log").locator(".pg-turn.worker .pg-foot")).to_contain_text("Completed")
            assert phone.evaluate(OVERFLOW) <= 0, "the playground scrolls sideways on a phone"
            shot(phone, "console-phone-playground")
        finally:
            phone_context.close()
        model.assert_done()

        page.get_by_role("button", name="Log out").click()
        expect(page.get_by_role("heading", name="Log in")).to_be_visible()
        text = page.evaluate("() => document.body.textContent")
        assert [s for s in (MESSAGE, ANSWER, AFTER, "Board at 10", run_id, continued, thread) if s in text] == []
        assert page.evaluate(STORAGE) == 0

        log_in(page, server.url, globex)
        go(page, PLAYGROUND)
        expect(page.locator("body[data-page=missing]")).to_have_count(1)
        csrf = page.evaluate("state.csrf")
        refused = page.request.post(
            f"{server.url}/api/v1/chat/stream",
            data={"worker_id": "assistant", "message": "Read Iris's notes"},
            headers={"X-CSRF-Token": csrf},
        )
        assert refused.status == 404, refused.text()
        for other in ("demo/assistant", "assistant"):
            listed = page.request.get(f"{server.url}/api/v1/workers/{other.replace('/', '%2F')}/confirmations")
            assert listed.status == 404, other
