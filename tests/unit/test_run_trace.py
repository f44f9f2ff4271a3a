"""A run's trace (genworker.streaming.trace): the AG-UI timeline of its engine events, merged, bounded and
redacted as the tool audit redacts; the context report; the file it is written to and read back from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from genworker.dashboard.run_view import trace_view
from genworker.engine.events import (
    ApprovalRequired,
    RunError,
    RunFinished,
    RunStarted,
    TextDelta,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallResult,
    ToolCallStart,
)
from genworker.ids import InvalidIdError
from genworker.streaming import trace as trace_module
from genworker.streaming.trace import (
    MAX_EVENTS,
    SUMMARY_CHARS,
    TRACE_SCHEMA_VERSION,
    RunTrace,
    RunTraceError,
    read_run_trace,
    trace_path,
)
from genworker.tools.middlewares.redaction import MASK
from genworker.worker.context import compact_for_overflow
from genworker.worker.context.models import ContextSegment, ContextWindowConfig, ManagedContext, SegmentName
from genworker.worker.routing import RouteAccepted, RouteDone, RouterEvent
from genworker.worker.run_trace import context_report, traced

pytestmark = pytest.mark.anyio

SECRET = "fake-test-value-worker-0042"
OPENAI_KEY = "sk-" + "a1b2c3d4e5f6g7h8i9j0"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def trace(root: Path, clock: Clock | None = None) -> RunTrace:
    return RunTrace(root, "acme", "alice", "run_1", "thread_1", clock=clock or Clock())


def context() -> ManagedContext:
    config = ContextWindowConfig()
    segments = tuple(
        ContextSegment(name, text, config.quota(name), items=items)
        for name, text, items in (
            (SegmentName.SYSTEM_IDENTITY, "You are Alice, an assistant.", 0),
            (SegmentName.CONSTRAINTS_RULES, "- be brief\n- be kind", 2),
            (SegmentName.TASK, "Read notes.md", 0),
        )
    )
    history = ({"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello there"})
    return ManagedContext(segments, history, config)


def test_the_timeline_is_the_ag_ui_stream_with_deltas_merged_and_offsets_from_the_start(tmp_path: Path) -> None:
    clock = Clock()
    t = trace(tmp_path, clock)
    t.record(RunStarted("run_1", "react", "chat"))
    clock.now += 0.25
    for word in ("Hel", "lo ", "team"):
        t.record(TextDelta(word))
    t.record(ToolCallStart("c1", "file_read"))
    for part in ('{"pa', 'th": "no', 'tes.md"}'):
        t.record(ToolCallArgs("c1", part))
    t.record(ToolCallEnd("c1"))
    clock.now += 0.5
    t.record(ToolCallResult("c1", "file_read", "completed", "the notes"))
    t.record(RunFinished("run_1", "completed", "Hello team"))
    events = [(e.type, e.offset_ms, e.summary, e.count) for e in t.snapshot().events]
    assert events == [
        ("RUN_STARTED", 0.0, "thread thread_1", 1),
        ("TEXT_MESSAGE_START", 250.0, "assistant", 1),
        ("TEXT_MESSAGE_CONTENT", 250.0, "Hello team", 3),
        ("TEXT_MESSAGE_END", 250.0, events[3][2], 1),
        ("TOOL_CALL_START", 250.0, "file_read (call c1)", 1),
        ("TOOL_CALL_ARGS", 250.0, '{"path": "notes.md"}', 3),
        ("TOOL_CALL_END", 250.0, "c1", 1),
        ("TOOL_CALL_RESULT", 750.0, "call c1: the notes", 1),
        ("RUN_FINISHED", 750.0, "completed: Hello team", 1),
    ]


def test_arguments_results_and_errors_are_redacted_as_the_audit_redacts(tmp_path: Path) -> None:
    t = trace(tmp_path)
    t.context(context_report(context()), (SECRET,))
    t.record(ToolCallStart("c1", "http_get"))
    args = {"url": f"https://x.test/?q={SECRET}", "api_key": "plain-value", "note": "x" * 1500}
    text = json.dumps(args)
    t.record(ToolCallArgs("c1", text[:10]))
    t.record(ToolCallArgs("c1", text[10:]))
    t.record(ToolCallResult("c1", "http_get", "failed", f"Authorization: Bearer {OPENAI_KEY}"))
    t.record(ApprovalRequired("c2", "send", json.dumps({"token": "abc", "to": SECRET}), "writes"))
    t.record(TextDelta(f"my key is {OPENAI_KEY}"))
    t.record(RunError("run_1", "provider_error", f"refused {SECRET}"))
    dumped = t.snapshot().model_dump_json()
    assert SECRET not in dumped and OPENAI_KEY not in dumped and "plain-value" not in dumped
    by_type = {e.type: e.summary for e in t.snapshot().events}
    shown = by_type["TOOL_CALL_ARGS"]
    assert shown.startswith(f'{{"url": "https://x.test/?q={MASK}", "api_key": "{MASK}", "note": "xxx')
    assert len(shown) == SUMMARY_CHARS + 1 and shown.endswith("…")  # clipped
    assert by_type["RUN_ERROR"] == f"provider_error: refused {MASK}"
    assert '"token": "[REDACTED]"' in by_type["CUSTOM"] and MASK in by_type["TEXT_MESSAGE_CONTENT"]


def test_past_the_bound_only_the_runs_end_is_kept_and_the_rest_counted(tmp_path: Path) -> None:
    t = trace(tmp_path)
    for n in range(MAX_EVENTS + 50):
        t.record(ToolCallStart(f"c{n}", "file_read"))
    t.record(TextDelta("x" * 100_000))  # one huge message: its summary stays small
    t.record(RunError("run_1", "engine_error", "too many calls"))
    snap = t.snapshot()
    assert len(snap.events) == MAX_EVENTS + 1 and snap.dropped == 53  # 50 calls, the message's start, text, end
    assert snap.events[-1].type == "RUN_ERROR" and snap.events[-1].summary == "engine_error: too many calls"
    t.write()
    assert t.path.stat().st_size < MAX_EVENTS * (SUMMARY_CHARS + 200)


def test_a_run_s_engine_events_are_kept_up_to_a_bound_and_its_end_always(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trace_module, "RAW_EVENTS_MAX", 5)
    t = trace(tmp_path)
    t.record(RunStarted("run_1", "react", "chat"))
    for n in range(14):
        t.record(ToolCallStart(f"c{n}", "file_read"))
    t.record(RunFinished("run_1", "completed", "done"))
    snap = t.snapshot()
    assert [e.type for e in snap.events] == ["RUN_STARTED", *["TOOL_CALL_START"] * 4, "RUN_FINISHED"]
    assert snap.dropped == t.raw_dropped == 10


def test_the_context_report_names_each_segment_with_its_tokens_and_quota() -> None:
    ctx = context()
    report = context_report(ctx)
    names = [s["name"] for s in report["segments"]]
    assert names == ["system_identity", "constraints_rules", "history", "task"]
    rules = report["segments"][1]
    assert rules["items"] == 2 and rules["tokens"] == ctx.segment(SegmentName.CONSTRAINTS_RULES).tokens
    history = report["segments"][2]
    assert history["items"] == 2 and history["tokens"] == ctx.history_tokens and history["quota"] > 0
    assert report["total_tokens"] == ctx.total_tokens and report["budget"] == ctx.budget
    assert report["compaction"] == [] and report["summarised"] is False


def test_the_context_report_keeps_the_compaction_of_an_overflow_retry() -> None:
    ctx = context()
    turns = tuple({"role": ("user", "assistant")[i % 2], "content": "word " * 300} for i in range(40))
    smaller = compact_for_overflow(ManagedContext(ctx.segments, turns, ctx.config))
    report = context_report(smaller)
    [step] = report["compaction"]
    assert step["step"] == "overflow_recovery" and step["tokens_after"] == smaller.total_tokens < step["tokens_before"]
    assert report["segments"][2]["items"] == len(smaller.history) < len(turns)


async def test_the_trace_is_written_once_atomically_and_read_back(tmp_path: Path) -> None:
    t = trace(tmp_path)
    t.context(context_report(context()), ())
    t.record(RunStarted("run_1", "react", "chat"))
    await t.close()
    path = tmp_path / "tenants/acme/workers/alice/runtime/run_traces/run_1.json"
    assert t.path == path and path.is_file()
    first = path.read_bytes()
    t.record(RunFinished("run_1", "completed", "late"))
    await t.close()  # a second close writes nothing
    assert path.read_bytes() == first
    read = read_run_trace(tmp_path, "acme", "alice", "run_1")
    assert read is not None and read.schema_version == TRACE_SCHEMA_VERSION
    assert [e.type for e in read.events] == ["RUN_STARTED"] and read.context is not None
    assert read.context.segments[0].name == "system_identity"
    assert read_run_trace(tmp_path, "acme", "alice", "run_2") is None
    assert [p.name for p in path.parent.iterdir()] == ["run_1.json"]  # no temporary file left


def test_an_unreadable_trace_is_refused_with_the_file_named(tmp_path: Path) -> None:
    path = trace_path(tmp_path, "acme", "alice", "run_1")
    path.parent.mkdir(parents=True)
    path.write_text('{"schema_version": 99}', encoding="utf-8")
    with pytest.raises(RunTraceError, match=r"^runtime/run_traces/run_1\.json: schema_version 99 is not supported"):
        read_run_trace(tmp_path, "acme", "alice", "run_1")
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(RunTraceError, match="not valid JSON"):
        read_run_trace(tmp_path, "acme", "alice", "run_1")
    path.write_text(json.dumps({"schema_version": TRACE_SCHEMA_VERSION, "run_id": "run_1"}), encoding="utf-8")
    with pytest.raises(RunTraceError, match="invalid fields"):
        read_run_trace(tmp_path, "acme", "alice", "run_1")
    with pytest.raises(InvalidIdError):
        trace_path(tmp_path, "acme", "alice", "../run_1")


async def test_a_trace_that_cannot_be_written_is_logged_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "tenants").write_text("a file where the folder should be", encoding="utf-8")
    t = trace(tmp_path)
    await t.close()
    assert "not written" in caplog.text


async def test_the_router_s_emit_records_each_event_and_writes_the_trace_before_route_done(tmp_path: Path) -> None:
    t = trace(tmp_path)
    seen: list[tuple[str, bool]] = []

    async def downstream(event: RouterEvent) -> None:
        seen.append((type(event).__name__, t.path.is_file()))

    emit = traced(downstream, t)
    await emit(RouteAccepted("thread_1", "run_1", "task_1"))
    await emit(RunStarted("run_1", "react", "chat"))
    await emit(RouteDone(None, None))  # type: ignore[arg-type]  # only its kind matters here
    assert seen == [("RouteAccepted", False), ("RunStarted", False), ("RouteDone", True)]
    read = read_run_trace(tmp_path, "acme", "alice", "run_1")
    assert read is not None and [e.type for e in read.events] == ["RUN_STARTED"]  # RouteAccepted is not AG-UI
    assert traced(downstream, None) is downstream  # no traces: the emit is the router's own


def test_the_run_view_says_why_a_context_or_timeline_is_missing(tmp_path: Path) -> None:
    old = trace_view(None)
    assert old["context"]["recorded"] is False and "kept no trace" in old["context"]["reason"]
    assert old["timeline"] == {"recorded": False, "reason": old["context"]["reason"], "events": [], "dropped": 0}
    unreadable = trace_view(None, "the run's trace could not be read: schema_version 99")
    assert "schema_version 99" in unreadable["timeline"]["reason"]
    t = trace(tmp_path)
    t.record(RunFinished("run_1", "approval_required", ""))  # gated: no engine, so no context
    gated = trace_view(t.snapshot())
    assert gated["context"]["recorded"] is False and "no context was assembled" in gated["context"]["reason"]
    assert gated["timeline"]["recorded"] is True and gated["timeline"]["events"][0]["type"] == "RUN_FINISHED"
    t.context(context_report(context()), ())
    shown = trace_view(t.snapshot())
    assert shown["context"]["recorded"] is True and shown["context"]["segments"][0]["name"] == "system_identity"
