"""The git sensor on a real repository: commits, branches, tags, restart, force-push, crash, truncation."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from genworker.autonomy.inbox import InboxItem
from genworker.autonomy.sensing import CursorStore, SensorRunner
from genworker.autonomy.sensing.testing import MemoryInboxWriter, write_worker

pytestmark = pytest.mark.anyio

GIT_ENV = {
    "PATH": os.environ.get("PATH", os.defpath),
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_AUTHOR_NAME": "Ada",
    "GIT_AUTHOR_EMAIL": "ada@acme.example",
    "GIT_COMMITTER_NAME": "Ada",
    "GIT_COMMITTER_EMAIL": "ada@acme.example",
}


class Repo:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True)
        self("init", "-q", "-b", "main")

    def __call__(self, *args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(self.path), *args],
            capture_output=True,
            encoding="utf-8",
            env=GIT_ENV,
            check=True,
            timeout=60,
        )
        return done.stdout.strip()

    def commit(self, message: str) -> str:
        self("commit", "-q", "--allow-empty", "-m", message)
        return self("rev-parse", "HEAD")


def sensor(**filter: Any) -> dict[str, Any]:
    return {
        "source_type": "git",
        "sensor_id": "app",
        "poll_interval": "1h",
        "filter": {"repo": "repos/app", **filter},
        "routing_rules": [
            {"field": "subject", "pattern": r"^(fix|hotfix)\b", "match": "regex", "route": "task"},
            {"field": "event_type", "pattern": "git.branch_rewritten", "match": "exact", "route": "isolated"},
        ],
        "fallback_route": "summary",
    }


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "ws"


@pytest.fixture
def repo(root: Path) -> Repo:
    repo = Repo(root / "tenants/acme/workers/w/repos/app")
    repo.commit("initial")
    return repo


def runner(root: Path, writer: MemoryInboxWriter, **filter: Any) -> SensorRunner:
    return SensorRunner(write_worker(root, [sensor(**filter)]), writer, workspace=root)


def summary(items: list[InboxItem]) -> list[tuple[str, ...]]:
    """(event, branch or tag[, subject of a commit]) per item."""
    out: list[tuple[str, ...]] = []
    for item in items:
        name = str(item.payload.get("branch") or item.payload.get("tag"))
        subject = (str(item.payload["subject"]),) if item.event_type == "git.commit" else ()
        out.append((item.event_type, name, *subject))
    return out


async def test_commits_branches_and_tags(root: Path, repo: Repo) -> None:
    writer = MemoryInboxWriter()
    run = runner(root, writer)
    assert await run.poll_now("app") == []  # baseline
    repo.commit("feat: one")
    repo.commit("fix: two")
    items = await run.poll_now("app")
    assert summary(items) == [("git.commit", "main", "feat: one"), ("git.commit", "main", "fix: two")]
    assert [i.route for i in items] == ["summary", "task"]
    assert items[0].payload["author_email"] == "ada@acme.example" and len(str(items[0].payload["sha"])) == 40
    assert tuple(items[1].payload["parents"]) == (items[0].payload["sha"],)
    repo("checkout", "-q", "-b", "feature/x")
    repo.commit("feat: on a branch")
    repo("tag", "v1")
    repo("tag", "-a", "v1.1", "-m", "release 1.1")
    items = await run.poll_now("app")
    assert summary(items) == [
        ("git.branch_created", "feature/x"),
        ("git.tag_created", "v1"),
        ("git.tag_created", "v1.1"),
    ]
    annotated = items[2].payload
    assert annotated["commit"] == repo("rev-parse", "HEAD") and annotated["sha"] != annotated["commit"]
    repo.commit("feat: more")
    repo("tag", "-f", "v1")
    items = await run.poll_now("app")
    assert summary(items) == [("git.commit", "feature/x", "feat: more"), ("git.tag_moved", "v1")]
    repo("checkout", "-q", "main")
    repo("branch", "-q", "-D", "feature/x")
    repo("tag", "-d", "v1.1")
    assert summary(await run.poll_now("app")) == [("git.branch_deleted", "feature/x"), ("git.tag_deleted", "v1.1")]
    assert await run.poll_now("app") == []


async def test_restart_repeats_nothing_and_reports_commits_made_while_stopped(root: Path, repo: Repo) -> None:
    writer = MemoryInboxWriter()
    first = runner(root, writer)
    await first.poll_now("app")
    repo.commit("one")
    assert len(await first.poll_now("app")) == 1
    await first.stop()
    repo.commit("two")
    repo.commit("three")
    repo("branch", "hotfix")
    second = runner(root, writer)
    items = await second.poll_now("app")
    assert summary(items) == [
        ("git.branch_created", "hotfix"),
        ("git.commit", "main", "two"),
        ("git.commit", "main", "three"),
    ]
    assert await second.poll_now("app") == [] and writer.dropped == []


async def test_force_push_reports_a_rewrite_and_the_new_commits(root: Path, repo: Repo) -> None:
    writer = MemoryInboxWriter()
    run = runner(root, writer)
    repo.commit("a")
    old = repo.commit("b")
    await run.poll_now("app")
    repo("reset", "-q", "--hard", "HEAD~2")
    repo.commit("rewritten")
    items = await run.poll_now("app")
    assert summary(items) == [("git.branch_rewritten", "main"), ("git.commit", "main", "rewritten")]
    rewrite = items[0]
    assert rewrite.payload["old_sha"] == old and rewrite.payload["new_sha"] == repo("rev-parse", "HEAD")
    assert rewrite.payload["old_sha_missing"] is False and rewrite.route == "isolated"
    # The old history is gone for good (garbage-collected): still a rewrite, with nothing to diff.
    repo("reset", "-q", "--hard", "HEAD~1")
    gone = repo.commit("after gc")
    repo("reflog", "expire", "--expire=now", "--all")
    repo("gc", "-q", "--prune=now")
    items = await run.poll_now("app")
    assert summary(items) == [("git.branch_rewritten", "main")]
    assert items[0].payload["old_sha_missing"] is True and items[0].payload["new_sha"] == gone


async def test_a_crash_before_the_cursor_moves_is_repaired_by_dedupe(
    root: Path, repo: Repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = MemoryInboxWriter()
    await runner(root, writer).poll_now("app")
    repo.commit("x")
    monkeypatch.setattr(CursorStore, "save", lambda self, cursor: (_ for _ in ()).throw(OSError("killed")))
    with pytest.raises(OSError):
        await runner(root, writer).poll_now("app")
    monkeypatch.undo()
    repo.commit("y")
    items = await runner(root, writer).poll_now("app")
    assert summary(items) == [("git.commit", "main", "y")]
    assert summary(writer.dropped) == [("git.commit", "main", "x")]
    assert summary(writer.items) == [("git.commit", "main", "x"), ("git.commit", "main", "y")]


async def test_branch_filter_and_tags_off(root: Path, repo: Repo) -> None:
    writer = MemoryInboxWriter()
    run = runner(root, writer, branches=["main", "release/*"], tags=False)
    await run.poll_now("app")
    repo("branch", "release/1")
    repo("branch", "wip")
    repo("tag", "v2")
    repo.commit("on main")
    assert summary(await run.poll_now("app")) == [
        ("git.commit", "main", "on main"),
        ("git.branch_created", "release/1"),
    ]


async def test_paths_keep_only_commits_touching_them_and_branch_is_an_alias(root: Path, repo: Repo) -> None:
    writer = MemoryInboxWriter()
    run = runner(root, writer, branch="main", paths=["models/metrics/**"])
    await run.poll_now("app")
    for rel, message in [("models/metrics/revenue.sql", "metric"), ("README.md", "docs"), ("models/x.sql", "other")]:
        target = repo.path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(message, encoding="utf-8")
        repo("add", rel)
        repo.commit(message)
    repo("branch", "side")
    assert summary(await run.poll_now("app")) == [("git.commit", "main", "metric")]


async def test_many_commits_are_truncated_to_the_newest(root: Path, repo: Repo) -> None:
    writer = MemoryInboxWriter()
    run = runner(root, writer, max_commits=2)
    await run.poll_now("app")
    for n in range(5):
        repo.commit(f"c{n}")
    items = await run.poll_now("app")
    assert summary(items) == [
        ("git.commits_truncated", "main"),
        ("git.commit", "main", "c3"),
        ("git.commit", "main", "c4"),
    ]
    assert (items[0].payload["total"], items[0].payload["reported"]) == (5, 2)


async def test_not_a_repository_degrades_with_gits_reason(root: Path) -> None:
    (root / "tenants/acme/workers/w/repos/app").mkdir(parents=True)
    writer = MemoryInboxWriter()
    run = runner(root, writer)
    assert await run.poll_all() == {}
    status = run.status("app")
    assert status.state == "degraded" and "not a git repository" in status.reason


async def test_a_repository_whose_data_lives_outside_the_tenant_is_refused(root: Path, tmp_path: Path) -> None:
    elsewhere = Repo(tmp_path / "other-tenant-repo")
    elsewhere.commit("secret history")
    checkout = root / "tenants/acme/workers/w/repos/app"
    checkout.mkdir(parents=True)
    (checkout / ".git").write_text(f"gitdir: {elsewhere.path / '.git'}\n", encoding="utf-8")
    writer = MemoryInboxWriter()
    run = runner(root, writer, on_first_poll="report")
    assert await run.poll_all() == {}
    assert "outside the tenant folder" in run.status("app").reason and writer.items == []
