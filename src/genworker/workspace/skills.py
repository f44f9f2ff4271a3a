"""Loading SKILL.md folders and resolving precedence: worker > tenant > system."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from genworker.workspace import inputs
from genworker.workspace.documents import Document, read_markdown, validate
from genworker.workspace.errors import Issue, WorkspaceError
from genworker.workspace.models.skill import (
    GENERAL_BLOCK,
    Graph,
    SkillLevel,
    SkillSpec,
    StrategyMode,
    instruction_blocks,
    missing_blocks,
)
from genworker.workspace.scan import Collector, Scope
from genworker.workspace.snapshot import Skill, frozen_map

__all__ = ["PYTHON_GRAPH_TRUST", "effective_skills", "load_skill", "load_skills"]

PYTHON_GRAPH_TRUST = 2  # a tenant's trust level from which its skills may name Python graph code
_MAX_DEPTH = 4  # skill folders may sit in group folders (skills/reports/weekly-digest/) this deep
_SETTINGS = ("metadata", "genworker")
_STEP_TYPES = ("autonomous", "deterministic")


def load_skill(
    scope: Scope, folder: Path, level: SkillLevel, trust_level: int | None = None
) -> tuple[Skill, list[Issue]]:
    """One skill folder. `trust_level` is the tenant's (None for system skills: operator files)."""
    rel = scope.rel(folder / "SKILL.md")
    scope.check(folder / "SKILL.md")
    doc = read_markdown(folder / "SKILL.md", rel, limit=scope.limits.skill)
    spec, warnings = validate(SkillSpec, doc)
    blocks = instruction_blocks(doc.body)
    errors = _block_issues(doc, spec, blocks, warnings)
    graph = spec.settings.strategy.graph
    if graph is not None and graph.is_python:
        problem = _python_graph_problem(scope, folder, graph)
        if problem:
            line = _line(doc, "strategy", "graph", "module")
            errors.append(Issue("error", rel, problem, "metadata.genworker.strategy.graph.module", line))
    if errors:
        raise WorkspaceError(errors)
    warnings += _graph_warnings(doc, spec, level, trust_level)
    warnings += _compat_warnings(doc, spec, level)
    if spec.name != folder.name:
        message = f"mapped: the skill is named {spec.name!r}; its folder {folder.name!r} is what paths use"
        warnings.append(Issue("note", rel, message, "name", doc.line_of(["name"])))
    return Skill(spec, level, rel, doc.body, frozen_map(blocks)), warnings


def _block_issues(doc: Document, spec: SkillSpec, blocks: Mapping[str, str], warnings: list[Issue]) -> list[Issue]:
    """A step or node naming a block the body lacks uses the general block (as upstream); without
    a general block that is an error."""
    missing = missing_blocks(spec, blocks)
    if not missing:
        return []
    field, line = "metadata.genworker.strategy", _line(doc, "strategy")
    if GENERAL_BLOCK not in blocks:
        message = (
            f"instruction blocks {missing} are referenced but not defined "
            "(add '## instructions.<key>' sections to the body, or a general block)"
        )
        return [Issue("error", doc.rel, message, field, line)]
    for key in missing:
        message = f"no '## instructions.{key}' block: the general block is used instead"
        warnings.append(Issue("warning", doc.rel, message, field, line))
    return []


def _python_graph_problem(scope: Scope, folder: Path, graph: Graph) -> str:
    """A Python graph runs code in the server: only a file in the skill's own folder, written
    `workspace.<path from the workspace root>` (whether the tenant may run it: `_graph_warnings`)."""
    module = graph.module or ""
    parts = module.split(".")
    own = f"workspace.{'.'.join(Path(scope.rel(folder)).parts)}.<file>"
    if parts[0] != "workspace" or len(parts) < 2:
        return f"graph.module {module!r} is refused: only a Python file in the skill's own folder ({own}) can be used"
    path = scope.root.joinpath(*parts[1:]).with_suffix(".py")
    if not path.is_relative_to(folder) or not scope.inside(path) or not inputs.is_file(path):
        return f"graph.module {module!r} is refused: it must name a .py file in the skill's own folder ({own})"
    return ""


def _graph_warnings(doc: Document, spec: SkillSpec, level: SkillLevel, trust_level: int | None) -> list[Issue]:
    """A langgraph skill whose graph cannot run here loads, and says what a run does instead."""
    strategy = spec.settings.strategy
    graph = strategy.graph
    if strategy.mode != StrategyMode.LANGGRAPH or graph is None:
        return []
    then = (
        f"a run uses its fallback ({strategy.fallback.mode.value})"
        if strategy.fallback is not None
        else "a run fails with engine_unavailable (add a fallback)"
    )
    if not graph.is_python:
        why = "declared graphs (entry/nodes/edges) do not run here yet"
    elif level != SkillLevel.SYSTEM and (trust_level or 0) < PYTHON_GRAPH_TRUST:
        why = (
            f"graph.module {graph.module!r} runs code in the server and the tenant's trust_level is "
            f"{trust_level or 0} (it needs {PYTHON_GRAPH_TRUST} or more)"
        )
    else:
        return []
    field = "metadata.genworker.strategy.graph"
    return [Issue("warning", doc.rel, f"{why}: {then}", field, _line(doc, "strategy", "graph"))]


