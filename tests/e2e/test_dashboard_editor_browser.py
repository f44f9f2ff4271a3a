"""The console's editor in a real browser (Playwright driving Chromium, the fixtures of
test_dashboard_browser.py) on the demo workspace kept in a real git repository: an edit of PERSONA.md
that does not load shows the loader's error with its line, Save stays disabled and nothing is written;
the fixed edit is saved, committed to git with the key's label and the message typed, and the runtime
serves it at once (hot reload). Screenshot: test-artifacts/dashboard/console-editor.png (and
docs/img/console-editor.png with GENWORKER_DOCS_SCREENSHOTS=1)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.test_dashboard_browser import A11Y_PROBLEMS, log_in
from tests.e2e.test_dashboard_browser import browser as browser
from tests.e2e.test_dashboard_browser import page as page
from tests.e2e.test_dashboard_console_browser import doc_shot

from genworker.auth import ApiKeyStore
from genworker.testing import ScriptedModelServer, serve

PERSONA = "tenants/demo/workers/assistant/PERSONA.md"
STATE = ["runtime/", "auth/", "sessions/", "memory/", "runs/", "tasks/", ".journal/", "briefs/", "reports/"]


def git(root: Path, *args: str) -> str:
    env = {"PATH": os.environ["PATH"], "HOME": "/", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    identity = ["-c", "user.name=Operator", "-c", "user.email=op@example.com"]
    done = subprocess.run(["git", "-C", str(root), *identity, *args], capture_output=True, encoding="utf-8", env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture
def server(tmp_path: Path, demo_workspace: Path) -> Iterator[tuple[str, str, Path]]:
    # inbox-triage sweeps on every half hour: a slot falling within the test would ask the model, and the
    # check below is that editing asks it nothing
    triage = demo_workspace / "tenants/demo/workers/assistant/duties/inbox-triage.md"
    triage.write_text(triage.read_text(encoding="utf-8").replace("interval: 30m", "interval: 7d"), encoding="utf-8")
    (demo_workspace / ".gitignore").write_text("\n".join(STATE) + "\n", encoding="utf-8")
    git(demo_workspace, "init", "-q", "-b", "main")
    git(demo_workspace, "add", "-A")
    git(demo_workspace, "commit", "-q", "-m", "the demo workspace")
    key = ApiKeyStore(demo_workspace).create("demo", label="Ada Lovelace")[1]
    with ScriptedModelServer() as model, serve(tmp_path, demo_workspace, model) as live:
        yield live.url, key, demo_workspace
        assert model.requests == []


def test_an_invalid_edit_is_shown_and_not_saved_then_a_valid_one_is_committed_and_served(
    page: Any, server: tuple[str, str, Path]
) -> None:
    from playwright.sync_api import expect

    url, key, workspace = server
    original = (workspace / PERSONA).read_text(encoding="utf-8")
    role_line = original.splitlines().index("  role: Personal assistant to the CEO") + 1
    log_in(page, url, key)
    page.goto(f"{url}/dashboard#/workers/assistant")
    page.get_by_role("link", name="Edit files").click()
    expect(page.locator("body[data-page=edit]")).to_have_count(1)
    text = page.get_by_label("Text of")
    expect(text).to_have_value(original)  # PERSONA.md opens first
    save = page.get_by_role("button", name="Save")
    issues = page.locator("#editor-issues")
    expect(issues).to_contain_text("Loads without errors")

    text.fill(original.replace("  role: Personal assistant to the CEO", "  role: {a: 1}"))
    expect(issues.locator("li.issue.error")).to_contain_text(f"line {role_line} · identity.role")
    expect(save).to_be_disabled()
    issues.get_by_role("button", name=f"line {role_line}").click()  # selects the line in the text
    assert text.evaluate("(t) => t.value.slice(t.selectionStart, t.selectionEnd)") == "  role: {a: 1}"
    assert page.evaluate(A11Y_PROBLEMS) == []
    doc_shot(page, "editor")
    assert (workspace / PERSONA).read_text(encoding="utf-8") == original
    assert git(workspace, "log", "--format=%s") == "the demo workspace"

    text.fill(original.replace("name: Iris", "name: Iris the Second", 1))
    page.get_by_label("Commit message").fill("Rename Iris")
    expect(save).to_be_enabled()
    save.click()
    expect(page.locator("#editor-result")).to_contain_text("Saved and committed")
    sha = git(workspace, "rev-parse", "HEAD")
    expect(page.locator("#editor-result code.sha")).to_have_text(sha[:12])
    assert git(workspace, "log", "-1", "--format=%an|%s") == "Ada Lovelace|Rename Iris"
    assert git(workspace, "show", "--name-only", "--format=", "HEAD") == PERSONA
    assert "name: Iris the Second" in (workspace / PERSONA).read_text(encoding="utf-8")
    expect(save).to_be_disabled()  # nothing left to save

    page.get_by_role("link", name="assistant").first.click()  # the worker's page: the runtime serves the edit
    expect(page.locator("#h-worker")).to_have_text("Iris the Second (assistant)")
