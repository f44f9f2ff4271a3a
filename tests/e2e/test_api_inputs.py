"""Bad input at the HTTP edge, over real HTTP: an invalid id in any path is a 4xx in the error format
before anything touches the disk; a reload names only the key's tenant's workers; feedback whose text
holds a line separator reads back."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx2 as httpx
import pytest

from genworker.api.app import create_app
from genworker.auth import ApiKeyStore
from genworker.settings import load_settings
from genworker.testing import ScriptedModelServer, scripted_env
from genworker.testing.live_server import LiveServer

GOAL = (
    "---\ngoal_id: launch\ntitle: Launch\nmilestones:\n  - id: build\n    title: Build\n    tasks:\n"
    "      - {id: api, title: The API}\n---\nWhy.\n"
)
DUTY = "---\nduty_id: nightly\ntitle: Nightly\ntriggers: [{id: now, type: manual}]\n---\nExport.\n"


def _persona(worker_id: str) -> str:
    return f"---\nidentity:\n  name: {worker_id.title()}\n  worker_id: {worker_id}\n---\nYou are {worker_id}.\n"


def _tenant(tenant_id: str, default: str) -> str:
    return f'{{"tenant_id": "{tenant_id}", "name": "{tenant_id}", "default_worker": "{default}"}}'


# No sensor, schedule or heartbeat: nothing in the runtime writes files unless a request does.
FILES = {
    "tenants/acme/TENANT.json": _tenant("acme", "alice"),
    "tenants/acme/workers/alice/PERSONA.md": _persona("alice"),
    "tenants/acme/workers/alice/goals/launch.md": GOAL,
    "tenants/acme/workers/alice/duties/nightly.md": DUTY,
    "tenants/globex/TENANT.json": _tenant("globex", "gina"),
    "tenants/globex/workers/gina/PERSONA.md": _persona("gina"),
}


@dataclass
class Api:
    url: str
    workspace: Path
    headers: dict[str, str]

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return httpx.request(method, self.url + path, headers=self.headers, timeout=30, **kwargs)


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    root = tmp_path_factory.mktemp("api-inputs")
    workspace = root / "workspace"
    for rel, text in FILES.items():
        (workspace / rel).parent.mkdir(parents=True, exist_ok=True)
        (workspace / rel).write_text(text, encoding="utf-8")
    headers = {"Authorization": f"Bearer {ApiKeyStore(workspace).create('acme')[1]}"}
    (root / "configs").mkdir()
    with ScriptedModelServer() as model:
        settings = load_settings(root / "configs", scripted_env(model), workspace=workspace)
        with LiveServer(create_app(settings)) as server:
            yield Api(server.url, workspace, headers)
        assert model.requests == []  # no request here gets as far as a model


def files(root: Path) -> set[str]:
    found = set()
    for folder, dirs, names in os.walk(root):
        found.update(str(Path(folder, n).relative_to(root)) for n in [*dirs, *names])
    return found


# -- item: every path id is checked before anything touches the disk ----------------------------

VALID = {
    "worker_id": "alice",
    "tenant_id": "acme",
    "goal_id": "launch",
    "milestone_id": "build",
    "task_id": "api",
    "duty_id": "nightly",
    "adapter_id": "acme~alice~slack",
    "name": "queue_depth",
    "command": "pause",
    "decision": "reject",
    "file_path": "PERSONA.md",
}
# every route of the API with an id in its path (test_every_route_with_an_id_is_here keeps it whole)
ROUTES = [
    ("POST", "/api/v1/webhook/ingest/{worker_id}"),
    ("POST", "/api/v1/webhook/ingest/{tenant_id}/{worker_id}"),
    ("POST", "/api/v1/channel/{adapter_id}/webhook"),
    ("GET", "/api/v1/channel/{adapter_id}/webhook"),
    ("POST", "/api/v1/channel/{adapter_id}/interactivity"),
    ("POST", "/api/v1/channel/{adapter_id}/slash"),
    ("GET", "/api/v1/channel/{adapter_id}/status"),
    ("POST", "/api/v1/channel/{adapter_id}/test"),
    ("GET", "/api/v1/chat/{thread_id}/tasks"),
    ("GET", "/api/v1/chat/{thread_id}/queue"),
    ("GET", "/api/v1/workers/{worker_id}/runs"),
    ("GET", "/api/v1/workers/{worker_id}/runs/{run_id}"),
    ("POST", "/api/v1/workers/{worker_id}/runs/{run_id}/goal-evaluation"),
    ("POST", "/api/v1/workers/{worker_id}/runs/{run_id}/continue"),
    ("POST", "/api/v1/service/{tenant_id}/{worker_id}/chat/stream"),
    ("POST", "/api/v1/workers/{worker_id}/service/threads/{thread_id}/release"),
    ("GET", "/api/v1/workers/{worker_id}/confirmations"),
    ("GET", "/api/v1/workers/{worker_id}/confirmations/{confirmation_id}"),
    ("POST", "/api/v1/workers/{worker_id}/confirmations/{confirmation_id}/{decision}"),
    ("GET", "/api/v1/workers/{worker_id}/goals"),
    ("GET", "/api/v1/workers/{worker_id}/goals/{goal_id}"),
    ("PATCH", "/api/v1/workers/{worker_id}/goals/{goal_id}"),
    ("POST", "/api/v1/workers/{worker_id}/goals/{goal_id}/milestones/{milestone_id}"),
    ("POST", "/api/v1/workers/{worker_id}/goals/{goal_id}/tasks/{task_id}"),
    ("POST", "/api/v1/workers/{worker_id}/goals/{goal_id}/{command}"),
    ("GET", "/api/v1/workers/{worker_id}/suggestions"),
    ("POST", "/api/v1/workers/{worker_id}/suggestions/detect"),
    ("POST", "/api/v1/workers/{worker_id}/suggestions/{suggestion_id}/{decision}"),
    ("POST", "/api/v1/workers/{worker_id}/feedback"),
    ("GET", "/api/v1/workers/{worker_id}/feedback"),
    ("GET", "/api/v1/workers/{worker_id}/inbox"),
    ("POST", "/api/v1/workers/{worker_id}/inbox/{item_id}/requeue"),
    ("POST", "/api/v1/workers/{worker_id}/heartbeat/run"),
    ("GET", "/api/v1/workers/{worker_id}/heartbeat"),
    ("GET", "/api/v1/workers/{worker_id}/duties"),
    ("POST", "/api/v1/workers/{worker_id}/duties/{duty_id}/run"),
    ("GET", "/api/v1/workers/{worker_id}/duties/{duty_id}/executions"),
    ("PUT", "/api/v1/workers/{worker_id}/metrics/{name}"),
    ("GET", "/api/v1/workers/{worker_id}/metrics"),
    ("GET", "/api/v1/workers/{worker_id}/im-config"),
    ("PUT", "/api/v1/workers/{worker_id}/im-config"),
    ("POST", "/api/v1/workers/{worker_id}/im-config/reload"),
    ("GET", "/api/v1/workers/{worker_id}/im-config/status"),
    ("GET", "/api/v1/workers/{worker_id}/channel-replies"),
    ("POST", "/api/v1/workers/{worker_id}/channel-replies/{entry_id}/resend"),
    ("DELETE", "/api/v1/workers/{worker_id}/channel-replies/attention/{item_id}"),
    ("GET", "/api/v1/workers/{worker_id}/dashboard"),
    ("POST", "/api/v1/workers/{worker_id}/dashboard/suggestions/{suggestion_id}/{decision}"),
    ("GET", "/api/v1/workers/{worker_id}/briefs"),
    ("GET", "/api/v1/workers/{worker_id}/briefs/pending"),
    ("POST", "/api/v1/workers/{worker_id}/briefs/generate"),
    ("GET", "/api/v1/workers/{worker_id}/briefs/{brief_id}"),
    ("POST", "/api/v1/workers/{worker_id}/waiting"),
    ("GET", "/api/v1/workers/{worker_id}/waiting"),
    ("GET", "/api/v1/workers/{worker_id}/waiting/{plan_id}"),
    ("POST", "/api/v1/workers/{worker_id}/waiting/{plan_id}/resume"),
    ("POST", "/api/v1/workers/{worker_id}/waiting/{plan_id}/cancel"),
    ("GET", "/api/v1/workers/{worker_id}/spaces"),
    ("GET", "/api/v1/workers/{worker_id}/spaces/{space_id}"),
    ("GET", "/api/v1/workers/{worker_id}/spaces/{space_id}/events"),
    ("POST", "/api/v1/workers/{worker_id}/spaces/{space_id}/confirm"),
    ("POST", "/api/v1/workers/{worker_id}/spaces/{space_id}/refile"),
    ("POST", "/api/v1/workers/{worker_id}/spaces/{space_id}/unmerge"),
    ("POST", "/api/v1/workers/{worker_id}/spaces/{space_id}/pin"),
    ("POST", "/api/v1/workers/{worker_id}/spaces/{space_id}/revert"),
    ("POST", "/api/v1/workers/{worker_id}/spaces/sweep"),
    ("GET", "/api/v1/workers/{worker_id}/deferred-actions"),
    ("GET", "/api/v1/workers/{worker_id}/deferred-actions/{undo_id}"),
    ("POST", "/api/v1/workers/{worker_id}/deferred-actions/{undo_id}/undo"),
    ("GET", "/api/v1/workers/{worker_id}/outbox"),
    ("POST", "/api/v1/workers/{worker_id}/outbox/{entry_id}/resend"),
    ("POST", "/api/v1/workers/{worker_id}/duties/{duty_id}/runs/{run_id}/release"),
    ("GET", "/api/v1/workers/{worker_id}/dashboard/runs/{run_id}"),
    ("GET", "/api/v1/workers/{worker_id}/dashboard/autonomy"),
    ("GET", "/api/v1/workers/{worker_id}/dashboard/timeline"),
    ("GET", "/api/v1/workers/{worker_id}/dashboard/memory"),
    ("GET", "/api/v1/workers/{worker_id}/dashboard/supervision"),
    ("GET", "/api/v1/workers/{worker_id}/files"),
    ("POST", "/api/v1/workers/{worker_id}/validate-file"),
    ("GET", "/api/v1/workers/{worker_id}/files/{file_path}"),
    ("PUT", "/api/v1/workers/{worker_id}/files/{file_path}"),
    ("GET", "/api/v1/conflicts/{conflict_id}"),
    ("POST", "/api/v1/conflicts/{conflict_id}/resolve"),
    ("POST", "/api/v1/workers/{worker_id}/plans"),
    ("GET", "/api/v1/workers/{worker_id}/plans/{plan_id}"),
    ("POST", "/api/v1/workers/{worker_id}/plans/{plan_id}/finish"),
    ("POST", "/api/v1/workers/{worker_id}/feedback-events"),
    ("GET", "/api/v1/workers/{worker_id}/feedback-events"),
    ("GET", "/api/v1/workers/{worker_id}/learning"),
    ("GET", "/api/v1/workers/{worker_id}/learning/decisions"),
    ("GET", "/api/v1/workers/{worker_id}/supervisors"),
    ("PUT", "/api/v1/workers/{worker_id}/supervisors/{name}"),
    ("POST", "/api/v1/workers/{worker_id}/supervisors/{name}/attach"),
    ("GET", "/api/v1/workers/{worker_id}/runs/{run_id}/supervision"),
    ("POST", "/api/v1/workers/{worker_id}/runs/{run_id}/supervision/resolve"),
    ("POST", "/api/v1/workers/{worker_id}/experiments"),
    ("GET", "/api/v1/workers/{worker_id}/experiments"),
    ("GET", "/api/v1/workers/{worker_id}/experiments/{experiment_id}"),
    ("POST", "/api/v1/workers/{worker_id}/experiments/{experiment_id}/start"),
    ("POST", "/api/v1/workers/{worker_id}/learning/versions/{version}/apply"),
    ("POST", "/api/v1/workers/{worker_id}/learning/rollback"),
    ("POST", "/api/v1/workers/{worker_id}/learning/unfreeze"),
    ("POST", "/api/v1/workers/{worker_id}/memory/candidates"),
    ("GET", "/api/v1/workers/{worker_id}/memory/candidates"),
    ("POST", "/api/v1/workers/{worker_id}/memory/candidates/{candidate_id}/promote"),
    ("GET", "/api/v1/workers/{worker_id}/memory/facts"),
    ("POST", "/api/v1/workers/{worker_id}/memory/facts/{fact_id}/rollback"),
]
INVALID = {
    "too-long": "x" * 300,
    "dot-dot": "..",
    "dash": "-rf",
    "tilde": "~",
    "non-ascii": "café",
    "slash": "a/b",
}
CASES = [
    pytest.param(method, template, param, bad, id=f"{method} {template} {param}={label}")
    for method, template in ROUTES
    for param in [p.strip("{}") for p in template.split("/") if p.startswith("{")]
    if param not in ("command", "decision")
    for label, bad in INVALID.items()
]


def test_every_route_with_an_id_is_here(tmp_path: Path) -> None:
    spec = create_app(load_settings(tmp_path, {}, workspace=tmp_path)).openapi()
    with_ids = {(m.upper(), path) for path, ops in spec["paths"].items() if "{" in path for m in ops}
    assert with_ids == set(ROUTES)


def _segment(value: str) -> str:
    # dots encoded: an HTTP client removes a literal ".." segment before sending
    return quote(value, safe="").replace(".", "%2E")


@pytest.mark.parametrize(("method", "template", "param", "bad"), CASES)
def test_an_invalid_path_id_is_a_4xx_and_touches_no_file(
    api: Api, method: str, template: str, param: str, bad: str
) -> None:
    names = [part.strip("{}") for part in template.split("/") if part.startswith("{")]
    values = {name: _segment(VALID.get(name, "x1")) for name in names}
    values[param] = _segment(bad)
    before = files(api.workspace)
    answer = api.request(method, template.format_map(values), json={} if method in ("POST", "PUT", "PATCH") else None)
    assert 400 <= answer.status_code < 500, (answer.status_code, answer.text)
    error = answer.json()["error"]
    assert error["code"] and error["message"], error
    if answer.status_code == 422:
        assert ["path", param] in [f["loc"] for f in error["fields"]], error
    # The server's own loops (duty schedule, goal checks) may write while this runs: what must not
    # appear is a path made from the invalid id (the bug left `~.lock`, `-rf.lock`, ENAMETOOLONG).
    made = sorted(files(api.workspace) - before)
    from_id = [p for p in made if bad in p or any(part == bad or part.startswith(f"{bad}.") for part in Path(p).parts)]
    assert from_id == [], made


def test_the_issue_example_a_300_character_goal_id_is_refused_naming_the_rule(api: Api) -> None:
    answer = api.request("POST", f"/api/v1/workers/alice/goals/{'x' * 300}/pause")
    assert answer.status_code == 422
    (field,) = answer.json()["error"]["fields"]
    assert field["loc"] == ["path", "goal_id"] and "1-128 letters" in field["message"]
    assert not (api.workspace / "tenants/acme/workers/alice/runtime/locks").exists()


# -- item: feedback whose text holds a line separator ---------------------------------------------


def test_feedback_holding_line_separators_reads_back(api: Api) -> None:
    texts = ["a\u0085b", "c\u2028d", "e\u2029f", "plain"]
    for text in texts:
        posted = api.request("POST", "/api/v1/workers/alice/feedback", json={"text": text})
        assert posted.status_code == 201, posted.text
    listed = api.request("GET", "/api/v1/workers/alice/feedback")
    assert listed.status_code == 200, listed.text
    assert [f["text"] for f in listed.json()["feedback"]][:4] == texts[::-1]


def test_feedback_of_white_space_only_is_a_422(api: Api) -> None:
    for text in (" ", "\u2028", "\x1c"):  # white space as str.strip() sees it
        answer = api.request("POST", "/api/v1/workers/alice/feedback", json={"text": text})
        assert answer.status_code == 422, (text, answer.text)


# -- item: a reload names only workers of the key's tenant ---------------------------------------


def test_reload_of_a_worker_that_is_not_the_tenants_is_404_and_changes_nothing(api: Api) -> None:
    version = api.request("GET", "/api/v1/worker/ops/overview").json()["workspace_version"]
    for worker in ("nobody", "gina", "globex/gina", "acme/nobody"):
        answer = api.request("POST", "/api/v1/worker/ops/reload", json={"worker_id": worker})
        assert answer.status_code == 404, (worker, answer.text)
        assert answer.json()["error"]["code"] == "worker_not_found"
    assert api.request("GET", "/api/v1/worker/ops/overview").json()["workspace_version"] == version
    assert not (api.workspace / "tenants/acme/workers/gina").exists()


def test_reload_adds_a_new_worker_and_removes_a_deleted_one(api: Api) -> None:
    folder = api.workspace / "tenants/acme/workers/carol"
    folder.mkdir()
    (folder / "PERSONA.md").write_text(_persona("carol"), encoding="utf-8")
    added = api.request("POST", "/api/v1/worker/ops/reload", json={"worker_id": "carol"}).json()
    assert (added["ok"], added["removed"]) == (True, False)
    assert "carol" in api.request("GET", "/api/v1/worker/ops/overview").json()["workers"]
    shutil.rmtree(folder)
    removed = api.request("POST", "/api/v1/worker/ops/reload", json={"worker_id": "carol"}).json()
    assert (removed["ok"], removed["removed"]) == (True, True)
    again = api.request("POST", "/api/v1/worker/ops/reload", json={"worker_id": "carol"})
    assert again.status_code == 404  # gone from disk and from the registry