def _raw(doc: Document, *path: str | int) -> tuple[Any, list[str | int]]:
    """A genworker setting as the file wrote it: under metadata.genworker, or at the top level
    in upstream's legacy format."""
    for base in (list(_SETTINGS), []):
        node: Any = doc.data
        for part in (*base, *path):
            if isinstance(node, Mapping) and part in node:
                node = node[part]
                continue
            if not (isinstance(node, list) and isinstance(part, int) and part < len(node)):
                break
            node = node[part]
        else:
            return node, [*base, *path]
        if not doc.data.get("skill_id"):
            break
    return None, []


def _line(doc: Document, *path: str | int) -> int | None:
    _, loc = _raw(doc, *path)
    return doc.line_of(loc) if loc else None


def _compat_warnings(doc: Document, spec: SkillSpec, level: SkillLevel) -> list[Issue]:
    """Values upstream accepts and this runtime reads in a defined way, with a word on how."""
    issues: list[Issue] = []
    if not spec.description:
        message = "no description: the skill matcher and the model have less to go on"
        issues.append(Issue("warning", doc.rel, message, "description", doc.line_of(["description"])))
    found: list[tuple[str, Sequence[str | int]]] = []
    settings, strategy = spec.settings, spec.settings.strategy
    if isinstance(settings.scope, str) and not isinstance(settings.scope, SkillLevel):
        text = f"unknown scope {settings.scope!r} (system, tenant or worker): it lives at {level.value!r} level"
        found.append((text, ("scope",)))
    elif settings.scope is not None and settings.scope != level:
        found.append((f"declares scope {settings.scope.value!r} but lives at {level.value!r} level", ("scope",)))
    for where in (("strategy", "mode"), ("strategy", "fallback", "mode")):
        raw, _ = _raw(doc, *where)
        if raw is not None and str(raw).strip().lower() not in StrategyMode.__members__.values():
            found.append((f"unknown mode {raw!r}: read as 'autonomous'", where))
    workflow, _ = _raw(doc, "strategy", "workflow")
    for i, step in enumerate(workflow if isinstance(workflow, list) else []):
        kind = step.get("type") if isinstance(step, Mapping) else None
        if kind is not None and str(kind).strip().lower() not in _STEP_TYPES:
            found.append((f"unknown step type {kind!r}: runs as 'autonomous'", ("strategy", "workflow", i, "type")))
    for i, keyword in enumerate(settings.keywords):
        if keyword.weight <= 0:
            text = f"keyword {keyword.keyword!r} has weight {keyword.weight:g}: it never scores"
            found.append((text, ("keywords", i)))
    if strategy.mode in (StrategyMode.DETERMINISTIC, StrategyMode.HYBRID) and not strategy.steps:
        then = "runs its fallback" if strategy.fallback is not None else "a run fails (add steps or a fallback)"
        found.append((f"strategy mode {strategy.mode.value!r} has no steps: {then}", ("strategy",)))
    if strategy.graph is not None and any(n.kind == "python" for n in strategy.graph.nodes):
        found.append(("graph nodes of kind 'python' cannot run (as upstream)", ("strategy", "graph", "nodes")))
    issues += [Issue("warning", doc.rel, text, _dotted_setting(doc, loc), _line(doc, *loc)) for text, loc in found]
    return issues


def _dotted_setting(doc: Document, loc: Sequence[str | int]) -> str:
    _, full = _raw(doc, *loc)
    parts = full or [*_SETTINGS, *loc]
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _skill_folders(scope: Scope, folder: Path, issues: Collector, depth: int = 0) -> Iterator[Path]:
    """Folders holding a SKILL.md, also inside group folders (as upstream's recursive scan); a
    skill folder's own sub-folders (scripts/, assets/) are its resources, never skills."""
    for child in scope.entries(folder, issues, dirs=True):
        if inputs.is_file(child / "SKILL.md"):
            yield child
            continue
        nested = list(_skill_folders(scope, child, issues, depth + 1)) if depth < _MAX_DEPTH else []
        if nested:
            yield from nested
        else:
            issues.warn(scope.rel(child), "skill folder without SKILL.md (ignored)")


def load_skills(
    scope: Scope, folder: Path, level: SkillLevel, issues: Collector, trust_level: int | None = None
) -> dict[str, Skill]:
    skills: dict[str, Skill] = {}
    for child in _skill_folders(scope, folder, issues):
        skill = issues.attempt(lambda child=child: load_skill(scope, child, level, trust_level))  # type: ignore[misc]
        if skill is None:
            continue
        if skill.name in skills:
            other = skills[skill.name].file
            issues.error(skill.file, f"skill name {skill.name!r} is also the name of {other}", "name")
            continue
        skills[skill.name] = skill
    return skills


def effective_skills(*layers: Mapping[str, Skill]) -> Mapping[str, Skill]:
    """Merge skill layers given lowest precedence first; a later layer wins per name."""
    merged: dict[str, Skill] = {}
    for layer in layers:
        merged.update(layer)
    return frozen_map(merged)
