"""Loading SKILL.md folders and resolving precedence: worker > tenant > system."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from genworker.workspace.documents import read_markdown, validate
from genworker.workspace.errors import Issue, WorkspaceError
from genworker.workspace.models.skill import SkillLevel, SkillSpec, instruction_blocks, missing_blocks
from genworker.workspace.scan import Collector, Scope
from genworker.workspace.snapshot import Skill, frozen_map

__all__ = ["effective_skills", "load_skill", "load_skills"]


def load_skill(scope: Scope, folder: Path, level: SkillLevel) -> tuple[Skill, list[Issue]]:
    rel = scope.rel(folder / "SKILL.md")
    scope.check(folder / "SKILL.md")
    doc = read_markdown(folder / "SKILL.md", rel, limit=scope.limits.skill)
    spec, warnings = validate(SkillSpec, doc)
    if spec.name != folder.name:
        raise WorkspaceError.single(
            rel, f"name {spec.name!r} must equal the skill folder name {folder.name!r}", "name", doc.line_of(["name"])
        )
    blocks = instruction_blocks(doc.body)
    missing = missing_blocks(spec, blocks)
    if missing:
        raise WorkspaceError.single(
            rel,
            f"instruction blocks {missing} are referenced but not defined "
            "(add '## instructions.<key>' sections to the body)",
            "metadata.genworker.strategy",
        )
    declared = spec.settings.scope
    if declared is not None and declared != level:
        message = f"declares scope {declared.value!r} but lives at {level.value!r} level"
        warnings.append(Issue("warning", rel, message, "metadata.genworker.scope"))
    return Skill(spec, level, rel, doc.body, frozen_map(blocks)), warnings


def load_skills(scope: Scope, folder: Path, level: SkillLevel, issues: Collector) -> dict[str, Skill]:
    skills: dict[str, Skill] = {}
    for child in scope.entries(folder, issues, dirs=True):
        if not (child / "SKILL.md").is_file():
            issues.warn(scope.rel(child), "skill folder without SKILL.md (ignored)")
            continue
        skill = issues.attempt(lambda child=child: load_skill(scope, child, level))  # type: ignore[misc]
        if skill is not None:
            skills[skill.name] = skill
    return skills


def effective_skills(*layers: Mapping[str, Skill]) -> Mapping[str, Skill]:
    """Merge skill layers given lowest precedence first; a later layer wins per name."""
    merged: dict[str, Skill] = {}
    for layer in layers:
        merged.update(layer)
    return frozen_map(merged)
