"""The undo window behind `undo_window` auto: an armed run's external call is held, an undo in the
window means it never runs, otherwise it runs once when the window closes; undo and commit never
both win; a pending call left by a dead process is dropped, not run late."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from genworker.tools.base import Effect, RiskLevel, ToolCall, ToolResult, ToolSpec
from genworker.tools.context import ToolContext, ToolScope
from genworker.tools.middlewares.undo_window import UndoNotFound, UndoTooLate, UndoWindow
from genworker.tools.outcomes import ToolCompleted
from genworker.tools.pipeline import ToolPipeline

pytestmark = pytest.mark.anyio
OBJECT = {"type": "object", "properties": {}, "additionalProperties": True}


@dataclass
class Recording:
    """A tool that records what it was asked to do (the side effect the window protects)."""

    spec: ToolSpec
    calls: list[Mapping[str, Any]]

    async def run(self, ctx: ToolContext, arguments: Mapping[str, Any]) -> ToolResult:
        self.calls.append(dict(arguments))
        return ToolResult(f"{self.spec.name} sent")


def setup(tmp_path: Path, window_s: float) -> tuple[ToolPipeline, UndoWindow, Recording, Recording]:
    undo = UndoWindow(tmp_path, window_s=lambda t, w: window_s)
    mailer = Recording(ToolSpec("mailer", "send mail", OBJECT, Effect.EXTERNAL, RiskLevel.HIGH, source="test"), [])
    reader = Recording(ToolSpec("reader", "read", OBJECT, Effect.READ, RiskLevel.LOW, source="test"), [])
    return ToolPipeline([mailer, reader], middlewares=[undo]), undo, mailer, reader


def scope(tmp_path: Path, run_id: str = "r1") -> ToolScope:
    return ToolScope("acme", "w", run_id, tmp_path, trust_level=3)


def undo_id(outcome: Any) -> str:
    assert isinstance(outcome, ToolCompleted)
    return outcome.result.content.rsplit("undo id ", 1)[1].rstrip(").")


async def test_undo_inside_the_window_means_the_call_never_runs(tmp_path: Path) -> None:
    pipeline, undo, mailer, reader = setup(tmp_path, window_s=3600)
    undo.arm("r1")
    outcome = await pipeline.execute(scope(tmp_path), ToolCall("c1", "mailer", {"to": "boss"}))
    uid = undo_id(outcome)
    assert "unless undone" in outcome.result.content and mailer.calls == []  # type: ignore[union-attr]
    record = await undo.undo("acme", "w", uid, by="dana")
    await undo.join()
    assert (record.state, record.decided_by, mailer.calls) == ("undone", "dana", [])
    with pytest.raises(UndoTooLate, match="already undone"):
        await undo.undo("acme", "w", uid, by="dana")
    with pytest.raises(UndoNotFound):
        await undo.undo("acme", "w", "undo_nope", by="dana")
    # reads, and calls of runs that are not armed, are not held
    await pipeline.execute(scope(tmp_path), ToolCall("c2", "reader", {}))
    await pipeline.execute(scope(tmp_path, "r2"), ToolCall("c3", "mailer", {"to": "x"}))
    assert reader.calls == [{}] and mailer.calls == [{"to": "x"}]


async def test_the_call_runs_once_when_the_window_closes(tmp_path: Path) -> None:
    pipeline, undo, mailer, _ = setup(tmp_path, window_s=0)
    undo.arm("r1")
    uid = undo_id(await pipeline.execute(scope(tmp_path), ToolCall("c1", "mailer", {"to": "boss"})))
    await undo.join()
    record = await undo.get("acme", "w", uid)
    assert (record.state, record.outcome, mailer.calls) == ("committed", "mailer sent", [{"to": "boss"}])
    with pytest.raises(UndoTooLate, match="already committed"):
        await undo.undo("acme", "w", uid, by="dana")


async def test_undo_racing_the_commit_never_both_win(tmp_path: Path) -> None:
    pipeline, undo, mailer, _ = setup(tmp_path, window_s=0)
    undo.arm("r1")
    ids = [undo_id(await pipeline.execute(scope(tmp_path), ToolCall(f"c{i}", "mailer", {"n": i}))) for i in range(8)]
    results = await asyncio.gather(*(undo.undo("acme", "w", u, by="dana") for u in ids), return_exceptions=True)
    await undo.join()
    for uid, result in zip(ids, results, strict=True):
        record = await undo.get("acme", "w", uid)
        if isinstance(result, UndoTooLate):
            assert record.state == "committed"
        else:
            assert record.state == "undone"
    states = [(await undo.get("acme", "w", u)).state for u in ids]
    assert sorted(call["n"] for call in mailer.calls) == [i for i, state in enumerate(states) if state == "committed"]


async def test_a_pending_call_left_by_a_dead_process_is_dropped(tmp_path: Path) -> None:
    pipeline, undo, mailer, _ = setup(tmp_path, window_s=3600)
    undo.arm("r1")
    uid = undo_id(await pipeline.execute(scope(tmp_path), ToolCall("c1", "mailer", {"to": "boss"})))
    await undo.close()  # the process goes away with the call still in its window
    restarted = UndoWindow(tmp_path, clock=lambda: datetime(2030, 1, 1, tzinfo=UTC))
    [dropped] = restarted.recover("acme", "w")
    assert (dropped.undo_id, dropped.state, mailer.calls) == (uid, "dropped", [])
    assert restarted.recover("acme", "w") == []
