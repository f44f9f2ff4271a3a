"""The checks behind delegation that a model cannot reach through the pipeline: the delegate effect
checked again inside the tool's handler (a direct call with a read-only scope), the run's recorded
governance (a run admitted read-only with a scope that says otherwise), the router's refusal of a
parent from another tenant, and the parent's link to a child made after the parent ended."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from genworker.api.app import create_app
from genworker.api.runs import route_error
from genworker.engine.base import RunResult
from genworker.runtime.composition import Runtime
from genworker.settings import load_settings
from genworker.testing import Reply, ScriptedModelServer, scripted_env
from genworker.tools.base import ToolCall
from genworker.tools.builtin.delegation import DelegationError
from genworker.tools.context import Posture, ToolContext
from genworker.worker.lifecycle import TaskLifecycle
from genworker.worker.router import RouteDone, RouteError, RouteRequest
from genworker.worker.task import RunRef, TaskManifest, TaskProvenance

PROPOSE = (
    "---\nduty_id: propose\ntitle: Propose only\ntriggers: [{id: m, type: manual}]\n"
    "posture: {default: propose}\n---\nLook and propose.\n"
)


@pytest.fixture
def workspace(small_workspace: Callable[..., Path]) -> Path:
    extra = {"tenants/acme/workers/alice/duties/propose.md": PROPOSE}
    return small_workspace({"acme": ["alice", "bob"], "globex": ["gus"]}, extra)


@contextmanager
def running(tmp_path: Path, workspace: Path, model: ScriptedModelServer) -> Iterator[tuple[TestClient, Runtime]]:
    (tmp_path / "configs").mkdir(exist_ok=True)
    with TestClient(
        create_app(load_settings(tmp_path / "configs", scripted_env(model), workspace=workspace))
    ) as client:
        yield client, client.app.state.runtime  # type: ignore[attr-defined]


def call_directly(client: TestClient, runtime: Runtime, run_id: str, posture: Posture, **arguments: Any) -> Any:
    """delegate_to_worker's handler called as code would, past the pipeline's checks."""

    async def run() -> Any:
        state = runtime.registry.tenant("acme")
        assert state is not None
        worker = state.workers["alice"]
        pipeline = runtime.tools.pipeline_for(worker)
        tool = pipeline.get("delegate_to_worker")
        assert tool is not None
        scope = runtime.tools.scope(state.tenant, worker, run_id, posture=posture)
        call = ToolCall("c1", "delegate_to_worker", arguments)
        ctx = ToolContext(scope, call, pipeline.resolved_spec(tool.spec, scope), "system")
        return await tool.run(ctx, arguments)

    return client.portal.call(run)  # type: ignore[union-attr]


def test_the_handler_checks_the_delegate_effect_itself(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    with running(tmp_path, workspace, model_server) as (client, runtime):
        for posture in ("proposal_only", "degraded"):
            with pytest.raises(DelegationError, match=f"may not delegate: .*posture {posture} allows only read"):
                call_directly(client, runtime, "run_x", posture, worker_id="bob", task="x")
    assert model_server.requests == []


def test_a_run_admitted_read_only_cannot_delegate_whatever_its_scope_says(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    model_server.expect(Reply("A proposal."))
    with running(tmp_path, workspace, model_server) as (client, runtime):
        router = runtime.services.router

        async def propose() -> RouteDone:
            req = RouteRequest("acme", "alice", "look", "duty", duty_id="propose", trigger_id="m", conversational=False)
            events = [e async for e in router.route_stream(req)]
            assert isinstance(events[-1], RouteDone)
            return events[-1]

        done = client.portal.call(propose)  # type: ignore[union-attr]
        assert done.record.provenance.governance_decision.posture == "proposal_only"
        with pytest.raises(DelegationError, match="admitted with posture 'proposal_only'"):
            call_directly(client, runtime, done.record.run_id, "normal", worker_id="bob", task="x")
        assert asyncio.run(TaskLifecycle(workspace).list_runs("acme", "bob")) == []


def test_the_router_refuses_a_parent_run_of_another_tenant(
    tmp_path: Path, workspace: Path, model_server: ScriptedModelServer
) -> None:
    with running(tmp_path, workspace, model_server) as (client, runtime):
        router = runtime.services.router
        req = RouteRequest(
            "acme", "bob", "x", "collaboration", "gus", conversational=False,
            parent=RunRef("globex", "gus", "run_x"), delegation_depth=1,
        )  # fmt: skip

        async def first() -> object:
            return await anext(router.route_stream(req))

        with pytest.raises(RouteError, match="only ever delegated within its own tenant") as raised:
            client.portal.call(first)  # type: ignore[union-attr]
        assert raised.value.code == "cross_tenant" and route_error(raised.value).status == 403


def manifest(run_id: str, worker_id: str, parent: str | None = None) -> TaskManifest:
    provenance = TaskProvenance(
        source_type="collaboration" if parent else "chat",
        parent_run_id=parent,
        parent_worker_id="alice" if parent else None,
        delegation_depth=1 if parent else 0,
    )
    return TaskManifest(f"task_{run_id}", run_id, "acme", worker_id, "x", datetime.now(UTC), provenance=provenance)


@pytest.mark.anyio
async def test_a_child_is_linked_to_its_parent_even_once_the_parent_ended(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tasks = TaskLifecycle(tmp_path)
    parent = await tasks.persist_initial(manifest("run_parent", "alice"), start=True)
    await tasks.complete(parent.ref, RunResult("completed", output="done"))
    child = await tasks.persist_initial(manifest("run_child", "bob", parent="run_parent"))
    linked = await tasks.get_run(parent.ref)
    assert [(c.worker_id, c.run_id) for c in linked.children] == [("bob", "run_child")]
    assert linked.state == "completed" and child.provenance.parent_run_id == "run_parent"
    with caplog.at_level(logging.WARNING, "genworker.worker.lifecycle"):
        orphan = await tasks.persist_initial(manifest("run_orphan", "bob", parent="run_gone"))
    assert orphan.provenance.parent_run_id == "run_gone"  # the child stands; only the back link is missing
    assert "not linked to its parent run acme/alice/run_gone" in caplog.text


def test_provenance_names_a_parent_whole() -> None:
    with pytest.raises(ValueError, match="set together"):
        TaskProvenance(parent_run_id="run_x")
    with pytest.raises(ValueError, match="delegation_depth"):
        TaskProvenance(parent_run_id="run_x", parent_worker_id="alice")
    with pytest.raises(ValueError, match="delegation_depth"):
        TaskProvenance(delegation_depth=2)
