"""Learning through evaluation over real HTTP with the scripted model (issue #33): a candidate filed
from a run is refused promotion without a passing evaluation, is promoted with its provenance after a
replay passed, then reaches the next run's context; a conflicting later promotion keeps both facts in
time; a rollback brings the earlier fact back; all of it survives a restart, and another tenant sees
none of it."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from tests.e2e.test_chat_api import chat, key, serve

from genworker.experiments.models import Experiment, ExperimentSpec, Variant
from genworker.experiments.store import ExperimentStore
from genworker.testing import Reply, ScriptedModelServer
from genworker.testing.live_server import LiveServer


@pytest.fixture
def workspace(small_workspace: Callable[..., Path]) -> Path:
    return small_workspace({"acme": ["alice"], "globex": ["gina"]})


class Api:
    def __init__(self, server: LiveServer, api_key: str) -> None:
        self.server, self.api_key = server, api_key
        self.base = server.url + "/api/v1/workers/alice/memory"
        self.auth = {"Authorization": f"Bearer {api_key}"}

    def run(self, message: str) -> str:
        events = chat(self.server, self.api_key, {"worker_id": "alice", "message": message})
        assert events[-1]["result"]["outcome"] == "completed", events[-1]
        return str(events[-1]["runId"])

    def post(self, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        return httpx.post(self.base + path, json=body, headers=self.auth, timeout=30)

    def get(self, path: str, **params: str) -> Any:
        answer = httpx.get(self.base + path, params=params, headers=self.auth, timeout=30)
        assert answer.status_code == 200, answer.text
        return answer.json()


def _replay(run_id: str) -> dict[str, Any]:
    return {"kind": "replay", "run_id": run_id}


def test_a_candidate_is_promoted_only_after_evaluation_kept_in_time_and_rolled_back(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    model_server.expect(
        Reply("Noted: CC finance on invoices over 10k."),
        Reply("Invoice sent, finance in CC."),
        Reply("Noted: the limit is 5k now."),
        Reply("Invoice of 6k sent, finance in CC."),
        Reply("Sent with finance in CC."),
    )
    api_key = key(workspace, "acme")
    with serve(tmp_path, workspace, model_server) as server:
        api = Api(server, api_key)
        first_run = api.run("From now on CC finance on invoices over 10k")
        filed = api.post("/candidates", {"run_id": first_run, "text": "CC finance on invoices over 10k", "key": "cc"})
        assert filed.status_code == 201, filed.text
        first = filed.json()["candidate"]
        assert first["provenance"]["run_id"] == first_run and filed.json()["level"] == "run"
        promote = f"/candidates/{first['candidate_id']}/promote"
        error = api.post("/candidates", {"run_id": first_run, "text": "Error: upstream timed out", "key": "x"})
        assert (error.status_code, error.json()["error"]["code"]) == (400, "refused_as_memory")
        twice = api.post("/candidates", {"run_id": first_run, "text": "cc finance on invoices over 10k.", "key": "cc"})
        assert (twice.status_code, twice.json()["error"]["code"]) == (409, "candidate_exists")

        refused = api.post(promote, {"to": "worker"})  # no evaluation: the gate refuses
        assert (refused.status_code, refused.json()["error"]["code"]) == (409, "evaluation_required")
        own = api.post(promote, {"to": "worker", "evaluation": _replay(first_run)})
        assert (own.status_code, own.json()["error"]["code"]) == (409, "evaluation_failed")
        assert api.post(promote, {"to": "worker", "evaluation": _replay("run_nope")}).status_code == 404
        assert api.get("/facts")["facts"] == []  # nothing promoted by a refusal

        replay = api.run("Send the ACME invoice of 12k")
        promoted = api.post(promote, {"to": "worker", "evaluation": _replay(replay)})
        assert promoted.status_code == 200, promoted.text
        old = promoted.json()["fact"]
        assert (old["scope"], old["key"], old["status"]) == ("worker:alice", "cc", "active")
        assert old["provenance"]["run_id"] == first_run and old["provenance"]["evaluation"]["ref"] == replay
        assert old["provenance"]["supervisor"]["state"] == "unsupervised"
        assert old["provenance"]["promoted_by"].startswith("key:")

        later_run = api.run("Make it 5k: CC finance on invoices over 5k")
        body = {"run_id": later_run, "text": "CC finance on invoices over 5k", "key": "cc"}
        second = api.post("/candidates", body).json()["candidate"]
        promote_second = f"/candidates/{second['candidate_id']}/promote"
        earlier = api.post(promote_second, {"to": "worker", "evaluation": _replay(replay)})  # ran before it was filed
        assert (earlier.status_code, earlier.json()["error"]["code"]) == (409, "evaluation_failed")
        second_replay = api.run("Send the BETA invoice of 6k")
        new = api.post(promote_second, {"to": "worker", "evaluation": _replay(second_replay)})
        assert new.status_code == 200, new.text
        new_fact = new.json()["fact"]
        history = {f["fact_id"]: f for f in api.get("/facts", key="cc")["facts"]}
        assert history[old["fact_id"]]["status"] == "superseded"  # kept, not overwritten
        assert history[old["fact_id"]]["valid_to"] == new_fact["valid_from"]
        assert new_fact["supersedes"] == [old["fact_id"]]

        api.run("Send the Globex invoice of 7k")  # the promoted fact reaches the next run's context
        context = json.dumps(model_server.requests[-1]["messages"])
        assert "over 5k" in context and "over 10k" not in context

        rolled = api.post(f"/facts/{new_fact['fact_id']}/rollback")
        assert rolled.status_code == 200 and rolled.json()["fact"]["status"] == "rolled_back"
        again = api.post(f"/facts/{new_fact['fact_id']}/rollback")
        assert (again.status_code, again.json()["error"]["code"]) == (409, "not_active")
        other = httpx.get(server.url + "/api/v1/workers/alice/memory/facts", headers=_key(workspace, "globex"))
        assert other.status_code == 404  # another tenant's key does not reach the worker

    with serve(tmp_path, workspace, model_server) as server:  # a restart reads the same history
        api = Api(server, api_key)
        history = {f["fact_id"]: f for f in api.get("/facts")["facts"]}
        candidates = {c["candidate_id"]: c for c in api.get("/candidates")["candidates"]}
    assert (history[old["fact_id"]]["status"], history[old["fact_id"]]["valid_to"]) == ("active", None)
    assert history[new_fact["fact_id"]]["status"] == "rolled_back"
    assert (candidates[first["candidate_id"]]["level"], candidates[first["candidate_id"]]["next"]) == (
        "worker", "tenant",
    )  # fmt: skip
    assert candidates[second["candidate_id"]]["level"] == "run"  # rolled back: evaluated again to climb


def _key(workspace: Path, tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key(workspace, tenant)}"}


def _experiment(workspace: Path, experiment_id: str, state: str, winner: str | None, instructions: str) -> None:
    now = datetime.now(UTC)
    variants = {"a": Variant(), "b": Variant(tier="fast", instructions=instructions)}
    spec = ExperimentSpec(question="How to cc finance?", variants=variants)
    ExperimentStore(workspace).create(
        Experiment(
            experiment_id=experiment_id, tenant_id="acme", worker_id="alice", spec=spec, state=state,  # type: ignore[arg-type]
            created_at=now, created_by="key:k", updated_at=now, winner=winner,
        )
    )  # fmt: skip


def test_an_experiment_is_the_evaluation_only_when_it_succeeded(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply("Noted."))
    _experiment(workspace, "exp-before", "succeeded", "b", "Cc finance  over 10K")  # before the candidate
    with serve(tmp_path, workspace, model_server) as server:
        api = Api(server, key(workspace, "acme"))
        run = api.run("CC finance on invoices over 10k")
        candidate = api.post("/candidates", {"run_id": run, "text": "CC finance over 10k", "key": "cc"}).json()
        _experiment(workspace, "exp-failed", "failed", None, "")
        _experiment(workspace, "exp-other", "succeeded", "b", "Answer in French.")  # tried something else
        _experiment(workspace, "exp-won", "succeeded", "b", "Cc finance  over 10K")  # tried this candidate
        promote = f"/candidates/{candidate['candidate']['candidate_id']}/promote"

        def by(experiment_id: str) -> httpx.Response:
            return api.post(
                promote, {"to": "worker", "evaluation": {"kind": "experiment", "experiment_id": experiment_id}}
            )

        failed, unknown, other, before = by("exp-failed"), by("exp-nope"), by("exp-other"), by("exp-before")
        won = by("exp-won")
    for refused in (failed, other, before):
        assert (refused.status_code, refused.json()["error"]["code"]) == (409, "evaluation_failed")
    assert "the experiment is failed" in failed.json()["error"]["message"]
    assert "carries its text" in other.json()["error"]["message"]
    assert unknown.status_code == 404
    assert won.status_code == 200, won.text
    provenance = won.json()["fact"]["provenance"]
    assert provenance["experiment_id"] == "exp-won" and provenance["evaluation"]["detail"].endswith("winner b")
