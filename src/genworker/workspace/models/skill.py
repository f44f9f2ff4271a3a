"""SKILL.md: the public Agent Skills format with genworker settings under metadata.genworker.

Top level: `name` (any short text; the folder, not the name, is what paths use),
`description`, optional `version`. `metadata.genworker` carries scope, priority, default_skill,
weighted keywords, recommended tools and the execution `strategy`. Body sections headed
`## instructions.<key>` are named instruction blocks that workflow steps and graph nodes refer to.

Upstream genworker's spellings load too: the legacy format (top-level `skill_id` and settings),
`strategy.workflow` steps `{step, type, instruction_ref, tools, max_rounds, retry}`, graph edges
`from_node`/`to_node` and Python graphs `{module, factory, state_schema_ref}`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    AliasChoices,
    BeforeValidator,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from genworker.workspace.models.base import JsonMap, Model, StrTuple, lower, note, unique_ids

__all__ = [
    "Graph",
    "GraphEdge",
    "GraphNode",
    "Keyword",
    "RetryPolicy",
    "SkillLevel",
    "SkillMeta",
    "SkillSpec",
    "Strategy",
    "StrategyFallback",
    "StrategyMode",
    "WorkflowStep",
    "instruction_blocks",
    "missing_blocks",
    "named_tools",
]

SKILL_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")  # names this runtime writes (its folder is the name)
_UNSAFE_NAME = re.compile(r"[/\\\x00-\x1f\x7f]")
_BLOCK_HEADING = re.compile(r"^##\s+instructions\.(\S+)\s*$", re.MULTILINE)
_PYTHON_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")
GENERAL_BLOCK = "general"
UPSTREAM_FALLBACK_CONDITIONS = frozenset({"no_workflow", "empty_steps"})  # fall back when there are no steps
# upstream's legacy format keeps these at the top level next to `skill_id`
_LEGACY_KEYS = ("scope", "priority", "strategy", "keywords", "recommended_tools", "gate_level", "default_skill")
_UPSTREAM_STEP_KEYS = ("step", "type", "instruction_ref", "tools", "max_rounds", "retry")


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


def _lower(value: Any) -> Any:
    return value.strip().lower() if isinstance(value, str) else value


def _mode_or_autonomous(value: Any, info: ValidationInfo) -> Any:
    """Upstream lower-cases the mode and reads an unknown one as autonomous (the loader warns)."""
    value = lower(value, info)
    if isinstance(value, str) and value not in StrategyMode.__members__.values():
        return StrategyMode.AUTONOMOUS
    return value


def _known_level(value: Any, info: ValidationInfo) -> Any:
    value = lower(value, info)
    return SkillLevel(value) if value in SkillLevel.__members__.values() else value


LenientMode = Annotated[StrategyMode, BeforeValidator(_mode_or_autonomous)]


class Keyword(Model):
    keyword: str = Field(min_length=1)
    weight: float = 1.0  # a weight <= 0 loads (as upstream) but never scores; the loader warns


def _keyword_strings(value: Any) -> Any:
    """Upstream also writes a keyword as a plain string (weight 1.0)."""
    if isinstance(value, list | tuple):
        return [{"keyword": item} if isinstance(item, str) else item for item in value]
    return value


class StrategyFallback(Model):
    condition: str = ""  # `no_workflow` / `empty_steps`: only when there are no steps; else any failure
    mode: LenientMode = StrategyMode.AUTONOMOUS


def _backoff(value: Any) -> Any:
    """Upstream keeps any text here and never reads it; `exponential` is the one other meaning."""
    return "exponential" if _lower(value) == "exponential" else "fixed"


class RetryPolicy(Model):
    max_attempts: int = Field(default=1, ge=1)
    backoff: Annotated[Literal["fixed", "exponential"], BeforeValidator(_backoff)] = "fixed"


class WorkflowStep(Model):
    id: str = Field(min_length=1, max_length=64)
    kind: Literal["tool", "llm", "condition", "autonomous"]
    tool: str | None = None
    arguments: JsonMap = Field(default_factory=dict)
    instructions: str | None = None  # key of a `## instructions.<key>` block
    condition: str | None = None
    output: str | None = None
    tools: StrTuple = ()  # llm/autonomous steps: the tools offered (names or patterns; `*` = all)
    max_rounds: int | None = Field(default=None, ge=1)  # autonomous steps; default strategy.max_turns
    retry: RetryPolicy = RetryPolicy()

    @model_validator(mode="after")
    def _kind_fields(self) -> WorkflowStep:
        if _UNSAFE_NAME.search(self.id):
            raise ValueError(f"step {self.id!r}: the id must not contain '/', '\\' or control characters")
        if self.kind == "tool" and not self.tool:
            raise ValueError(f"step {self.id!r}: a tool step needs 'tool'")
        if self.kind in ("llm", "autonomous") and not self.instructions:
            raise ValueError(f"step {self.id!r}: an {self.kind} step needs 'instructions'")
        if self.kind == "condition" and not self.condition:
            raise ValueError(f"step {self.id!r}: a condition step needs 'condition'")
        return self


def _upstream_step(raw: Mapping[str, Any], index: int, *, deterministic: bool) -> dict[str, Any]:
    """One upstream `workflow` step as ours: `deterministic` steps (every step in mode
    deterministic) are one model call offered the step's tools (all tools when it lists none),
    `autonomous` steps (also any other type) a ReAct loop."""
    kind = "llm" if deterministic or _lower(raw.get("type")) == "deterministic" else "autonomous"
    step: dict[str, Any] = {k: v for k, v in raw.items() if k not in _UPSTREAM_STEP_KEYS}
    name = raw.get("step")
    step.update(
        id=str(name).strip() if name not in (None, "") else f"step-{index + 1}",
        kind=kind,
        instructions=str(raw.get("instruction_ref") or "") or GENERAL_BLOCK,
    )
    tools = raw.get("tools") or ()
    step["tools"] = tools if tools or kind == "autonomous" else ("*",)
    for key in ("max_rounds", "retry"):
        if raw.get(key) is not None:
            step[key] = raw[key]
    return step


class GraphNode(Model):
    open_extras = True  # node kinds carry their own settings (tool, instructions, route, ...)
    name: str
    kind: Annotated[Literal["tool", "llm", "condition", "interrupt", "python"], BeforeValidator(_lower)]


class GraphEdge(Model):
    from_: str = Field(validation_alias=AliasChoices("from", "from_node"), serialization_alias="from")
    to: str = Field(validation_alias=AliasChoices("to", "to_node"))
    cond: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _one_spelling(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            for a, b in (("from", "from_node"), ("to", "to_node")):
                if a in data and b in data:
                    raise ValueError(f"graph edge: write either '{a}' or '{b}', not both")
        return data


class Graph(Model):
    """A declared graph (`entry`, `nodes`, `edges`) or a Python one (`module`, `factory`)."""

    state_schema: JsonMap = Field(default_factory=dict)
    entry: str | None = None
    nodes: tuple[GraphNode, ...] = ()
    edges: tuple[GraphEdge, ...] = ()
    module: str | None = None  # `workspace.<path>.<file>`: a .py file in the skill's own folder
    factory: str | None = None
    state_schema_ref: str | None = None
    max_steps: int = Field(default=50, ge=1)

    @property
    def is_python(self) -> bool:
        return self.module is not None or self.factory is not None

    @model_validator(mode="after")
    def _one_source(self) -> Graph:
        declared = self.entry is not None or bool(self.nodes) or bool(self.edges)
        if self.is_python:
            if declared:
                raise ValueError("graph: use either entry/nodes/edges or module/factory, not both")
            if not self.module or not self.factory:
                raise ValueError("graph: a Python graph needs both 'module' and 'factory'")
            if not _PYTHON_MODULE.match(self.module):
                raise ValueError(f"graph.module {self.module!r} is not a dotted module path")
            return self
        if not self.entry or not self.nodes:
            raise ValueError("graph needs 'entry' and 'nodes' (or a Python 'module' and 'factory')")
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
    mode: LenientMode = StrategyMode.AUTONOMOUS
    fallback: StrategyFallback | None = None
    max_turns: int = Field(default=10, ge=1)
    steps: tuple[WorkflowStep, ...] = ()
    graph: Graph | None = None

    compat_keys: ClassVar[frozenset[str]] = frozenset({"workflow"})

    @model_validator(mode="before")
    @classmethod
    def _upstream_workflow(cls, data: Any) -> Any:
        if not isinstance(data, Mapping) or "workflow" not in data:
            return data
        note("workflow", "mapped", "upstream's workflow steps -> steps (type deterministic -> kind llm)")
        if "steps" in data:
            raise ValueError("write the steps either as 'workflow' (upstream) or as 'steps', not both")
        raw = data["workflow"] or []
        if not isinstance(raw, list):
            return {**data, "steps": raw}  # let validation report it
        deterministic = _lower(data.get("mode")) == StrategyMode.DETERMINISTIC
        steps = [
            _upstream_step(item, i, deterministic=deterministic) if isinstance(item, Mapping) else item
            for i, item in enumerate(raw)
        ]
        return {**{k: v for k, v in data.items() if k != "workflow"}, "steps": steps}

    @model_validator(mode="after")
    def _mode_needs(self) -> Strategy:
        if self.mode == StrategyMode.LANGGRAPH and self.graph is None:
            raise ValueError("strategy mode 'langgraph' needs 'graph'")
        unique_ids("strategy.steps", [s.id for s in self.steps])
        return self

    @property
    def only_without_steps(self) -> bool:
        """Upstream's fallback conditions `no_workflow` / `empty_steps`: the fallback runs when the
        workflow has no steps, not when a step fails."""
        return self.fallback is not None and self.fallback.condition.strip() in UPSTREAM_FALLBACK_CONDITIONS


class SkillMeta(Model):
    scope: Annotated[SkillLevel | str | None, BeforeValidator(_known_level)] = None  # unknown: the loader warns
    priority: int = 0
    default_skill: bool = False
    keywords: Annotated[tuple[Keyword, ...], BeforeValidator(_keyword_strings)] = ()
    tools: StrTuple = ()
    recommended_tools: StrTuple = ()  # named in the autonomous prompt; not a grant
    gate_level: str | None = None  # upstream's skill gate level: recorded, not used
    strategy: Strategy = Strategy()

    @field_validator("gate_level")
    @classmethod
    def _recorded(cls, value: str | None) -> str | None:
        if value is not None:
            note("gate_level", "ignored", "recorded, not used: the duty and the Policy Gate decide on gates")
        return value


class Metadata(Model):
    open_extras = True  # Agent Skills metadata is free-form; only `genworker` is ours
    genworker: SkillMeta = SkillMeta()


def _split_spaces(value: object) -> object:
    """Agent Skills writes `allowed-tools` as one space-separated string; a list works too."""
    return tuple(value.split()) if isinstance(value, str) else value


def _safe_name(value: str) -> str:
    if _UNSAFE_NAME.search(value) or not value.strip():
        raise ValueError(f"name {value!r} must be text without '/', '\\' or control characters")
    return value


class SkillSpec(Model):
    compat_keys: ClassVar[frozenset[str]] = frozenset({"skill_id", *_LEGACY_KEYS})

    name: Annotated[str, AfterValidator(_safe_name)] = Field(min_length=1, max_length=64)
    description: str = Field(default="", max_length=1024)
    version: str | None = None
    license: str | None = None
    compatibility: str | None = None
    allowed_tools: Annotated[tuple[str, ...], BeforeValidator(_split_spaces)] = Field(default=(), alias="allowed-tools")
    metadata: Metadata = Metadata()

    @model_validator(mode="before")
    @classmethod
    def _legacy_format(cls, data: Any) -> Any:
        """Upstream's legacy format: `skill_id` names the skill and its settings sit at the top
        level (a `metadata.genworker` value wins over the top-level one)."""
        if not isinstance(data, Mapping) or data.get("skill_id") in (None, ""):
            return data
        note(
            "skill_id", "mapped", "upstream's legacy format: skill_id -> name, top-level settings -> metadata.genworker"
        )
        out = dict(data)
        out["name"] = out.pop("skill_id")
        metadata = dict(out["metadata"]) if isinstance(out.get("metadata"), Mapping) else {}
        genworker = dict(metadata["genworker"]) if isinstance(metadata.get("genworker"), Mapping) else {}
        for key in _LEGACY_KEYS:
            if key in out:
                genworker.setdefault(key, out.pop(key))
        out["metadata"] = {**metadata, "genworker": genworker}
        return out

    @property
    def settings(self) -> SkillMeta:
        return self.metadata.genworker


def instruction_blocks(body: str) -> Mapping[str, str]:
    """Named blocks of a SKILL.md body, as upstream reads them: a `## instructions.<key>` heading
    (the key may contain dots) starts a block that runs to the next such heading, other headings
    included; text before the first heading (or the whole body, without one) is `general`.
    Empty blocks are left out."""
    headings = list(_BLOCK_HEADING.finditer(body))
    blocks: dict[str, str] = {}
    ends = [h.start() for h in headings[1:]] + [len(body)] if headings else []
    before = body[: headings[0].start()] if headings else body
    if before.strip():
        blocks[GENERAL_BLOCK] = before.strip()
    for heading, end in zip(headings, ends, strict=True):
        text = body[heading.end() : end].strip()
        if text:
            blocks[heading.group(1)] = text
    return blocks


def _node_settings(graph: Graph, *keys: str) -> list[str]:
    extras = (n.model_extra or {} for n in graph.nodes)
    return [str(e[k]) for e in extras for k in keys if e.get(k)]


def _node_tools(graph: Graph) -> list[str]:
    found: list[str] = []
    for node in graph.nodes:
        extra = node.model_extra or {}
        if node.kind == "tool" and extra.get("tool"):
            found.append(str(extra["tool"]))
        listed = extra.get("tools")
        if isinstance(listed, list | tuple):
            found += [str(t) for t in listed]
    return found


def named_tools(spec: SkillSpec) -> list[str]:
    """The tools a skill names: `tools`, `recommended_tools`, its workflow steps' and graph
    nodes' tools (patterns such as `*` are not names)."""
    settings = spec.settings
    strategy = settings.strategy
    named = [*settings.tools, *settings.recommended_tools]
    for step in strategy.steps:
        named += [step.tool] if step.tool else []
        named += step.tools
    if strategy.graph is not None:
        named += _node_tools(strategy.graph)
    return [name for name in dict.fromkeys(named) if not any(c in name for c in "*?[")]


def missing_blocks(spec: SkillSpec, blocks: Mapping[str, str]) -> list[str]:
    """Instruction keys that steps or graph nodes use but the body does not define."""
    strategy = spec.settings.strategy
    wanted = [s.instructions for s in strategy.steps if s.instructions]
    if strategy.graph is not None:
        wanted += _node_settings(strategy.graph, "instructions", "instruction_ref", "prompt_ref")
    return [key for key in dict.fromkeys(wanted) if key not in blocks]
