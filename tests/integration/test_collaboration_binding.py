"""Which duty a delegated task binds to on its target worker: the collaboration trigger that accepts
the caller (`from_workers`, empty: anyone) and the request_type (exact first, then a trigger taking any);
closed duties and other trigger types never bind."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from genworker.worker.delegation import collaboration_binding
from genworker.workspace.registry import WorkspaceRegistry

DUTIES = {
    "data-request.md": (
        "triggers:\n  - {id: from-lead, type: collaboration, from_workers: [lead], request_type: data_request}\n"
    ),
    "any-request.md": "triggers:\n  - {id: anyone, type: collaboration}\n",
    "closed.md": "status: closed\ntriggers:\n  - {id: old, type: collaboration, request_type: report}\n",
    "manual.md": "triggers:\n  - {id: report, type: manual}\n",
}


@pytest.fixture
def analyst(write_tree: Callable[..., Path]) -> object:
    files = {
        "tenants/acme/TENANT.json": '{"tenant_id": "acme", "trust_level": 2}',
        "tenants/acme/workers/analyst/PERSONA.md": "---\nidentity: {name: A, worker_id: analyst}\n---\nHi\n",
    }
    for name, body in DUTIES.items():
        duty_id = name.removesuffix(".md")
        files[f"tenants/acme/workers/analyst/duties/{name}"] = (
            f"---\nduty_id: {duty_id}\ntitle: {duty_id}\n{body}---\nDo it.\n"
        )
    registry = WorkspaceRegistry(write_tree(files), product_skills=None)
    registry.load_all()
    worker = registry.worker("acme", "analyst")
    assert worker is not None and len(worker.duties) == 4
    return worker


@pytest.mark.parametrize(
    ("caller", "request_type", "bound"),
    [
        ("lead", "data_request", ("data-request", "from-lead")),
        ("lead", None, ("any-request", "anyone")),
        ("lead", "report", ("any-request", "anyone")),  # the closed duty's trigger does not count
        ("intern", "data_request", ("any-request", "anyone")),  # not in from_workers
    ],
)
def test_the_trigger_that_accepts_the_caller_binds(
    analyst: object, caller: str, request_type: str | None, bound: tuple[str, str]
) -> None:
    binding = collaboration_binding(analyst, caller, request_type)  # type: ignore[arg-type]
    assert binding is not None and (binding.duty_id, binding.trigger_id) == bound


def test_no_binding_without_a_trigger_for_the_caller(write_tree: Callable[..., Path]) -> None:
    files = {
        "tenants/acme/TENANT.json": '{"tenant_id": "acme", "trust_level": 2}',
        "tenants/acme/workers/analyst/PERSONA.md": "---\nidentity: {name: A, worker_id: analyst}\n---\nHi\n",
        "tenants/acme/workers/analyst/duties/d.md": (
            "---\nduty_id: d\ntitle: d\ntriggers:\n"
            "  - {id: t, type: collaboration, from_workers: [lead]}\n---\nDo it.\n"
        ),
    }
    registry = WorkspaceRegistry(write_tree(files), product_skills=None)
    registry.load_all()
    worker = registry.worker("acme", "analyst")
    assert worker is not None
    assert collaboration_binding(worker, "intern", None) is None
    assert collaboration_binding(worker, "lead", "anything") is not None  # t takes any request_type from lead
