"""A plan as the model writes it: a JSON object checked against PLAN_SCHEMA, then as a graph (unique
ids, known dependencies, no cycle, known tools, at most `max_nodes` nodes). A plan that fails any
check is refused with the reason, which goes back to the model."""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from genworker.engine.state import PlanNode

__all__ = ["PLAN_SCHEMA", "PlanRejected", "parse_plan", "plan_prompt"]

_NODE_ID = r"^[A-Za-z0-9_-]{1,40}$"


class PlanRejected(ValueError):
    """The model's plan cannot run; the message says why (it is shown to the model)."""


class _Node(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=_NODE_ID)
    instruction: str = Field(min_length=1, max_length=4000)
    depends_on: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    expected_output: str = Field(default="", max_length=1000)


class _Plan(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    nodes: tuple[_Node, ...] = Field(min_length=1)


PLAN_SCHEMA: Mapping[str, Any] = _Plan.model_json_schema()


def plan_prompt(tools: Sequence[str], max_nodes: int, *, kept: Sequence[PlanNode] = ()) -> str:
    """The planner's instructions: the schema, the limits, the tools it may hand out."""
    listed = ", ".join(tools) if tools else "(none: nodes can only think and write)"
    lines = [
        "## Planning",
        "Break the task into a plan of sub-steps (a DAG). Answer with one JSON object only, no prose:",
        '{"nodes": [{"id": "...", "instruction": "...", "depends_on": ["..."], "tools": ["..."], '
        '"expected_output": "..."}]}',
        f"- at most {max_nodes} nodes; ids are letters, digits, '-' or '_'",
        "- depends_on names nodes whose results this node needs; nodes without a path between them run at the"
        " same time",
        "- tools: the tools the node may use, from this list only: " + listed,
        "- each node is carried out by an assistant that sees its instruction and the results of the nodes it"
        " depends on",
    ]
    if kept:
        done = ", ".join(n.id for n in kept)
        lines.append(f"- these nodes are finished and keep their results; depend on them, do not repeat them: {done}")
    return "\n".join(lines)


def _json_object(text: str) -> Any:
    body = text.strip()
    fenced = re.search(r"```(?:json)?\s*(.*?)```", body, re.DOTALL)
    if fenced:
        body = fenced.group(1).strip()
    start, end = body.find("{"), body.rfind("}")
    if start < 0 or end < start:
        raise PlanRejected("the answer holds no JSON object")
    try:
        return json.loads(body[start : end + 1])
    except json.JSONDecodeError as exc:
        raise PlanRejected(f"the plan is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None


def parse_plan(
    text: str,
    tools: Collection[str],
    max_nodes: int,
    *,
    kept: Sequence[PlanNode] = (),
    taken: Collection[str] = (),
    revision: int = 1,
) -> tuple[PlanNode, ...]:
    """The model's answer as plan nodes (pending, of `revision`); `kept` are finished nodes the new
    ones may depend on, `taken` ids earlier revisions used. PlanRejected says what is wrong."""
    try:
        plan = _Plan.model_validate(_json_object(text))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "plan"
        raise PlanRejected(f"{where}: {first['msg']} ({exc.error_count()} problems)") from None
    if len(plan.nodes) > max_nodes:
        raise PlanRejected(f"{len(plan.nodes)} nodes: at most {max_nodes} are allowed")
    kept_ids = {n.id for n in kept}
    ids = [n.id for n in plan.nodes]
    twice = sorted({i for i in ids if ids.count(i) > 1} | (set(ids) & (kept_ids | set(taken))))
    if twice:
        raise PlanRejected(f"node ids must be unique (and new): {twice}")
    known = set(ids) | kept_ids
    for node in plan.nodes:
        unknown = sorted(set(node.depends_on) - known)
        if unknown:
            raise PlanRejected(f"node {node.id!r} depends on unknown nodes {unknown}")
        refused = sorted(set(node.tools) - set(tools))
        if refused:
            raise PlanRejected(f"node {node.id!r} names tools this run cannot use: {refused}")
    cycle = _cycle({n.id: n.depends_on for n in plan.nodes})
    if cycle:
        raise PlanRejected(f"the plan has a cycle: {' -> '.join(cycle)}")
    return tuple(
        PlanNode(
            n.id,
            n.instruction,
            tuple(dict.fromkeys(n.depends_on)),
            tuple(dict.fromkeys(n.tools)),
            n.expected_output,
            revision=revision,
        )
        for n in plan.nodes
    )


def _cycle(edges: Mapping[str, Sequence[str]]) -> list[str]:
    """One dependency cycle (as a path that returns to its start), or []."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for dep in edges.get(node, ()):
            if state.get(dep) == 1:
                return [*path[path.index(dep) :], dep]
            if dep in edges and dep not in state:
                found = visit(dep)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return []

    for start in edges:
        if start not in state:
            found = visit(start)
            if found:
                return found
    return []
