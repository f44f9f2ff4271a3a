"""`genworker chat` and `genworker task`: stream a run from a running server.

Text streams to stdout as the model writes it; tool calls and their results are shown on
stderr (`  -> tool(args)` / `  <- result`), so stdout stays the worker's answer. With `--json`,
`chat` prints every AG-UI event as one JSON line and `task` prints one JSON summary.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

from genworker.cli.http import CliError, Remote, add_remote_arguments, remote_from_args

__all__ = ["RunOutcome", "register", "render_events"]

_EXIT = {"/exit", "/quit", ":q"}
RESULT_PREVIEW = 300


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    chat = commands.add_parser("chat", help="chat with a worker on a running server (streams the answer)")
    chat.add_argument("worker", help="WORKER or TENANT/WORKER")
    chat.add_argument("-m", "--message", action="append", help="send this message and exit (repeatable)")
    chat.add_argument("--thread", help="continue this thread id")
    chat.add_argument("--skill", help="force a skill")
    add_remote_arguments(chat)
    chat.set_defaults(handler=_chat)

    task = commands.add_parser("task", help="run a one-shot task on a running server and print its output")
    task.add_argument("worker", help="WORKER or TENANT/WORKER")
    task.add_argument("text", help="what the worker should do")
    task.add_argument("--skill", help="force a skill")
    add_remote_arguments(task)
    task.set_defaults(handler=_task)


@dataclass
class RunOutcome:
    run_id: str | None = None
    thread_id: str | None = None
    outcome: str | None = None
    output: str = ""
    error: dict[str, str] | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    approval_required: list[dict[str, Any]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "thread_id": self.thread_id,
            "outcome": self.outcome,
            "output": self.output,
            "error": self.error,
            "tool_calls": self.tool_calls,
            "approval_required": self.approval_required,
        }


def render_events(events: Iterator[Mapping[str, Any]], out: TextIO | None, notes: TextIO | None) -> RunOutcome:
    """Consume one run's AG-UI events; write text to `out` and tool calls to `notes` (None: quiet)."""
    renderer = _Renderer(out, notes)
    for event in events:
        handler = renderer.handlers.get(str(event.get("type")))
        if handler is not None:
            handler(event)
    result = renderer.result
    if not result.output:
        result.output = "".join(renderer.text)
    return result


class _Renderer:
    def __init__(self, out: TextIO | None, notes: TextIO | None) -> None:
        self.out, self.notes = out, notes
        self.result = RunOutcome()
        self.text: list[str] = []
        self.calls: dict[str, dict[str, Any]] = {}
        self.handlers: dict[str, Callable[[Mapping[str, Any]], None]] = {
            "RUN_STARTED": self.started,
            "TEXT_MESSAGE_CONTENT": self.text_delta,
            "TEXT_MESSAGE_END": lambda _: _write(self.out, "\n"),
            "TOOL_CALL_START": self.call_start,
            "TOOL_CALL_ARGS": self.call_args,
            "TOOL_CALL_END": self.call_end,
            "TOOL_CALL_RESULT": self.call_result,
            "CUSTOM": self.custom,
            "RUN_FINISHED": self.finished,
            "RUN_ERROR": self.error,
        }

    def started(self, event: Mapping[str, Any]) -> None:
        self.result.run_id, self.result.thread_id = event.get("runId"), event.get("threadId")

    def text_delta(self, event: Mapping[str, Any]) -> None:
        delta = str(event.get("delta", ""))
        self.text.append(delta)
        _write(self.out, delta)

    def _call(self, event: Mapping[str, Any]) -> dict[str, Any]:
        call_id = str(event.get("toolCallId"))
        call = self.calls.get(call_id)
        if call is None:
            call = self.calls[call_id] = {"id": call_id, "name": None, "arguments": "", "result": None}
            self.result.tool_calls.append(call)
        return call

    def call_start(self, event: Mapping[str, Any]) -> None:
        self._call(event)["name"] = event.get("toolCallName")

    def call_args(self, event: Mapping[str, Any]) -> None:
        self._call(event)["arguments"] += str(event.get("delta", ""))

    def call_end(self, event: Mapping[str, Any]) -> None:
        call = self._call(event)
        _write(self.notes, f"  -> {call['name']}({call['arguments']})\n")

    def call_result(self, event: Mapping[str, Any]) -> None:
        content = str(event.get("content", ""))
        self._call(event)["result"] = content
        preview = content if len(content) <= RESULT_PREVIEW else content[:RESULT_PREVIEW] + "…"
        _write(self.notes, f"  <- {' '.join(preview.split())}\n")

    def custom(self, event: Mapping[str, Any]) -> None:
        if event.get("name") == "approval_required":
            value = dict(event.get("value") or {})
            self.result.approval_required.append(value)
            _write(self.notes, f"  !! {value.get('tool')} needs approval: {value.get('reason')}\n")

    def finished(self, event: Mapping[str, Any]) -> None:
        finished = event.get("result")
        finished = finished if isinstance(finished, dict) else {}
        self.result.outcome = str(finished.get("outcome") or "finished")
        output = str(finished.get("output") or "")
        if output and not self.text:  # a run that answered without streaming
            _write(self.out, output + "\n")
        self.result.output = output or "".join(self.text)

    def error(self, event: Mapping[str, Any]) -> None:
        self.result.outcome = "failed"
        self.result.error = {"code": str(event.get("code")), "message": str(event.get("message"))}


