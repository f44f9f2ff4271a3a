"""Editing a worker's files over the real app (issue #29, "editing that respects git"): an edit that
does not load is refused with the loader's file:line issues and never written; a valid save is written
atomically, committed alone to the workspace's git repository with the key's label as author and the
client's message, and the worker is reloaded; a file changed on disk since it was opened is a 409
naming it; a commit git refuses puts the file back and leaves the index as it was; another tenant's key
reaches nothing; paths outside the allow-list (`..`, absolute, symlinks out, other files) are refused.

The workspaces are tmp copies made into real git repositories with the real `git`."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.integration.test_dashboard_api import running

from genworker.auth import ApiKeyStore
from genworker.testing import ScriptedModelServer

ALICE = "tenants/acme/workers/alice"
PERSONA = "---\nidentity:\n  name: Alice\n  worker_id: alice\n  role: assistant\nmode: personal\n---\nYou are alice.\n"
DUTY = "---\nduty_id: nightly\ntitle: Nightly export\ntriggers: [{id: now, type: manual}]\n---\nExport.\n"
GOAL = "---\ngoal_id: launch\ntitle: Launch\nduty_refs: [nightly]\n---\nWhy.\n"
GIT_ENV = {"PATH": os.environ["PATH"], "HOME": "/", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}


def git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(root), "-c", "user.name=Operator", "-c", "user.email=op@example.com", *args],
        capture_output=True,
        encoding="utf-8",
        env=GIT_ENV,
        check=True,
    )
    return done.stdout.strip()


@pytest.fixture
def workspace(small_workspace: Callable[..., Path]) -> Path:
    return small_workspace(
        {"acme": ["alice", "bob"], "globex": ["gina"]},
        {f"{ALICE}/PERSONA.md": PERSONA, f"{ALICE}/duties/nightly.md": DUTY, f"{ALICE}/goals/launch.md": GOAL},
    )


@pytest.fixture
def repo(workspace: Path) -> Path:
    """The workspace as a git repository with everything committed by the operator; the runtime's
    state folders ignored, as a workspace kept in git does."""
    state = ["runtime/", "auth/", "sessions/", "memory/", "runs/", "tasks/", ".journal/", ".locks/"]
    (workspace / ".gitignore").write_text("\n".join(state) + "\n", encoding="utf-8")
    git(workspace, "init", "-q", "-b", "main")
    git(workspace, "add", "-A")
    git(workspace, "commit", "-q", "-m", "the workspace")
    return workspace


@pytest.fixture
def client(tmp_path: Path, repo: Path, model_server: ScriptedModelServer) -> Iterator[TestClient]:
    with running(tmp_path, repo, model_server) as client:
        yield client
    assert model_server.requests == []  # editing never calls a model


def auth(workspace: Path, tenant: str = "acme", label: str = "Ada Lovelace", workers: list[str] | None = None) -> Any:
    return {"Authorization": f"Bearer {ApiKeyStore(workspace).create(tenant, workers, label=label)[1]}"}


def files_url(worker: str, path: str = "") -> str:
    return f"/api/v1/workers/{worker}/files" + (f"/{path}" if path else "")


def check_url(worker: str) -> str:
    return f"/api/v1/workers/{worker}/validate-file"


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if p.name.endswith(".tmp"))


def test_an_edit_that_does_not_load_is_refused_with_file_and_line_and_never_written(
    client: TestClient, repo: Path
) -> None:
    headers = auth(repo)
    opened = client.get(files_url("alice", "PERSONA.md"), headers=headers).json()
    assert opened["content"] == PERSONA and opened["version"].startswith("sha256:")
    broken = PERSONA.replace("role: assistant", "role: {a: 1}")  # line 5

    checked = client.post(check_url("alice"), json={"path": "PERSONA.md", "content": broken}, headers=headers)
    assert checked.status_code == 200, checked.text
    assert checked.json()["valid"] is False
    assert [(i["file"], i["line"], i["field"], i["severity"]) for i in checked.json()["issues"]] == [
        (f"{ALICE}/PERSONA.md", 5, "identity.role", "error")
    ]

    body = {"content": broken, "base_version": opened["version"], "message": "break it"}
    refused = client.put(files_url("alice", "PERSONA.md"), json=body, headers=headers)
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["code"] == "invalid_edit"
    assert refused.json()["error"]["issues"][0]["line"] == 5
    assert (repo / ALICE / "PERSONA.md").read_text(encoding="utf-8") == PERSONA
    assert git(repo, "log", "--format=%s") == "the workspace"
    assert git(repo, "status", "--porcelain") == ""
    assert leftovers(repo) == []

    # an edit that loads alone but breaks another file: renaming the duty a goal refers to
    renamed = DUTY.replace("duty_id: nightly", "duty_id: weekly")
    checked = client.post(check_url("alice"), json={"path": "duties/nightly.md", "content": renamed}, headers=headers)
    assert checked.json()["valid"] is False
    assert [(i["file"], i["message"]) for i in checked.json()["issues"]] == [
        (f"{ALICE}/goals/launch.md", "references unknown duties ['nightly']")
    ]
    fine = client.post(check_url("alice"), json={"path": "PERSONA.md", "content": PERSONA}, headers=headers)
    assert fine.json() == {"path": "PERSONA.md", "file": f"{ALICE}/PERSONA.md", "valid": True, "issues": []}


def test_a_valid_save_is_committed_alone_with_the_person_and_message_and_hot_reloaded(
    client: TestClient, repo: Path
) -> None:
    headers = auth(repo, label="Ada Lovelace")
    (repo / "notes.md").write_text("someone else's work in progress\n", encoding="utf-8")
    git(repo, "add", "notes.md")  # staged by someone else: stays staged, out of the commit
    (repo / ALICE / "PERSONA.md").chmod(0o644)
    listed = client.get(files_url("alice"), headers=headers).json()
    assert [f["path"] for f in listed["files"]] == ["PERSONA.md", "duties/nightly.md", "goals/launch.md"]
    assert listed["git"] == {"repository": True, "author": "Ada Lovelace", "note": ""}
    version = next(f["version"] for f in listed["files"] if f["path"] == "PERSONA.md")

    edited = PERSONA.replace("name: Alice", "name: Alice the Second")
    body = {"content": edited, "base_version": version, "message": "Rename Alice"}
    saved = client.put(files_url("alice", "PERSONA.md"), json=body, headers=headers)
    assert saved.status_code == 200, saved.text
    answer = saved.json()
    assert answer["changed"] is True and answer["reload"]["ok"] is True
    assert answer["commit"]["sha"] == git(repo, "rev-parse", "HEAD")
    assert (repo / ALICE / "PERSONA.md").read_text(encoding="utf-8") == edited
    assert (repo / ALICE / "PERSONA.md").stat().st_mode & 0o777 == 0o644  # the file's mode is kept
    assert leftovers(repo) == []
    author = git(repo, "log", "-1", "--format=%an|%ae|%cn|%s")
    key_id = answer["commit"]["email"].split("@")[0]
    assert author == f"Ada Lovelace|{key_id}@acme.genworker.invalid|Ada Lovelace|Rename Alice"
    assert git(repo, "show", "--name-only", "--format=", "HEAD") == f"{ALICE}/PERSONA.md"
    assert git(repo, "diff", "--cached", "--name-only") == "notes.md"
    assert git(repo, "status", "--porcelain", "--", ALICE) == ""

    overview = client.get("/api/v1/dashboard/overview", headers=headers).json()  # the runtime serves the edit
    assert {w["worker_id"]: w["name"] for w in overview["workers"]}["alice"] == "Alice the Second"

    again = client.get(files_url("alice", "PERSONA.md"), headers=headers).json()
    assert again["version"] == answer["version"]

    # a new duty (base_version null): added to git and committed alone
    new = {"content": DUTY.replace("nightly", "hourly"), "base_version": None, "message": ""}
    created = client.put(files_url("alice", "duties/hourly.md"), json=new, headers=headers)
    assert created.status_code == 200, created.text
    assert git(repo, "show", "--name-only", "--format=%s", "HEAD").splitlines() == [
        "Edit duties/hourly.md of worker alice",
        "",
        f"{ALICE}/duties/hourly.md",
    ]
    assert git(repo, "diff", "--cached", "--name-only") == "notes.md"
    duties = client.get("/api/v1/workers/alice/duties", headers=headers).json()
    assert "hourly" in {d["duty_id"] for d in duties["duties"]}


def test_a_file_changed_on_disk_since_it_was_opened_is_a_409_naming_it(client: TestClient, repo: Path) -> None:
    headers = auth(repo)
    opened = client.get(files_url("alice", "goals/launch.md"), headers=headers).json()
    theirs = GOAL.replace("title: Launch", "title: Launch soon")
    (repo / ALICE / "goals/launch.md").write_text(theirs, encoding="utf-8")  # someone else, meanwhile

    mine = {"content": GOAL.replace("title: Launch", "title: Launch now"), "base_version": opened["version"]}
    conflict = client.put(files_url("alice", "goals/launch.md"), json=mine, headers=headers)
    assert conflict.status_code == 409, conflict.text
    error = conflict.json()["error"]
    assert error["code"] == "edit_conflict" and error["file"] == f"{ALICE}/goals/launch.md"
    assert f"{ALICE}/goals/launch.md changed on disk" in error["message"]
    assert (repo / ALICE / "goals/launch.md").read_text(encoding="utf-8") == theirs
    assert git(repo, "log", "--format=%s") == "the workspace"

    create = client.put(files_url("alice", "goals/launch.md"), json={**mine, "base_version": None}, headers=headers)
    assert create.status_code == 409 and "was created on disk" in create.json()["error"]["message"]


def test_a_commit_git_refuses_puts_the_file_back_and_leaves_the_index_alone(client: TestClient, repo: Path) -> None:
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\necho 'commits are frozen today' >&2\nexit 1\n", encoding="utf-8")
    hook.chmod(0o755)
    headers = auth(repo)
    version = client.get(files_url("alice", "PERSONA.md"), headers=headers).json()["version"]
    edited = {"content": PERSONA.replace("Alice", "Alicia", 1), "base_version": version}
    refused = client.put(files_url("alice", "PERSONA.md"), json=edited, headers=headers)
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["code"] == "git_refused"
    assert "commits are frozen today" in refused.json()["error"]["message"]
    assert (repo / ALICE / "PERSONA.md").read_text(encoding="utf-8") == PERSONA

    new = client.put(
        files_url("alice", "duties/extra.md"), json={"content": DUTY, "base_version": None}, headers=headers
    )
    assert new.status_code == 409
    assert not (repo / ALICE / "duties/extra.md").exists()
    assert git(repo, "status", "--porcelain") == ""  # nothing half-staged


def test_another_tenants_key_and_a_key_for_other_workers_reach_nothing(client: TestClient, repo: Path) -> None:
    globex = auth(repo, "globex")
    bob_only = auth(repo, "acme", workers=["bob"])
    version = client.get(files_url("alice", "PERSONA.md"), headers=auth(repo)).json()["version"]
    changed = {"content": PERSONA.replace("Alice", "Mallory", 1), "base_version": version}
    for headers in (globex, bob_only):
        assert client.get(files_url("alice"), headers=headers).status_code == 404
        assert client.get(files_url("alice", "PERSONA.md"), headers=headers).status_code == 404
        check = {"path": "PERSONA.md", "content": PERSONA}
        assert client.post(check_url("alice"), json=check, headers=headers).status_code == 404
        assert client.put(files_url("alice", "PERSONA.md"), json=changed, headers=headers).status_code == 404
    assert client.get(files_url("gina"), headers=auth(repo)).status_code == 404  # and acme's key not globex's
    assert (repo / ALICE / "PERSONA.md").read_text(encoding="utf-8") == PERSONA
    assert git(repo, "log", "--format=%s") == "the workspace"


def test_paths_outside_the_workers_own_files_are_refused(client: TestClient, repo: Path) -> None:
    headers = auth(repo)
    (repo / ALICE / "duties/bob.md").symlink_to(repo / "tenants/acme/workers/bob/PERSONA.md")
    (repo / ALICE / "skills").mkdir()
    (repo / ALICE / "skills/elsewhere").symlink_to(repo / "tenants/globex/workers/gina", target_is_directory=True)
    refused = [
        "%2E%2E/bob/PERSONA.md",
        "duties/%2E%2E/%2E%2E/bob/PERSONA.md",
        "%2Fetc/passwd",
        "duties/bob.md",  # a symlink, here to another worker's file
        "skills/elsewhere/PERSONA.md",  # through a symlinked folder to another tenant
        "CHANNEL_CREDENTIALS.json",
        "runtime/state.md",
        "skills/tool/graph.py",
        "duties/.hidden.md",
    ]
    content = {"content": PERSONA, "base_version": None}
    for path in refused:
        got = client.get(files_url("alice", path), headers=headers)
        put = client.put(files_url("alice", path), json=content, headers=headers)
        assert (got.status_code, put.status_code) in ((422, 422), (404, 404)), (path, got.text, put.text)
        if put.status_code == 422:
            assert ["path", "file_path"] in [f["loc"] for f in put.json()["error"]["fields"]], put.text
    assert client.get(files_url("alice", "duties/bob.md"), headers=headers).json()["error"]["code"] == "path_refused"
    escaped = client.post(check_url("alice"), json={"path": "../bob/PERSONA.md", "content": ""}, headers=headers)
    assert escaped.status_code == 422
    assert [f["path"] for f in client.get(files_url("alice"), headers=headers).json()["files"]] == [
        "PERSONA.md",
        "duties/nightly.md",
        "goals/launch.md",
    ]
    assert (repo / "tenants/acme/workers/bob/PERSONA.md").read_text(encoding="utf-8").startswith("---")
    assert git(repo, "log", "--format=%s") == "the workspace"


def test_outside_git_a_save_only_writes_and_below_trust_2_no_stdio_mcp_server_is_added(
    tmp_path: Path, small_workspace: Callable[..., Path], model_server: ScriptedModelServer
) -> None:
    workspace = small_workspace(
        {"acme": ["alice"]}, {"tenants/acme/TENANT.json": '{"tenant_id": "acme", "name": "acme", "trust_level": 0}'}
    )
    headers = auth(workspace)
    with running(tmp_path, workspace, model_server) as client:
        opened = client.get(files_url("alice", "PERSONA.md"), headers=headers).json()
        assert client.get(files_url("alice"), headers=headers).json()["git"]["repository"] is False
        stdio = opened["content"].replace(
            "mode: personal\n", "mode: personal\nmcp_servers:\n  - {name: sh, command: sh}\n"
        )
        body = {"content": stdio, "base_version": opened["version"]}
        refused = client.put(files_url("alice", "PERSONA.md"), json=body, headers=headers)
        assert refused.status_code == 422, refused.text
        (issue,) = refused.json()["error"]["issues"]
        assert (issue["field"], issue["line"]) == ("mcp_servers", 8)  # the entry
        assert "run a command on the server" in issue["message"]

        renamed = opened["content"].replace("name: Alice", "name: Alicia")
        saved = client.put(files_url("alice", "PERSONA.md"), json={**body, "content": renamed}, headers=headers)
        assert saved.status_code == 200, saved.text
        assert saved.json()["commit"] is None
        assert saved.json()["git"] == {
            "repository": False,
            "committed": False,
            "reason": "the workspace is not a git repository",
        }
        assert (workspace / ALICE / "PERSONA.md").read_text(encoding="utf-8") == renamed
