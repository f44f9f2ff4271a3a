"""Deterministic supervision: pure checks of one tool call or one answer against a policy. Each
returns the Decision the policy asks for, or None when the check passes."""

from __future__ import annotations

import fnmatch
import json
import posixpath
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema

from genworker.supervision.decisions import Decision
from genworker.supervision.policy import SupervisorPolicy

__all__ = ["Counters", "check_answer", "check_call", "check_limits", "check_result"]

_PATH_KEYS = frozenset({"path", "paths", "file", "files", "dir", "directory", "folder", "target", "source"})
_PARTITION_KEYS = ("partition", "scope")


@dataclass
class Counters:
    """What the supervisor counted of one run so far."""

    started: float  # time.monotonic() at the start
    tool_calls: int = 0
    in_flight: int = 0
    failures: int = 0
    output_chars: int = 0
    last_tool: str = "start"


def _violation(p: SupervisorPolicy, check: str, reason: str, cites: tuple[str, ...]) -> Decision:
    return Decision(p.on_violation, check, reason, cites, policy=p.name)


def _over(p: SupervisorPolicy, check: str, reason: str, cites: tuple[str, ...] = ()) -> Decision:
    return Decision(p.on_budget, check, reason, cites, budget=True, policy=p.name)


def check_call(p: SupervisorPolicy, c: Counters, call_id: str, tool: str, args: Mapping[str, Any]) -> Decision | None:
    """Before tool call `call_id` runs (`c` not yet counting it): allow-lists, transitions, memory
    partitions, stop conditions, the tool-call and concurrency budgets."""
    cites = (call_id,)
    if p.tools is not None and not any(fnmatch.fnmatchcase(tool, pat) for pat in p.tools):
        return _violation(p, "tool_allow_list", f"tool {tool!r} is not in the policy's tools", cites)
    if p.transitions is not None and tool not in p.transitions.get(c.last_tool, ()):
        return _violation(p, "transition", f"{tool!r} may not follow {c.last_tool!r}", cites)
    if p.directories is not None:
        for path in _paths(args):
            if not _under(path, p.directories):
                return _violation(p, "directory_allow_list", f"path {path!r} is outside {list(p.directories)}", cites)
    if p.memory_partitions is not None and tool.startswith("memory"):
        for key in _PARTITION_KEYS:
            part = args.get(key)
            if isinstance(part, str) and part not in p.memory_partitions:
                return _violation(p, "memory_partition", f"memory partition {part!r} is not allowed", cites)
    if tool in p.stop_on_tools:
        return Decision(
            "stop", "stop_condition", f"the policy stops the run when {tool!r} is called", cites, policy=p.name
        )
    b = p.budgets
    if b.tool_calls is not None and c.tool_calls + 1 > b.tool_calls:
        return _over(p, "tool_call_budget", f"tool call {c.tool_calls + 1} is over the budget of {b.tool_calls}", cites)
    if b.concurrent_tools is not None and c.in_flight + 1 > b.concurrent_tools:
        return _over(p, "concurrency_budget", f"more than {b.concurrent_tools} tool calls at once", cites)
    return None


def check_limits(p: SupervisorPolicy, c: Counters, now: float, tokens: int | None) -> Decision | None:
    """Between steps: the time, token and output budgets."""
    b = p.budgets
    if b.seconds is not None and now - c.started > b.seconds:
        return _over(p, "time_budget", f"the run took over {b.seconds:g}s")
    if b.tokens is not None and tokens is not None and tokens > b.tokens:
        return _over(p, "token_budget", f"the run's model calls used {tokens} tokens, the budget is {b.tokens}")
    if b.output_chars is not None and c.output_chars > b.output_chars:
        return _over(p, "output_budget", f"the run wrote {c.output_chars} characters, the budget is {b.output_chars}")
    return None


def check_result(p: SupervisorPolicy, c: Counters, call_id: str) -> Decision | None:
    """After a failed or denied tool call (already counted): the failure threshold."""
    if p.max_tool_failures is not None and c.failures >= p.max_tool_failures:
        return _over(p, "tool_failures", f"{c.failures} tool calls failed or were denied", (call_id,))
    return None


def check_answer(p: SupervisorPolicy, output: str) -> Decision | None:
    """The final answer: stop texts and the output schema (a warning: the answer is already written)."""
    for text in p.stop_on_text:
        if text in output:
            return Decision("stop", "stop_condition", f"the answer contains {text!r}", ("output",), policy=p.name)
    if p.output_schema is not None:
        try:
            jsonschema.validate(json.loads(output), p.output_schema)
        except json.JSONDecodeError:
            return Decision("warn", "output_schema", "the answer is not JSON", ("output",), policy=p.name)
        except jsonschema.ValidationError as exc:
            where = "/".join(str(x) for x in exc.absolute_path) or "(answer)"
            return Decision("warn", "output_schema", f"{where}: {exc.message}", ("output",), policy=p.name)
    return None


def _paths(args: Mapping[str, Any]) -> Iterator[str]:
    for key, value in args.items():
        if key in _PATH_KEYS:
            if isinstance(value, str):
                yield value
            elif isinstance(value, list):
                yield from (v for v in value if isinstance(v, str))


def _under(path: str, prefixes: tuple[str, ...]) -> bool:
    norm = posixpath.normpath(path.replace("\\", "/")).lstrip("/")
    if norm == ".." or norm.startswith("../"):
        return False
    return any(norm == (d := posixpath.normpath(pre).strip("/")) or norm.startswith(d + "/") for pre in prefixes)
