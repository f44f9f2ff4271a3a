"""SKILL.md: the public Agent Skills format with genworker settings under metadata.genworker.

Top level: `name` (must equal the folder name), `description`, optional `version`.
`metadata.genworker` carries scope, priority, default_skill, weighted keywords and the
execution `strategy`. Body sections headed `## instructions.<key>` are named instruction
blocks that workflow steps and graph nodes refer to.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, model_validator

from genworker.workspace.models.base import JsonMap, Model, StrTuple, unique_ids

__all__ = [
    "Graph",
    "GraphEdge",
    "GraphNode",
    "Keyword",
    "SkillLevel",
    "SkillMeta",
    "SkillSpec",
    "Strategy",
    "StrategyMode",
    "WorkflowStep",
    "instruction_blocks",
]

SKILL_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
_BLOCK_HEADING = re.compile(r"^##\s+instructions\.([A-Za-z0-9_-]+)\s*$", re.MULTILINE)
_ANY_H2 = re.compile(r"^##\s", re.MULTILINE)


class SkillLevel(StrEnum):
    SYSTEM = "system"
    TENANT = "tenant"
    WORKER = "worker"


class StrategyMode(StrEnum):
    AUTONOMOUS = "autonomous"
    DETERMINISTIC = "deterministic"
    HYBRID = "hybrid"
    PLANNING = "planning"
    LANGGRAPH = "langgraph"


class Keyword(Model):
    keyword: str = Field(min_length=1)
    weight: float = Field(default=1.0, gt=0)


class StrategyFallback(Model):
    condition: str
    mode: StrategyMode


class WorkflowStep(Model):
    id: str = Field(pattern=r"^[A-Za-z0-9_-]+$")
    kind: Literal["tool", "llm", "condition", "autonomous"]
    tool: str | None = None
    arguments: JsonMap = Field(default_factory=dict)
    instructions: str | None = None  # key of a `## instructions.<key>` block
    condition: str | None = None
    output: str | None = None

    @model_validator(mode="after")
    def _kind_fields(self) -> WorkflowStep:
        if self.kind == "tool" and not self.tool:
            raise ValueError(f"step {self.id!r}: a tool step needs 'tool'")
        if self.kind in ("llm", "autonomous") and not self.instructions:
            raise ValueError(f"step {self.id!r}: an {self.kind} step needs 'instructions'")
        if self.kind == "condition" and not self.condition:
            raise ValueError(f"step {self.id!r}: a condition step needs 'condition'")
        return self


class GraphNode(Model):
    open_extras = True  # node kinds carry their own settings
    name: str
    kind: Literal["tool", "llm", "condition", "interrupt"]


class GraphEdge(Model):
    from_: str = Field(alias="from")
    to: str
    cond: str | None = None


class Graph(Model):
    state_schema: JsonMap = Field(default_factory=dict)
    entry: str
    nodes: tuple[GraphNode, ...]
    edges: tuple[GraphEdge, ...] = ()

    @model_validator(mode="after")
    def _edges_resolve(self) -> Graph:
        names = [n.name for n in self.nodes]
        unique_ids("graph.nodes", names)
        known = {*names, "END"}
        if self.entry not in known:
            raise ValueError(f"graph.entry {self.entry!r} is not a node")
        for edge in self.edges:
            for end in (edge.from_, edge.to):
                if end not in known:
                    raise ValueError(f"graph edge {edge.from_!r} -> {edge.to!r}: unknown node {end!r}")
        return self


class Strategy(Model):
    mode: StrategyMode = StrategyMode.AUTONOMOUS
    fallback: StrategyFallback | None = None
    max_turns: int = Field(default=10, ge=1)
    steps: tuple[WorkflowStep, ...] = ()
    graph: Graph | None = None

    @model_validator(mode="after")
    def _mode_needs(self) -> Strategy:
        if self.mode in (StrategyMode.DETERMINISTIC, StrategyMode.HYBRID) and not self.steps:
            raise ValueError(f"strategy mode {self.mode.value!r} needs 'steps'")
        if self.mode == StrategyMode.LANGGRAPH and self.graph is None:
            raise ValueError("strategy mode 'langgraph' needs 'graph'")
        unique_ids("strategy.steps", [s.id for s in self.steps])
        return self


class SkillMeta(Model):
    scope: SkillLevel | None = None
    priority: int = 0
    default_skill: bool = False
    keywords: tuple[Keyword, ...] = ()
    tools: StrTuple = ()
    strategy: Strategy = Strategy()


class Metadata(Model):
    open_extras = True  # Agent Skills metadata is free-form; only `genworker` is ours
    genworker: SkillMeta = SkillMeta()


def _split_spaces(value: object) -> object:
    """Agent Skills writes `allowed-tools` as one space-separated string; a list works too."""
    return tuple(value.split()) if isinstance(value, str) else value


class SkillSpec(Model):
    name: str = Field(max_length=64)
    description: str = Field(min_length=1, max_length=1024)
    version: str | None = None
    license: str | None = None
    compatibility: str | None = None
    allowed_tools: Annotated[tuple[str, ...], BeforeValidator(_split_spaces)] = Field(default=(), alias="allowed-tools")
    metadata: Metadata = Metadata()

    @model_validator(mode="after")
    def _name_shape(self) -> SkillSpec:
        if not SKILL_NAME.match(self.name):
            raise ValueError(f"name {self.name!r} must be lowercase letters, digits and single hyphens")
        return self

    @property
    def settings(self) -> SkillMeta:
        return self.metadata.genworker


def instruction_blocks(body: str) -> Mapping[str, str]:
    """Named `## instructions.<key>` sections of a SKILL.md body, each up to the next H2."""
    blocks: dict[str, str] = {}
    for match in _BLOCK_HEADING.finditer(body):
        start = match.end()
        following = _ANY_H2.search(body, start)
        blocks[match.group(1)] = body[start : following.start() if following else len(body)].strip()
    return blocks


def named_tools(spec: SkillSpec) -> list[str]:
    """The tools a skill names: its `tools` list, then its workflow steps' and graph nodes' tools."""
    strategy = spec.settings.strategy
    named = [*spec.settings.tools, *(s.tool for s in strategy.steps if s.tool)]
    if strategy.graph is not None:
        extras = (n.model_extra or {} for n in strategy.graph.nodes if n.kind == "tool")
        named += [str(e["tool"]) for e in extras if "tool" in e]
    return list(dict.fromkeys(named))


def missing_blocks(spec: SkillSpec, blocks: Mapping[str, str]) -> list[str]:
    """Instruction keys that steps or graph nodes use but the body does not define."""
    strategy = spec.settings.strategy
    wanted = [s.instructions for s in strategy.steps if s.instructions]
    if strategy.graph is not None:
        extras = (n.model_extra or {} for n in strategy.graph.nodes)
        wanted += [str(e["instructions"]) for e in extras if "instructions" in e]
    return [key for key in dict.fromkeys(wanted) if key not in blocks]
