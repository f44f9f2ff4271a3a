"""Learned rules reach the model through the router for the run's skill only (issue #22: upstream's
rule selection), with their category and confidence."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from fastapi.testclient import TestClient

from genworker.api.app import create_app
from genworker.settings import load_settings
from genworker.testing import Reply, ScriptedModelServer, scripted_env
from genworker.worker.router import RouteRequest

LEARNED = "---\ntype: learned\ncategory: strategy\nconfidence: 0.8\nscope: {{skills: [{skill}]}}\n---\n# {text}\n"


def test_only_the_learned_rules_of_the_matched_skill_are_in_the_prompt(
    tmp_path: Path,
    small_workspace: Callable[..., Path],
    model_server: ScriptedModelServer,
    keyword_skill: Callable[[str, str], str],
) -> None:
    alice = "tenants/acme/workers/alice"
    workspace = small_workspace(
        {"acme": ["alice"]},
        {
            f"{alice}/skills/triage/SKILL.md": keyword_skill("triage", "alert"),
            f"{alice}/skills/billing/SKILL.md": keyword_skill("billing", "invoice"),
            f"{alice}/rules/learned/triage-rule.md": LEARNED.format(skill="triage", text="Check the pager first."),
            f"{alice}/rules/learned/billing-rule.md": LEARNED.format(skill="billing", text="Quote the invoice id."),
            f"{alice}/rules/directives/always.md": "Answer in English.\n",
        },
    )
    model_server.expect(Reply("Triaged."))
    (tmp_path / "configs").mkdir()
    env = scripted_env(model_server)
    with TestClient(create_app(load_settings(tmp_path / "configs", env, workspace=workspace))) as client:
        runtime = client.app.state.runtime  # type: ignore[attr-defined]

        async def run() -> None:
            request = RouteRequest("acme", "alice", "a disk alert on db-1", "task", conversational=False)
            async for _ in runtime.services.router.route_stream(request):
                pass

        client.portal.call(run)  # type: ignore[union-attr]
    (request,) = model_server.requests
    system = request["messages"][0]["content"]
    assert "- Answer in English." in system
    assert "- (learned) [strategy/0.80] Check the pager first." in system
    assert "Quote the invoice id." not in system
