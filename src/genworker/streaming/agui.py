"""Internal EngineEvents -> AG-UI protocol events (the protocol's own pydantic models).

The encoder keeps the little state AG-UI needs: text deltas are wrapped in
TEXT_MESSAGE_START/END, an open message is closed before a tool call or the end of the run,
and a tool result whose call was never announced (a workflow tool step) gets its
TOOL_CALL_START/END first, so every stream is valid for AG-UI clients.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import assert_never

from ag_ui import core as ag

from genworker.engine.events import (
    ApprovalRequired,
    Custom,
    EngineEvent,
    RunError,
    RunFinished,
    RunStarted,
    StepFinished,
    StepStarted,
    TextDelta,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallResult,
    ToolCallStart,
)

__all__ = ["AguiEncoder"]

_MessageEvent = TextDelta | ToolCallStart | ToolCallArgs | ToolCallEnd | ToolCallResult
_LifecycleEvent = RunStarted | RunFinished | RunError | StepStarted | StepFinished | ApprovalRequired


class AguiEncoder:
    def __init__(self, thread_id: str, run_id: str) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self._message_id: str | None = None
        self._announced: set[str] = set()

    def encode(self, event: EngineEvent) -> Iterator[ag.BaseEvent]:
        match event:
            case TextDelta() | ToolCallStart() | ToolCallArgs() | ToolCallEnd() | ToolCallResult():
                yield from self._message(event)
            case RunStarted() | RunFinished() | RunError() | StepStarted() | StepFinished() | ApprovalRequired():
                yield from self._close_text()
                yield self._lifecycle(event)
            case Custom(name=name, value=value):  # beside the text: an open message stays open
                yield ag.CustomEvent(name=name, value=value)
            case _:
                assert_never(event)

    def _message(self, event: _MessageEvent) -> Iterator[ag.BaseEvent]:
        match event:
            case TextDelta(text=text):
                if not text:
                    return
                if self._message_id is None:
                    self._message_id = f"msg_{uuid.uuid4().hex}"
                    yield ag.TextMessageStartEvent(message_id=self._message_id, role="assistant")
                yield ag.TextMessageContentEvent(message_id=self._message_id, delta=text)
            case ToolCallStart(call_id=call_id, name=name):
                yield from self._close_text()
                self._announced.add(call_id)
                yield ag.ToolCallStartEvent(tool_call_id=call_id, tool_call_name=name)
            case ToolCallArgs(call_id=call_id, delta=delta):
                if delta:
                    yield ag.ToolCallArgsEvent(tool_call_id=call_id, delta=delta)
            case ToolCallEnd(call_id=call_id):
                yield ag.ToolCallEndEvent(tool_call_id=call_id)
            case ToolCallResult(call_id=call_id, name=name, content=content):
                yield from self._close_text()
                if call_id not in self._announced:
                    self._announced.add(call_id)
                    yield ag.ToolCallStartEvent(tool_call_id=call_id, tool_call_name=name)
                    yield ag.ToolCallEndEvent(tool_call_id=call_id)
                yield ag.ToolCallResultEvent(
                    message_id=f"tool_{call_id}", tool_call_id=call_id, content=content, role="tool"
                )
            case _:
                assert_never(event)

    def _lifecycle(self, event: _LifecycleEvent) -> ag.BaseEvent:
        match event:
            case RunStarted():
                return ag.RunStartedEvent(thread_id=self.thread_id, run_id=self.run_id)
            case StepStarted(step_id=step_id):
                return ag.StepStartedEvent(step_name=step_id)
            case StepFinished(step_id=step_id):
                return ag.StepFinishedEvent(step_name=step_id)
            case ApprovalRequired(call_id=call_id, tool=tool, arguments=arguments, reason=reason):
                value = {"tool_call_id": call_id, "tool": tool, "arguments": arguments, "reason": reason}
                return ag.CustomEvent(name="approval_required", value=value)
            case RunFinished(outcome=outcome, output=output):
                result = {"outcome": outcome, "output": output}
                return ag.RunFinishedEvent(thread_id=self.thread_id, run_id=self.run_id, result=result)
            case RunError(code=code, message=message):
                return ag.RunErrorEvent(message=message, code=code)
            case _:
                assert_never(event)

    def _close_text(self) -> Iterator[ag.BaseEvent]:
        if self._message_id is not None:
            yield ag.TextMessageEndEvent(message_id=self._message_id)
            self._message_id = None
