"""The undo window behind `undo_window` auto: a held run's external call is recorded as pending, an
undo in the window means it never runs, otherwise it runs once when the window ends; undo and
execution never both win; after a restart `recover()` executes a due call exactly once (also with
two processes recovering at once), expires one that is far too late, and never re-runs a call whose
executor died mid-way."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from genworker.tools.base import Effect, RiskLevel, ToolCall, ToolResult, ToolSpec
from genworker.tools.context import ToolContext, ToolScope
from genworker.tools.middlewares.undo_window import DeferredCall, UndoError, UndoNotFound, UndoTooLate, UndoWindow
from genworker.tools.outcomes import ToolCompleted, ToolOutcome
from genworker.tools.pipeline import ToolPipeline

pytestmark = pytest.mark.anyio
OBJECT = {"type": "object", "properties": {}, "additionalProperties": True}
LATER = datetime(2030, 1, 1, tzinfo=UTC)


@dataclass
class Recording:
    """A tool that records what it was asked to do (the side effect the window protects)."""

    spec: ToolSpec
    calls: list[Mapping[str, Any]]

    async def run(self, ctx: ToolContext, arguments: Mapping[str, Any]) -> ToolResult:
        self.calls.append(dict(arguments))
        return ToolResult(f"{self.spec.name} sent")


@dataclass
class World:
    pipeline: ToolPipeline
    undo: UndoWindow
    mailer: Recording
    reader: Recording
    root: Path

    def window(self, **changes: Any) -> UndoWindow:
        """Another UndoWindow on the same files and tools: a restarted (or a second) process."""
        return UndoWindow(self.root, release=self.release, **changes)

    async def release(self, record: DeferredCall) -> ToolOutcome:
        call = ToolCall(record.call_id, record.tool, record.arguments)
        return await self.pipeline.execute(scope(self.root, record.run_id, window=None), call, "system")


def world(tmp_path: Path) -> World:
    mailer = Recording(ToolSpec("mailer", "send mail", OBJECT, Effect.EXTERNAL, RiskLevel.HIGH, source="test"), [])
    reader = Recording(ToolSpec("reader", "read", OBJECT, Effect.READ, RiskLevel.LOW, source="test"), [])
    w = World(ToolPipeline(), UndoWindow(tmp_path), mailer, reader, tmp_path)
    w.undo.release = w.release
    w.pipeline = ToolPipeline([mailer, reader], middlewares=[w.undo])
    return w


def scope(tmp_path: Path, run_id: str = "r1", window: float | None = 3600) -> ToolScope:
    return ToolScope("acme", "w", run_id, tmp_path, trust_level=3, undo_window_s=window)


def undo_id(outcome: Any) -> str:
    assert isinstance(outcome, ToolCompleted)
    return str(outcome.result.data["undo_id"])


async def test_undo_inside_the_window_means_the_call_never_runs(tmp_path: Path) -> None:
    w = world(tmp_path)
    outcome = await w.pipeline.execute(scope(tmp_path), ToolCall("c1", "mailer", {"to": "boss"}))
    uid = undo_id(outcome)
    assert "unless a person undoes it" in outcome.result.content and w.mailer.calls == []  # type: ignore[union-attr]
    [pending] = await w.undo.records("acme", "w", "pending")
    assert (pending.undo_id, pending.tool, pending.arguments, pending.call_id) == (uid, "mailer", {"to": "boss"}, "c1")
    record = await w.undo.undo("acme", "w", uid, by="dana")
    await w.undo.join()
    assert (record.state, record.decided_by, w.mailer.calls) == ("undone", "dana", [])
    with pytest.raises(UndoTooLate, match="already undone"):
        await w.undo.undo("acme", "w", uid, by="dana")
    with pytest.raises(UndoNotFound):
        await w.undo.undo("acme", "w", "undo_nope", by="dana")
    # reads, and calls of runs without an undo window, are not held
    await w.pipeline.execute(scope(tmp_path), ToolCall("c2", "reader", {}))
    await w.pipeline.execute(scope(tmp_path, "r2", window=None), ToolCall("c3", "mailer", {"to": "x"}))
    assert w.reader.calls == [{}] and w.mailer.calls == [{"to": "x"}]


async def test_the_call_runs_once_when_the_window_ends(tmp_path: Path) -> None:
    w = world(tmp_path)
    uid = undo_id(await w.pipeline.execute(scope(tmp_path, window=0), ToolCall("c1", "mailer", {"to": "boss"})))
    await w.undo.join()
    record = await w.undo.get("acme", "w", uid)
    assert (record.state, record.outcome, w.mailer.calls) == ("executed", "mailer sent", [{"to": "boss"}])
    assert record.decided_by == w.undo.owner
    with pytest.raises(UndoTooLate, match="already executed"):
        await w.undo.undo("acme", "w", uid, by="dana")


async def test_undo_racing_the_execution_never_both_win(tmp_path: Path) -> None:
    w = world(tmp_path)
    ids = [
        undo_id(await w.pipeline.execute(scope(tmp_path, window=0), ToolCall(f"c{i}", "mailer", {"n": i})))
        for i in range(8)
    ]
    results = await asyncio.gather(*(w.undo.undo("acme", "w", u, by="dana") for u in ids), return_exceptions=True)
    await w.undo.join()
    states = [(await w.undo.get("acme", "w", u)).state for u in ids]
    for result, state in zip(results, states, strict=True):
        assert state == ("executed" if isinstance(result, UndoTooLate) else "undone")
    assert sorted(call["n"] for call in w.mailer.calls) == [i for i, s in enumerate(states) if s == "executed"]


async def test_a_restart_executes_a_due_call_exactly_once_even_with_two_processes(tmp_path: Path) -> None:
    w = world(tmp_path)
    uid = undo_id(await w.pipeline.execute(scope(tmp_path), ToolCall("c1", "mailer", {"to": "boss"})))
    await w.undo.close()  # the process goes away with the call in its window: it stays pending
    assert (await w.undo.get("acme", "w", uid)).state == "pending" and w.mailer.calls == []
    first, second = w.window(clock=lambda: LATER - timedelta(minutes=5)), w.window(clock=lambda: LATER)
    first.max_late_s = second.max_late_s = 10 * 365 * 86400.0
    await asyncio.gather(first.recover(), second.recover())
    await asyncio.gather(first.join(), second.join())
    record = await first.get("acme", "w", uid)
    assert (record.state, w.mailer.calls) == ("executed", [{"to": "boss"}])
    assert await first.recover() == [] and w.mailer.calls == [{"to": "boss"}]


async def test_a_restart_gives_a_call_not_yet_due_a_timer_that_an_undo_still_stops(tmp_path: Path) -> None:
    w = world(tmp_path)
    uid = undo_id(await w.pipeline.execute(scope(tmp_path), ToolCall("c1", "mailer", {"to": "boss"})))
    await w.undo.close()
    restarted = w.window()
    [scheduled] = await restarted.recover()
    assert scheduled.state == "pending"
    await restarted.undo("acme", "w", uid, by="dana")
    await restarted.join()
    assert ((await restarted.get("acme", "w", uid)).state, w.mailer.calls) == ("undone", [])


async def test_a_call_far_past_its_deadline_expires_instead_of_running(tmp_path: Path) -> None:
    w = world(tmp_path)
    uid = undo_id(await w.pipeline.execute(scope(tmp_path), ToolCall("c1", "mailer", {"to": "boss"})))
    await w.undo.close()
    restarted = w.window(clock=lambda: LATER, max_late_s=3600)
    [expired] = await restarted.recover()
    await restarted.join()
    assert (expired.undo_id, expired.state, w.mailer.calls) == (uid, "expired", [])


async def test_a_call_whose_executor_died_mid_way_is_outcome_unknown_and_never_rerun(tmp_path: Path) -> None:
    w = world(tmp_path)
    uid = undo_id(await w.pipeline.execute(scope(tmp_path), ToolCall("c1", "mailer", {"to": "boss"})))
    await w.undo.close()
    record = await w.undo.get("acme", "w", uid)
    assert w.undo._claim(record, ("pending",), "executing", "dead-process") is not None  # then it crashed
    alive_elsewhere = w.window()
    assert await alive_elsewhere.recover(alive=lambda owner: owner == "dead-process") == []  # still running there
    restarted = w.window()
    [unknown] = await restarted.recover(alive=lambda owner: False)
    await restarted.join()
    assert (unknown.state, w.mailer.calls) == ("outcome_unknown", [])
    with pytest.raises(UndoTooLate, match="already outcome_unknown"):
        await restarted.undo("acme", "w", uid, by="dana")


async def test_a_record_of_an_unknown_schema_version_is_refused(tmp_path: Path) -> None:
    w = world(tmp_path)
    uid = undo_id(await w.pipeline.execute(scope(tmp_path), ToolCall("c1", "mailer", {})))
    await w.undo.close()
    path = tmp_path / "tenants/acme/workers/w/runtime/undo" / f"{uid}.json"
    path.write_text(json.dumps({**json.loads(path.read_text("utf-8")), "schema_version": 9}), encoding="utf-8")
    with pytest.raises(UndoError, match="schema_version 9 is unknown"):
        await w.undo.get("acme", "w", uid)



async def test_the_brief_reports_held_calls_pending_with_undo_done_and_the_ones_to_check(tmp_path: Path) -> None:
    from genworker.autonomy.briefs import BriefService, FileBriefStore, held_calls

    w = world(tmp_path)

    async def hold(name: str, window: float) -> str:
        return undo_id(await w.pipeline.execute(scope(tmp_path, name, window), ToolCall(name, "mailer", {"to": name})))

    year = 365 * 86400.0
    ids = {name: await hold(name, window) for name, window in (("undone", 60), ("executed", 3 * year), ("expired", 60))}
    await w.undo.undo("acme", "w", ids["undone"], by="dana")
    await w.undo.close()
    restarted = w.window(clock=lambda: LATER, max_late_s=90 * 86400.0)  # runs "executed", expires "expired"
    await restarted.recover()
    await restarted.join()
    ids["pending"] = await hold("pending", 10 * year)
    await w.undo.close()  # its timer stops; the file stays pending
    assert w.mailer.calls == [{"to": "executed"}]
    briefs = BriefService(FileBriefStore(tmp_path), done=held_calls(restarted), clock=lambda: LATER)
    first = await briefs.generate("acme", "w")
    done = {item.ref: item for item in first.sections["done"]}
    assert set(done) == {ids["pending"], ids["undone"], ids["executed"]}
    assert done[ids["pending"]].options[0].command == f"/undo {ids['pending']}"
    assert "undone by dana" in done[ids["undone"]].title
    assert "ran after its undo window" in done[ids["executed"]].title
    [check] = first.sections["conflicts"]
    assert check.ref == ids["expired"] and "expired" in check.title
    four_hours_on = LATER + timedelta(hours=4)
    briefs = BriefService(FileBriefStore(tmp_path), done=held_calls(restarted), clock=lambda: four_hours_on)
    later = await briefs.generate("acme", "w")  # decided items are reported once; a pending one until decided
    assert [item.ref for item in later.sections["done"]] == [ids["pending"]] and later.sections["conflicts"] == ()


def test_the_max_late_setting_reaches_the_undo_window(tmp_path: Path) -> None:
    from genworker.settings import SettingsError, load_settings
    from genworker.tools.environment import ToolRuntime, undo_max_late_s

    def late(value: str | None) -> float:
        env = {} if value is None else {"GENWORKER_UNDO_MAX_LATE_S": value}
        return undo_max_late_s(load_settings(tmp_path, env))

    assert late(None) == 3600.0 and late("600") == 600.0
    assert ToolRuntime(tmp_path, undo_max_late_s=late("600")).undo.max_late_s == 600.0
    for bad, why in (("soon", "must be a number"), ("-1", "must be between 0 and 2592000")):
        with pytest.raises(SettingsError, match=f"GENWORKER_UNDO_MAX_LATE_S='{bad}': {why}"):
            late(bad)


async def test_decided_records_leave_the_open_folder_and_a_crash_mid_move_is_finished(tmp_path: Path) -> None:
    w = world(tmp_path)
    uid = undo_id(await w.pipeline.execute(scope(tmp_path), ToolCall("c1", "mailer", {"to": "boss"})))
    folder = tmp_path / "tenants/acme/workers/w/runtime/undo"
    open_copy = (folder / f"{uid}.json").read_bytes()
    await w.undo.undo("acme", "w", uid, by="dana")
    await w.undo.close()
    assert [p.name for p in folder.glob("undo_*.json")] == [] and (folder / "decided" / f"{uid}.json").is_file()
    assert list(folder.glob("*.lock")) == []  # no lock file is left per decided call
    assert [(r.undo_id, r.state) for r in await w.undo.records("acme", "w")] == [(uid, "undone")]
    (folder / f"{uid}.json").write_bytes(open_copy)  # a crash between writing the decided copy and the unlink
    restarted = w.window(clock=lambda: LATER, max_late_s=10 * 365 * 86400.0)
    assert await restarted.recover() == []  # the decided copy wins: nothing runs
    await restarted.join()
    assert w.mailer.calls == [] and not (folder / f"{uid}.json").exists()
    assert (await restarted.get("acme", "w", uid)).state == "undone"
