"""A context assembled from a worker loaded off the demo workspace, with the default window."""

from __future__ import annotations

from pathlib import Path

import pytest

from genworker.worker.context import SegmentName, build_managed_context
from genworker.workspace.registry import WorkspaceRegistry

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]


async def test_demo_analyst_context(demo_workspace: Path) -> None:
    registry = WorkspaceRegistry(demo_workspace, product_skills=ROOT / "skills")
    registry.load_all()
    analyst = registry.worker("demo", "analyst")
    assert analyst is not None
    history = [
        {"role": "user", "content": "How did signups do last week?", "metadata": {"thread_id": "slack:C1:171"}},
        {"role": "assistant", "content": "Up 4.2% week over week.", "metadata": {"thread_id": "slack:C1:171"}},
    ]
    ctx = await build_managed_context(
        analyst,
        "And activation?",
        history,
        memory=["Li Wei owns the activation metric"],
        provenance={"source_type": "im", "source_id": "slack:C1"},
        thread_id="slack:C1:171",
    )
    prompt = ctx.system_prompt
    assert prompt.startswith("## Identity\nYou are Milo, Data and operations analyst in Operations.")
    assert "- Every number carries its source query and time range." in prompt
    assert "- Weeks run Monday to Sunday, America/New_York." in prompt
    assert "- Cite the source and time range of every number: Every figure you give" in prompt
    assert "- Li Wei (Head of Growth, Acme) [li-wei]; slack: U0DEMOLIWEI" in prompt
    assert "- Li Wei owns the activation metric" in prompt
    assert analyst.instructions.strip()[:40] in prompt
    assert ctx.segment(SegmentName.CONTACTS).items == len(analyst.contacts)
    assert ctx.steps == () and ctx.fits
    assert [m["content"] for m in ctx.messages()[1:]] == [
        "How did signups do last week?",
        "Up 4.2% week over week.",
        "And activation?",
    ]
    assert prompt.endswith("\n\n## This task\n- source_type: im")  # who sent it (source_id) is for audit
    assert all(usage.tokens <= usage.quota for usage in ctx.stats.values())