def _write(stream: TextIO | None, text: str) -> None:
    if stream is not None and text:
        stream.write(text)
        stream.flush()


def _stream_run(remote: Remote, path: str, body: dict[str, Any], as_json: bool) -> RunOutcome:
    with remote.events(path, body) as (_, events):
        if as_json:
            return render_events(_echo(events), None, None)
        return render_events(events, sys.stdout, sys.stderr)


def _echo(events: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for event in events:
        print(json.dumps(event, ensure_ascii=False), flush=True)
        yield event


def _task(args: argparse.Namespace) -> int:
    remote = remote_from_args(args)
    body = {"worker_id": args.worker, "task": args.text, "skill_id": args.skill}
    with remote.events("/api/v1/worker/task/stream", body) as (_, events):
        outcome = render_events(events, None if args.json else sys.stdout, None if args.json else sys.stderr)
    if args.json:
        print(json.dumps(outcome.as_json(), indent=2, ensure_ascii=False))
    return _exit_code(outcome, quiet=args.json)


def _exit_code(outcome: RunOutcome, *, quiet: bool = False) -> int:
    if outcome.error is not None:
        if not quiet:
            print(f"genworker: run failed: {outcome.error['code']}: {outcome.error['message']}", file=sys.stderr)
        return 1
    if outcome.outcome is None:
        if not quiet:
            print("genworker: the stream ended before the run finished", file=sys.stderr)
        return 1
    return 0


def _chat(args: argparse.Namespace) -> int:
    remote = remote_from_args(args)
    thread = args.thread
    interactive = args.message is None
    messages = _prompts(sys.stdin) if interactive else iter(args.message)
    code = 0
    for message in messages:
        body = {"worker_id": args.worker, "message": message, "thread_id": thread, "skill_id": args.skill}
        try:
            outcome = _stream_run(remote, "/api/v1/chat/stream", body, args.json)
        except CliError as exc:
            if not interactive:
                raise
            print(f"genworker: {exc}", file=sys.stderr)  # a failed turn does not end the conversation
            code = exc.code
            continue
        thread = outcome.thread_id or thread
        code = _exit_code(outcome, quiet=args.json)
        if code and not interactive:
            return code
    if interactive and sys.stdin.isatty():
        print(file=sys.stderr)
    if thread and not args.json:
        print(f"(thread {thread}: continue with --thread {thread})", file=sys.stderr)
    return code


def _prompts(stream: TextIO) -> Iterator[str]:
    tty = stream.isatty()
    while True:
        if tty:
            print("you> ", end="", file=sys.stderr, flush=True)
        line = stream.readline()
        if not line:
            return
        message = line.strip()
        if message in _EXIT:
            return
        if message:
            yield message
