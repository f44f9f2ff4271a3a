"""A run's trace, kept beside it for the run view: the context it was given (each segment and its
tokens, compaction) and its AG-UI event timeline (each event's type, time since the run was accepted and
a short summary), as `tenants/{t}/workers/{w}/runtime/run_traces/{run_id}.json`.

Recording only keeps each engine event and its time; encoding and summarising happen when the trace
is written, in a thread. Bounded: at most RAW_EVENTS_MAX engine events kept and MAX_EVENTS timeline
entries (text and argument deltas of one message or call merge into one entry; past either bound only
the run's end is kept and the rest counted in `dropped`), each summary at most SUMMARY_CHARS. Redacted
as the tool audit redacts: the worker's secrets and well-known token shapes masked, tool arguments as
`redacted_arguments` keeps them. Written once, atomically, when the run ends (before its RouteDone), so
a reader sees no trace or the whole of it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ag_ui import core as ag
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from genworker.engine.events import EngineEvent, RunError, RunFinished
from genworker.fsutil import write_atomic
from genworker.ids import safe_join, validate_id
from genworker.streaming.agui import AguiEncoder
from genworker.tools.middlewares.audit import redacted_arguments
from genworker.tools.middlewares.redaction import redactor_for

__all__ = [
    "MAX_EVENTS",
    "RAW_EVENTS_MAX",
    "SUMMARY_CHARS",
    "TRACE_DIR",
    "TRACE_SCHEMA_VERSION",
    "ContextEntry",
    "RunTrace",
    "RunTraceError",
    "RunTraceFile",
    "RunTraceFiles",
    "TimelineEntry",
    "read_run_trace",
    "trace_path",
]

log = logging.getLogger("genworker.streaming")

TRACE_SCHEMA_VERSION = 1
TRACE_DIR = ("runtime", "run_traces")
MAX_EVENTS = 400
RAW_EVENTS_MAX = 20_000  # engine events kept while a run goes on (text deltas included); then only its end
SUMMARY_CHARS = 300
_ARGS_KEPT = 16_384  # a call's argument text read for its summary
_TERMINAL = frozenset({ag.EventType.RUN_FINISHED.value, ag.EventType.RUN_ERROR.value})


class RunTraceError(ValueError):
    """A trace file that cannot be read: not JSON, another schema_version, invalid fields."""


class SegmentEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    tokens: int
    quota: int
    items: int = 0
    omitted: int = 0
    truncated: bool = False


class CompactionEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    step: str
    tokens_before: int
    tokens_after: int
    detail: str = ""


class ContextEntry(BaseModel):
    """The context the engine was given (the smaller one after a reactive overflow retry)."""

    model_config = ConfigDict(extra="forbid")

    budget: int
    total_tokens: int
    segments: list[SegmentEntry]
    compaction: list[CompactionEntry] = Field(default_factory=list)
    summarised: bool = False


class TimelineEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: str  # the AG-UI event type: RUN_STARTED, TOOL_CALL_START, ...
    offset_ms: float  # since the run was accepted
    summary: str = ""
    count: int = 1  # deltas merged into this entry


class RunTraceFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int
    tenant_id: str
    worker_id: str
    run_id: str
    thread_id: str
    started_at: datetime
    context: ContextEntry | None = None
    events: list[TimelineEntry]
    dropped: int = 0  # events past MAX_EVENTS, not kept


def trace_path(root: Path, tenant_id: str, worker_id: str, run_id: str) -> Path:
    folder = safe_join(root, "tenants", tenant_id, "workers", worker_id, kind="tenant/worker id")
    return folder.joinpath(*TRACE_DIR, f"{validate_id(run_id, 'run id')}.json")


def read_run_trace(root: Path, tenant_id: str, worker_id: str, run_id: str) -> RunTraceFile | None:
    """The trace kept with a run, or None when it kept none; blocking. RunTraceError when unreadable
    (naming the file within the worker's folder, never the server's path)."""
    file = trace_path(root, tenant_id, worker_id, run_id)
    try:
        data = file.read_bytes()
    except FileNotFoundError:
        return None
    path = "/".join((*TRACE_DIR, file.name))
    try:
        raw = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RunTraceError(f"{path}: not valid JSON: {exc}") from None
    version = raw.get("schema_version") if isinstance(raw, dict) else None
    if version != TRACE_SCHEMA_VERSION:
        raise RunTraceError(
            f"{path}: schema_version {version!r} is not supported (this runtime reads {TRACE_SCHEMA_VERSION})"
        )
    try:
        return RunTraceFile.model_validate(raw)
    except ValidationError as exc:
        raise RunTraceError(f"{path}: invalid fields: {exc}") from None


@dataclass
class _Entry:
    type: str
    offset_ms: float
    summary: str = ""
    key: str = ""  # the message or call a delta belongs to
    parts: list[str] = field(default_factory=list)
    size: int = 0
    count: int = 1


def _clip(text: str, n: int = SUMMARY_CHARS) -> str:
    return text if len(text) <= n else f"{text[:n]}…"


class _Timeline:
    """The AG-UI events of a run, as the timeline keeps them: deltas merged, bounded, summarised, redacted."""

    def __init__(self, secrets: tuple[str, ...]) -> None:
        self._secrets = secrets
        self._entries: list[_Entry] = []
        self.dropped = 0

    def add(self, event: ag.BaseEvent, offset: float) -> None:
        kind = event.type.value
        key = _delta_key(event)
        last = self._entries[-1] if self._entries else None
        if key and last is not None and last.type == kind and last.key == key:
            last.count += 1
            self._append(last, _delta(event))
            return
        if len(self._entries) >= MAX_EVENTS and kind not in _TERMINAL:
            self.dropped += 1
            return
        entry = _Entry(kind, offset, key=key)
        if key:
            self._append(entry, _delta(event))
        else:
            entry.summary = self._summary(event)
        self._entries.append(entry)

    @staticmethod
    def _append(entry: _Entry, delta: str) -> None:
        if entry.size < _ARGS_KEPT:
            entry.parts.append(delta[: _ARGS_KEPT - entry.size])
            entry.size += len(entry.parts[-1])

    def _summary(self, event: ag.BaseEvent) -> str:
        text = self._text
        match event:
            case ag.ToolCallStartEvent(tool_call_name=name, tool_call_id=call_id):
                return f"{name} (call {call_id})"
            case ag.ToolCallEndEvent(tool_call_id=call_id) | ag.TextMessageEndEvent(message_id=call_id):
                return call_id
            case ag.ToolCallResultEvent(tool_call_id=call_id, content=content):
                shown = content if isinstance(content, str) else json.dumps(content, default=str)
                return f"call {call_id}: {text(shown)}"
            case ag.StepStartedEvent(step_name=name) | ag.StepFinishedEvent(step_name=name):
                return name
            case ag.CustomEvent(name=name, value=value):
                if isinstance(value, Mapping) and "arguments" in value:
                    value = {**value, "arguments": self._arguments(str(value["arguments"]))}
                return f"{name}: {text(json.dumps(value, ensure_ascii=False, default=str))}"
            case ag.RunFinishedEvent(result=result):
                result = result if isinstance(result, Mapping) else {}
                return f"{result.get('outcome', '')}: {text(str(result.get('output', '')))}".strip(": ")
            case ag.RunErrorEvent(code=code, message=message):
                return f"{code}: {text(message)}" if code else text(message)
            case ag.RunStartedEvent(thread_id=thread_id):
                return f"thread {thread_id}"
            case ag.TextMessageStartEvent(role=role):
                return str(role)
        return ""

    def _text(self, text: str) -> str:
        return _clip(redactor_for(self._secrets).text(text))

    def _arguments(self, raw: str) -> Any:
        try:
            return redacted_arguments(self._secrets, json.loads(raw))
        except ValueError:
            return self._text(raw)

    def entries(self) -> list[TimelineEntry]:
        shown = []
        for entry in self._entries:
            summary = entry.summary
            if entry.type == ag.EventType.TOOL_CALL_ARGS.value:
                args = self._arguments("".join(entry.parts))
                summary = args if isinstance(args, str) else _clip(json.dumps(args, ensure_ascii=False, default=str))
            elif entry.type == ag.EventType.TEXT_MESSAGE_CONTENT.value:
                summary = self._text("".join(entry.parts))
            shown.append(TimelineEntry(type=entry.type, offset_ms=entry.offset_ms, summary=summary, count=entry.count))
        return shown


class RunTrace:
    """One run's trace while it runs: `record` only keeps each engine event with its time (cheap, on the
    event loop); `close()` encodes them as AG-UI, summarises and writes the file in a thread."""

    def __init__(
        self, root: Path, tenant_id: str, worker_id: str, run_id: str, thread_id: str, *, clock: Any = time.monotonic
    ) -> None:
        self.path = trace_path(root, tenant_id, worker_id, run_id)
        self.ids = (tenant_id, worker_id, run_id, thread_id)
        self._clock = clock
        self._started = clock()
        self.started_at = datetime.now(UTC)
        self._secrets: tuple[str, ...] = ()
        self._context: ContextEntry | None = None
        self._raw: list[tuple[float, EngineEvent]] = []
        self.raw_dropped = 0
        self.closed = False

    def context(self, report: Mapping[str, Any], secrets: tuple[str, ...]) -> None:
        """The context the engine runs with (`context_report`), and the secrets its summaries are redacted of."""
        self._context = ContextEntry.model_validate(report)
        self._secrets = secrets

    def record(self, event: EngineEvent) -> None:
        if self.closed:
            return
        if len(self._raw) < RAW_EVENTS_MAX or isinstance(event, RunFinished | RunError):
            self._raw.append((round((self._clock() - self._started) * 1000, 1), event))
        else:
            self.raw_dropped += 1

    def snapshot(self) -> RunTraceFile:
        tenant_id, worker_id, run_id, thread_id = self.ids
        encoder, timeline = AguiEncoder(thread_id, run_id), _Timeline(self._secrets)
        for offset, event in self._raw:
            for encoded in encoder.encode(event):
                timeline.add(encoded, offset)
        return RunTraceFile(
            schema_version=TRACE_SCHEMA_VERSION,
            tenant_id=tenant_id,
            worker_id=worker_id,
            run_id=run_id,
            thread_id=thread_id,
            started_at=self.started_at,
            context=self._context,
            events=timeline.entries(),
            dropped=timeline.dropped + self.raw_dropped,
        )

    def write(self) -> None:
        """Blocking: the whole trace, atomically (not fsynced: a trace lost in a crash costs nothing)."""
        write_atomic(self.path, self.snapshot().model_dump_json().encode("utf-8"), durable=False)  # makes the folder

    async def close(self) -> None:
        """Write the trace once (nothing is recorded after); a write that fails is logged, never the run's
        failure."""
        if self.closed:
            return
        self.closed = True
        try:
            await asyncio.to_thread(self.write)
        except OSError:
            log.exception("run trace %s not written", self.path)


def _delta_key(event: ag.BaseEvent) -> str:
    match event:
        case ag.TextMessageContentEvent(message_id=message_id):
            return message_id
        case ag.ToolCallArgsEvent(tool_call_id=call_id):
            return call_id
    return ""


def _delta(event: ag.BaseEvent) -> str:
    return str(getattr(event, "delta", ""))


@dataclass(frozen=True, slots=True)
class RunTraceFiles:
    """Starts a `RunTrace` per run under the workspace root (the router's `traces`)."""

    root: Path

    def start(self, tenant_id: str, worker_id: str, run_id: str, thread_id: str) -> RunTrace:
        return RunTrace(self.root, tenant_id, worker_id, run_id, thread_id)
