"""The ToolPipeline over a real workspace: policies from TENANT.json / PERSONA.md, a tenant
`tool_effects.yml`, tools arriving at runtime (as MCP tools do), builtin file tools and the
per-worker audit file."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from genworker.tools.audit import WorkerAuditSink
from genworker.tools.base import ToolCall, ToolResult, ToolSpec
from genworker.tools.builtin import builtin_tools
from genworker.tools.context import Posture, ToolContext, ToolScope
from genworker.tools.effects import EffectResolver
from genworker.tools.outcomes import ToolCompleted, ToolDenied, ToolFailed, ToolNeedsApproval
from genworker.tools.pipeline import ToolPipeline
from genworker.workspace.registry import WorkspaceRegistry

pytestmark = pytest.mark.anyio

TOKEN = "test-fake-crm-token-0001"
FILES = {
    "tenants/acme/TENANT.json": json.dumps(
        {"tenant_id": "acme", "trust_level": 2, "tool_policy": {"denied_tools": ["crm__delete_*"]}}
    ),
    "tenants/acme/tool_effects.yml": """
        crm__lookup: {effect: read}
        crm__send_*: {effect: external, requires_approval: true}
    """,
    "tenants/acme/workers/alice/PERSONA.md": """
        ---
        identity: {name: Alice, worker_id: alice}
        tool_policy: {mode: blacklist, denied_tools: [file_search]}
        ---
        Keep the customer records tidy.
    """,
}


@dataclass(frozen=True)
class RemoteTool:
    """Stands in for an MCP tool: a spec without a declared effect and a real coroutine."""

    spec: ToolSpec

    async def run(self, ctx: ToolContext, arguments: Mapping[str, Any]) -> ToolResult:
        return ToolResult(f"{self.spec.name} done with token {TOKEN}", data=dict(arguments))


def remote(name: str) -> RemoteTool:
    schema = {"type": "object", "properties": {"to": {"type": "string"}}, "additionalProperties": True}
    return RemoteTool(ToolSpec(name, f"remote {name}", schema, source="mcp:crm"))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    for rel, body in FILES.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(body).lstrip("\n"), encoding="utf-8")
    return tmp_path


def scope_for(root: Path, posture: Posture = "normal", approved: frozenset[str] = frozenset()) -> ToolScope:
    """How the router turns the loaded tenant and worker into a ToolScope."""
    registry = WorkspaceRegistry(root, product_skills=None)
    registry.load_all()
    assert registry.issues() == []
    state, worker = registry.tenant("acme"), registry.worker("acme", "alice")
    assert state is not None and worker is not None
    policy = worker.persona.tool_policy
    return ToolScope(
        "acme",
        "alice",
        "run-42",
        root / "tenants/acme/workers/alice",
        trust_level=state.tenant.trust_level,
        posture=posture,
        tenant_denied_tools=frozenset(state.tenant.tool_policy.denied_tools),
        worker_denied_tools=frozenset(policy.denied_tools),
        worker_allowed_tools=frozenset(policy.allowed_tools) if policy.mode == "whitelist" else None,
        approved_call_ids=approved,
        secrets=(TOKEN,),
    )


async def test_a_run_end_to_end(root: Path) -> None:
    pipeline = ToolPipeline(builtin_tools(), effects=EffectResolver(root), audit=WorkerAuditSink(root))
    normal, proposal = scope_for(root), scope_for(root, "proposal_only")
    for name in ("crm__lookup", "crm__send_mail", "crm__delete_all", "crm__export"):
        pipeline.register(remote(name))  # the MCP server connected after start-up

    assert [s.name for s in pipeline.visible(proposal)] == ["file_read", "file_list", "crm__lookup"]
    assert [s.name for s in pipeline.visible(normal)] == [
        "file_read",
        "file_write",
        "file_list",
        "crm__lookup",
        "crm__send_mail",
        "crm__export",
    ]

    wrote = await pipeline.execute(normal, ToolCall("c1", "file_write", {"path": "files/summary.md", "content": "ok"}))
    assert wrote == ToolCompleted(
        ToolResult("wrote files/summary.md (2 bytes)", data={"path": "files/summary.md", "bytes": 2})
    )
    lookup = await pipeline.execute(proposal, ToolCall("c2", "crm__lookup", {"to": "x"}))
    assert lookup == ToolCompleted(ToolResult("crm__lookup done with token [REDACTED]", data={"to": "x"}))
    assert isinstance(await pipeline.execute(normal, ToolCall("c3", "crm__send_mail", {"to": "bo"})), ToolNeedsApproval)
    sent = await pipeline.execute(
        scope_for(root, approved=frozenset({"c3"})), ToolCall("c3", "crm__send_mail", {"to": "bo"})
    )
    assert isinstance(sent, ToolCompleted)
    assert await pipeline.execute(normal, ToolCall("c4", "crm__delete_all")) == ToolDenied(
        "denied_by_tenant", "tool crm__delete_all is disabled for tenant acme"
    )
    searched = await pipeline.execute(normal, ToolCall("c5", "file_search", {"query": "ok"}))
    assert isinstance(searched, ToolDenied) and searched.code == "denied_by_worker"
    exported = await pipeline.execute(proposal, ToolCall("c6", "crm__export", {"to": f"token={TOKEN}"}))
    assert isinstance(exported, ToolDenied) and exported.code == "posture"
    escaped = await pipeline.execute(normal, ToolCall("c7", "file_read", {"path": "../../TENANT.json"}))
    assert isinstance(escaped, ToolFailed) and "contains '..'" in escaped.error

    audit_file = root / "tenants/acme/workers/alice/runtime/tool_audit.jsonl"
    text = audit_file.read_text(encoding="utf-8")
    assert TOKEN not in text
    rows = [json.loads(line) for line in text.splitlines()]
    assert [(r["call_id"], r["tool"], r["decision"], r["outcome"], r["code"]) for r in rows] == [
        ("c1", "file_write", "allow", "completed", None),
        ("c2", "crm__lookup", "allow", "completed", None),
        ("c3", "crm__send_mail", "ask", "needs_approval", None),
        ("c3", "crm__send_mail", "allow", "completed", None),
        ("c4", "crm__delete_all", "deny", "denied", "denied_by_tenant"),
        ("c5", "file_search", "deny", "denied", "denied_by_worker"),
        ("c6", "crm__export", "deny", "denied", "posture"),
        ("c7", "file_read", "allow", "failed", "error"),
    ]
    assert rows[3]["approved"] is True
    assert rows[5]["effect"] == "read"
    assert (rows[6]["effect"], rows[6]["risk_level"], rows[6]["args"]) == (
        "external",
        "high",
        {"to": "token=[REDACTED]"},
    )
    assert {r["run_id"] for r in rows} == {"run-42"}
    assert (root / "tenants/acme/workers/alice/files/summary.md").read_text(encoding="utf-8") == "ok"
