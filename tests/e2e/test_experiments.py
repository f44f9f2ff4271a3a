"""Experiments over real HTTP with the scripted model (issue #33, seed §9): three variants where one
fails pick the best of the two that succeeded and write its candidate beside the skill, never over
it; all failed is a failed experiment with no winner; variants run read-only, each in its own memory
partition (one never sees what another answered, nothing outside the runtime state is written); a
model-written protocol waits for a person's review; another tenant's key sees nothing; the CLI runs
and shows one."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from tests.e2e.test_chat_api import key, serve

from genworker.cli import main
from genworker.experiments import Experiment, ExperimentSpec, ExperimentStore
from genworker.testing import Fail, Reply, ScriptedModelServer, ToolCallReply, When
from genworker.testing.live_server import LiveServer

SKILL = "tenants/acme/workers/alice/skills/shopping/SKILL.md"
STATE = ("runtime/", "runs/", "tasks/", "memory/episodes/")  # the runtime's own: runs, tasks, episodes, indexes


@pytest.fixture
def workspace(small_workspace: Callable[..., Path], keyword_skill: Callable[[str, str], str]) -> Path:
    return small_workspace({"acme": ["alice"], "globex": ["gina"]}, {SKILL: keyword_skill("shopping", "milk")})


def spec(**variants: str) -> dict[str, Any]:
    """Variants told apart by their instructions (the scripted model answers each by that text)."""
    return {
        "question": "What should I buy?",
        "variants": {name: {"instructions": text} for name, text in variants.items()},
        "protocol": {
            "checks": [
                {"kind": "contains", "value": "milk"},
                {"kind": "max_chars", "value": 40, "required": False},
            ]
        },
        "max_parallel": 3,
    }


def post(server: LiveServer, api_key: str, body: dict[str, Any], path: str = "", **params: str) -> httpx.Response:
    url = f"{server.url}/api/v1/workers/alice/experiments{path}"
    return httpx.post(url, json=body, params={"wait": "true", **params}, headers=_auth(api_key), timeout=120)


def _auth(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"}


def _run(server: LiveServer, api_key: str, run_id: str) -> dict[str, Any]:
    answer = httpx.get(f"{server.url}/api/v1/workers/alice/runs/{run_id}", headers=_auth(api_key))
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_of_three_variants_one_failing_the_best_successful_one_wins_and_becomes_a_candidate(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    def only_reads(body: dict[str, Any]) -> None:
        assert [t["function"]["name"] for t in body.get("tools", [])] == ["file_read"]

    model_server.expect(
        When("VARIANT-LONG", Reply("Milk, and then a long list of other things you might want.", check=only_reads)),
        When("VARIANT-BROKEN", Fail(500)),
        When("VARIANT-SHORT", Reply("Buy milk.")),
    )
    api_key = key(workspace, "acme")
    body = {
        **spec(long="VARIANT-LONG", broken="VARIANT-BROKEN", short="VARIANT-SHORT"),
        "target": {"kind": "skill", "id": "shopping"},
    }
    body["variants"]["long"] |= {"tools": ["file_read"], "tier": "strong"}  # its own tool set and tier
    body["variants"]["short"] |= {"tier": "fast"}
    production = (workspace / SKILL).read_text(encoding="utf-8")
    with serve(tmp_path, workspace, model_server) as server:
        answer = post(server, api_key, body)
        assert answer.status_code == 201, answer.text
        experiment = answer.json()["experiment"]
        shown = httpx.get(
            f"{server.url}/api/v1/workers/alice/experiments/{experiment['experiment_id']}", headers=_auth(api_key)
        ).json()["experiment"]
        runs = {v["name"]: _run(server, api_key, v["run_id"]) for v in experiment["variants"]}
    variants = {v["name"]: v for v in experiment["variants"]}
    assert experiment["state"] == "succeeded" and experiment["winner"] == "short" and shown == experiment
    assert variants["broken"]["run_state"] == "failed" and not variants["broken"]["evaluation"]["success"]
    assert variants["long"]["evaluation"]["success"] and variants["long"]["evaluation"]["score"] == 0.5
    assert variants["short"]["evaluation"]["score"] == 1.0 and variants["short"]["output"] == "Buy milk."
    for run in runs.values():  # each variant its own run: source experiment, read-only posture, no thread
        assert run["provenance"]["source_type"] == "experiment"
        assert run["provenance"]["governance_decision"]["posture"] == "proposal_only"
    assert len({r["run_id"] for r in runs.values()}) == 3
    assert {u["tier"] for u in runs["long"]["model_usage"]} == {"strong"}
    assert {u["tier"] for u in runs["short"]["model_usage"]} == {"fast"}
    candidate = experiment["candidate"]
    assert candidate["production"] == SKILL
    assert candidate["path"] == f"runtime/experiments/{experiment['experiment_id']}/candidate.md"
    text = (workspace / "tenants/acme/workers/alice" / candidate["path"]).read_text(encoding="utf-8")
    assert text.startswith(production) and "VARIANT-SHORT" in text and "variant short" in text
    assert (workspace / SKILL).read_text(encoding="utf-8") == production  # production untouched


def test_when_every_variant_fails_the_experiment_fails_with_no_winner(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    model_server.expect(
        When("VARIANT-ONE", Fail(500)),
        When("VARIANT-TWO", Reply("Bread.")),  # completes, but misses the required check
    )
    api_key = key(workspace, "acme")
    body = {**spec(one="VARIANT-ONE", two="VARIANT-TWO"), "target": {"kind": "skill", "id": "shopping"}}
    with serve(tmp_path, workspace, model_server) as server:
        answer = post(server, api_key, body)
    experiment = answer.json()["experiment"]
    assert answer.status_code == 201 and experiment["state"] == "failed", answer.text
    assert experiment["winner"] is None and experiment["candidate"] is None
    assert experiment["reason"] == "no variant succeeded"
    two = next(v for v in experiment["variants"] if v["name"] == "two")
    assert two["run_state"] == "completed" and "required checks failed: contains 'milk'" in two["evaluation"]["reason"]
    assert not (workspace / "tenants/acme/workers/alice/runtime/experiments" / experiment["experiment_id"]).exists()


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_variants_cannot_see_each_others_memory_nor_change_the_workspace(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    def sees_nothing_of_first(body: dict[str, Any]) -> None:
        assert "SECRET-FIRST-42" not in json.dumps(body["messages"])  # not in history, memory or anywhere

    def write_refused(body: dict[str, Any]) -> None:
        tool = next(m for m in body["messages"] if m["role"] == "tool")
        assert "proposal_only" in tool["content"], tool

    write = ToolCallReply("file_write", {"path": "files/out.md", "content": "changed"}, "w1")
    model_server.expect(  # max_parallel 1: the first variant has finished before the second starts
        When("VARIANT-FIRST", Reply("Writing.", tool_calls=(write,))),
        When("VARIANT-FIRST", Reply("Milk. SECRET-FIRST-42", check=write_refused)),
        When("VARIANT-SECOND", Reply("Milk too.", check=sees_nothing_of_first)),
    )
    api_key = key(workspace, "acme")
    worker = workspace / "tenants/acme/workers/alice"
    before = _files(worker)
    with serve(tmp_path, workspace, model_server) as server:
        answer = post(server, api_key, {**spec(first="VARIANT-FIRST", second="VARIANT-SECOND"), "max_parallel": 1})
    experiment = answer.json()["experiment"]
    assert experiment["state"] == "succeeded", answer.text
    run_ids = {v["run_id"] for v in experiment["variants"]}
    changed = {p for p, data in _files(worker).items() if before.get(p) != data}
    assert not (worker / "files/out.md").exists()
    assert sorted(p for p in changed if not p.startswith(STATE)) == []
    episodes = [p for p in changed if p.startswith("memory/episodes/")]
    assert len(episodes) == 2  # one per variant, each sealed into its own run's partition
    scopes = {
        line
        for p in episodes
        for line in (worker / p).read_text(encoding="utf-8").splitlines()
        if line.startswith("scope:")
    }
    assert scopes == {f'scope: "run:{r}"' for r in run_ids}


def test_a_model_written_protocol_waits_for_a_persons_review(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    model_server.expect(When("VARIANT-A", Reply("milk")), When("VARIANT-B", Reply("more milk")))
    api_key = key(workspace, "acme")
    body = {**spec(a="VARIANT-A", b="VARIANT-B"), "experiment_id": "reviewed-1"}
    body["protocol"] = {**body["protocol"], "origin": "model"}
    base = "/api/v1/workers/alice"
    with serve(tmp_path, workspace, model_server) as server:
        created = post(server, api_key, body)
        again = post(server, api_key, body)
        early = post(server, api_key, {}, "/reviewed-1/start")
        experiment = created.json()["experiment"]
        confirmation = experiment["review_confirmation_id"]
        approved = httpx.post(
            f"{server.url}{base}/confirmations/{confirmation}/approve", headers=_auth(api_key), timeout=60
        )
        started = post(server, api_key, {}, "/reviewed-1/start")
    assert created.status_code == 201 and experiment["state"] == "awaiting_review" and confirmation
    assert experiment["variants"][0]["run_id"] is None  # nothing ran
    assert again.status_code == 409 and again.json()["error"]["code"] == "exists"
    assert early.status_code == 409 and early.json()["error"]["code"] == "review_pending"
    assert approved.status_code == 200, approved.text
    assert started.status_code == 200 and started.json()["experiment"]["state"] == "succeeded", started.text


def test_another_tenants_key_sees_no_experiment(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    model_server.expect(When("VARIANT-A", Reply("milk")), When("VARIANT-B", Reply("milk")))
    acme, globex = key(workspace, "acme"), key(workspace, "globex")
    with serve(tmp_path, workspace, model_server) as server:
        made = post(server, acme, spec(a="VARIANT-A", b="VARIANT-B")).json()["experiment"]
        base = f"{server.url}/api/v1/workers"
        reads = [
            httpx.get(f"{base}/alice/experiments/{made['experiment_id']}", headers=_auth(globex)),
            httpx.get(f"{base}/acme%2Falice/experiments/{made['experiment_id']}", headers=_auth(globex)),
            httpx.get(f"{base}/alice/experiments", headers=_auth(globex)),
            httpx.post(f"{base}/alice/experiments", json=spec(a="x", b="y"), headers=_auth(globex)),
            httpx.get(f"{base}/gina/experiments/{made['experiment_id']}", headers=_auth(globex)),
        ]
        own = httpx.get(f"{base}/alice/experiments", headers=_auth(acme)).json()["experiments"]
    assert [r.status_code for r in reads] == [404, 404, 404, 404, 404]
    assert [r.json()["error"]["code"] for r in reads][-1] == "experiment_not_found"
    assert [e["experiment_id"] for e in own] == [made["experiment_id"]]


def test_the_cli_runs_and_shows_an_experiment(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer, capsys: pytest.CaptureFixture[str]
) -> None:
    model_server.expect(When("VARIANT-A", Reply("Buy milk.")), When("VARIANT-B", Fail(500)))
    api_key = key(workspace, "acme")
    spec_file = tmp_path / "experiment.json"
    spec_file.write_text(json.dumps(spec(a="VARIANT-A", b="VARIANT-B")), encoding="utf-8")
    with serve(tmp_path, workspace, model_server) as server:
        remote = ["--url", server.url, "--api-key", api_key]
        ran = main(["experiments", "run", "alice", str(spec_file), "--id", "cli-1", *remote])
        out_run = capsys.readouterr().out
        shown = main(["experiments", "show", "alice", "cli-1", "--json", *remote])
        out_show = capsys.readouterr().out
        listed = main(["experiments", "list", "alice", *remote])
        out_list = capsys.readouterr().out
        missing = main(["experiments", "show", "alice", "nope", *remote])
        err = capsys.readouterr().err
    assert ran == 0 and out_run.startswith("cli-1: succeeded, winner a\n"), out_run
    assert "failed" in out_run and "yes" in out_run
    assert shown == 0 and json.loads(out_show)["experiment"]["winner"] == "a"
    assert listed == 0 and "cli-1" in out_list and "succeeded" in out_list
    assert missing != 0 and "experiment_not_found" in err


def test_an_experiment_survives_a_restart_and_one_left_running_by_a_dead_process_is_interrupted(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    model_server.expect(When("VARIANT-A", Reply("milk")), When("VARIANT-B", Reply("milk")))
    api_key = key(workspace, "acme")
    with serve(tmp_path, workspace, model_server) as server:
        done = post(server, api_key, {**spec(a="VARIANT-A", b="VARIANT-B"), "experiment_id": "kept"})
    assert done.json()["experiment"]["state"] == "succeeded"
    stored = ExperimentStore(workspace)
    left = stored.get("acme", "alice", "kept").model_copy(
        update={"experiment_id": "left", "state": "running", "winner": None, "owner": "inst-dead"}
    )
    assert stored.create(left)
    with serve(tmp_path, workspace, model_server) as server:
        kept, interrupted = (
            httpx.get(f"{server.url}/api/v1/workers/alice/experiments/{name}", headers=_auth(api_key)).json()
            for name in ("kept", "left")
        )
    assert kept["experiment"] == done.json()["experiment"]
    assert interrupted["experiment"]["state"] == "interrupted" and "inst-dead" in interrupted["experiment"]["reason"]


def test_the_supervisor_attached_to_an_experiment_stops_a_variant_and_its_comments_join_the_evaluation(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    folder = workspace / "tenants/acme/workers/alice/supervisors"
    folder.mkdir()
    attach = {"experiments": ["sup-1"]}
    (folder / "allow.json").write_text(json.dumps({"attach": attach, "tools": ["memory_*"]}), encoding="utf-8")
    reviewer = {"attach": attach, "model": {"enabled": True, "events": ["final"], "max_calls": 1}}
    (folder / "reviewer.json").write_text(json.dumps(reviewer), encoding="utf-8")
    comment = {"concern": "no_evidence", "text": "Nothing says milk is missing.", "cites": ["output"]}
    model_server.expect(
        When("VARIANT-READER", Reply("Reading.", tool_calls=(ToolCallReply("file_read", {"path": "x.md"}, "c1"),))),
        When("VARIANT-PLAIN", Reply("Buy milk.")),
        When("You supervise", Reply(json.dumps({"comments": [comment]}))),
    )
    api_key = key(workspace, "acme")
    body = {**spec(reader="VARIANT-READER", plain="VARIANT-PLAIN"), "experiment_id": "sup-1", "max_parallel": 1}
    with serve(tmp_path, workspace, model_server) as server:
        experiment = post(server, api_key, body).json()["experiment"]
    variants = {v["name"]: v["evaluation"] for v in experiment["variants"]}
    assert experiment["state"] == "succeeded" and experiment["winner"] == "plain"
    reader, plain = variants["reader"], variants["plain"]
    assert not reader["success"] and "tool_allow_list" in reader["reason"]
    assert reader["supervisor"][0]["action"] == "stop" and reader["supervisor"][0]["cites"] == ["c1"]
    assert plain["success"] and plain["supervisor"][0]["check"] == "model:no_evidence"
    assert plain["supervisor"][0]["cites"] == ["output"] and plain["supervisor"][0]["action"] == "comment"


def test_an_experiment_waiting_for_a_review_it_never_got_asks_for_one_when_started(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    """The experiment was stored, then the process stopped before its confirmation was."""
    body = spec(a="VARIANT-A", b="VARIANT-B")
    body["protocol"] = {**body["protocol"], "origin": "model"}
    now = datetime.now(UTC)
    assert ExperimentStore(workspace).create(
        Experiment(
            experiment_id="orphan", tenant_id="acme", worker_id="alice", spec=ExperimentSpec.model_validate(body),
            state="awaiting_review", created_at=now, created_by="key:k", updated_at=now,
        )
    )  # fmt: skip
    api_key = key(workspace, "acme")
    with serve(tmp_path, workspace, model_server) as server:
        started = post(server, api_key, {}, "/orphan/start")
        shown = httpx.get(f"{server.url}/api/v1/workers/alice/experiments/orphan", headers=_auth(api_key))
    assert started.status_code == 409 and started.json()["error"]["code"] == "review_pending"
    experiment = shown.json()["experiment"]
    assert experiment["state"] == "awaiting_review" and experiment["review_confirmation_id"].startswith("cf_")
