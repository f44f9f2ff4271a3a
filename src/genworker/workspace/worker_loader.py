"""Loading one worker folder: PERSONA.md, duties, goals, skills, rules, contacts, credentials.

A worker loads whole or not at all: every problem in any of its files is collected and
reported together, and a worker with errors is `failed` (its last good version, if any,
keeps serving — that is the registry's job).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, get_args

from genworker.ids import is_inside
from genworker.workspace.documents import Document, read_json, read_markdown, read_text, validate
from genworker.workspace.errors import Issue, WorkspaceError
from genworker.workspace.limits import SizeLimit
from genworker.workspace.models import ChannelCredentials, Contact, DutySpec, Goal, PersonaSpec, Rule, Tenant
from genworker.workspace.models.duty import DEFAULTABLE_FIELDS, apply_defaults, apply_defaults_deep
from genworker.workspace.models.skill import SkillLevel
from genworker.workspace.scan import Collector, Scope
from genworker.workspace.skills import effective_skills, load_skills
from genworker.workspace.snapshot import Skill, Worker, frozen_map

__all__ = ["DEFAULTS_FILE", "load_worker"]

_PLATFORMS = {
    name: get_args(field.annotation)[0]  # `X | None` -> X
    for name, field in ChannelCredentials.model_fields.items()
}

DEFAULTS_FILE = "_defaults.md"


def load_worker(
    scope: Scope, tenant: Tenant, folder: Path, inherited: Mapping[str, Skill]
) -> tuple[Worker, list[Issue]]:
    """Load the worker in `folder`; raise WorkspaceError listing every error found."""
    issues = Collector()
    persona_path = folder / "PERSONA.md"
    if not persona_path.is_file():
        raise WorkspaceError.single(scope.rel(persona_path), "missing PERSONA.md")
    scope.check(persona_path)
    persona_doc = read_markdown(persona_path, scope.rel(persona_path), limit=scope.limits.persona)
    persona = issues.attempt(lambda: validate(PersonaSpec, persona_doc))
    if persona is None:
        raise WorkspaceError(issues.issues)
    if persona.identity.worker_id != folder.name:
        issues.error(
            persona_doc.rel,
            f"worker_id {persona.identity.worker_id!r} must equal the folder name {folder.name!r}",
            "identity.worker_id",
            persona_doc.line_of(["identity", "worker_id"]),
        )
    files: dict[str, str] = {"persona": persona_doc.rel}
    duties = _load_duties(scope, folder / "duties", issues, files)
    goals = _load_by_id(
        scope,
        folder / "goals",
        issues,
        files,
        "goal",
        lambda doc: validate(Goal, doc, {**doc.data, "body": doc.body}),
        limit=scope.limits.goal,
    )
    own_skills = load_skills(scope, folder / persona.skills_dir, SkillLevel.WORKER, issues)
    skills = effective_skills(inherited, own_skills)
    rules = _load_rules(scope, folder / "rules", issues, files)
    contacts = _load_contacts(scope, folder, persona, issues, files)
    credentials = _load_credentials(scope, folder / "CHANNEL_CREDENTIALS.json", issues)
    _check_references(persona_doc, persona, duties, goals, skills, issues, files)
    if issues.errors:
        raise WorkspaceError(issues.issues)
    worker = Worker(
        tenant_id=tenant.tenant_id,
        worker_id=folder.name,
        persona=persona,
        instructions=persona_doc.body,
        duties=frozen_map(duties),
        goals=frozen_map(goals),
        skills=skills,
        rules=tuple(rules),
        contacts=frozen_map(contacts),
        credentials=credentials,
        files=frozen_map(files),
        warnings=tuple(issues.warnings),
    )
    return worker, issues.warnings


def _load_duties(scope: Scope, folder: Path, issues: Collector, files: dict[str, str]) -> dict[str, DutySpec]:
    shared: dict[str, Any] = {}
    defaults_path = folder / DEFAULTS_FILE
    if defaults_path.is_file():

        def read_defaults() -> tuple[Document, list[Issue]]:
            scope.check(defaults_path)
            return read_markdown(defaults_path, scope.rel(defaults_path), limit=scope.limits.duty), []

        doc = issues.attempt(read_defaults)
        if doc is not None:
            shared = dict(doc.data)
            for key in shared.keys() - DEFAULTABLE_FIELDS:
                issues.warn(doc.rel, "not a field duties can default (ignored)", key, doc.line_of([key]))

    def load(doc: Document) -> tuple[DutySpec, list[Issue]]:
        own = dict(doc.data)
        local = own.get("duty_defaults") or {}
        if not isinstance(local, dict):
            raise WorkspaceError.single(doc.rel, "must be a mapping", "duty_defaults", doc.line_of(["duty_defaults"]))
        ignored = [
            Issue(
                "warning",
                doc.rel,
                "not a field duties can default (ignored)",
                f"duty_defaults.{key}",
                doc.line_of(["duty_defaults", key]),
            )
            for key in sorted(local.keys() - DEFAULTABLE_FIELDS)
        ]
        defaults = apply_defaults_deep(local, shared)
        data = apply_defaults(own, defaults)
        data["duty_defaults"] = defaults
        if doc.body:
            data["action"] = doc.body
        duty, warnings = validate(DutySpec, doc, data)
        return duty, ignored + warnings

    return _load_by_id(scope, folder, issues, files, "duty", load, skip={DEFAULTS_FILE}, limit=scope.limits.duty)


def _load_by_id(
    scope: Scope,
    folder: Path,
    issues: Collector,
    files: dict[str, str],
    kind: str,
    load: Any,
    skip: frozenset[str] | set[str] = frozenset(),
    *,
    limit: SizeLimit,
) -> dict[str, Any]:
    """Load every `*.md` of `folder` with `load(doc)`; ids must be unique across files."""
    loaded: dict[str, Any] = {}
    for path in scope.entries(folder, issues, suffix=".md"):
        if path.name in skip:
            continue
        rel = scope.rel(path)

        def one(path: Path = path, rel: str = rel) -> Any:
            return load(read_markdown(path, rel, limit=limit))

        obj = issues.attempt(one)
        if obj is None:
            continue
        obj_id = getattr(obj, f"{kind}_id")
        key = f"{kind}:{obj_id}"
        if key in files:
            issues.error(rel, f"duplicate {kind}_id {obj_id!r}, already defined in {files[key]}", f"{kind}_id")
            continue
        files[key] = rel
        loaded[obj_id] = obj
    return loaded


def _load_rules(scope: Scope, folder: Path, issues: Collector, files: dict[str, str]) -> list[Rule]:
    rules: list[Rule] = []
    for kind, sub in (("directive", "directives"), ("learned", "learned")):

        def load(doc: Document, kind: str = kind) -> tuple[Rule, list[Issue]]:
            stem = Path(doc.rel).stem
            return validate(Rule, doc, {"rule_id": stem, **doc.data, "kind": kind, "text": doc.body})

        for path in scope.entries(folder / sub, issues, suffix=".md"):
            rel = scope.rel(path)

            def one(path: Path = path, rel: str = rel, load: Any = load) -> tuple[Rule, list[Issue]]:
                doc = read_markdown(path, rel, limit=scope.limits.rule, require_front_matter=False)
                return load(doc)  # type: ignore[no-any-return]

            rule = issues.attempt(one)
            if rule is None:
                continue
            key = f"rule:{rule.rule_id}"
            if key in files:
                issues.error(rel, f"duplicate rule_id {rule.rule_id!r}, already defined in {files[key]}", "rule_id")
                continue
            files[key] = rel
            rules.append(rule)
    return sorted(rules, key=lambda r: (-r.priority, r.rule_id))


def _load_contacts(
    scope: Scope, folder: Path, persona: PersonaSpec, issues: Collector, files: dict[str, str]
) -> dict[str, Contact]:
    contacts = {c.person_id: c for c in persona.contacts}
    for person_id in contacts:
        files[f"person:{person_id}"] = scope.rel(folder / "PERSONA.md")
    settings = persona.contact_settings
    root = folder / settings.workspace_root
    for sub in (settings.configured_dir, settings.discovered_dir):
        contacts.update(
            _load_by_id(
                scope,
                root / sub,
                issues,
                files,
                "person",
                lambda doc: validate(Contact, doc, {"notes": doc.body, **doc.data}),
                limit=scope.limits.contact,
            )
        )
    index = root / settings.index_file
    if index.is_file():
        if is_inside(scope.root, index):
            _check_index(scope.rel(index), index, scope.limits.contact_index, issues)
        else:
            issues.error(scope.rel(index), "refused: symlink leaves the workspace")
    return contacts


def _check_index(rel: str, path: Path, limit: SizeLimit, issues: Collector) -> None:
    try:
        text = read_text(path, rel, limit)
    except WorkspaceError as exc:
        issues.issues.extend(exc.issues)
        return
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            issues.error(rel, f"invalid JSON line: {exc.msg}", line=number)
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("person_id"), str):
            issues.error(rel, "each line must be an object with a string person_id", "person_id", number)


CREDENTIALS_SCHEMA_VERSION = 1


def _load_credentials(scope: Scope, path: Path, issues: Collector) -> ChannelCredentials | None:
    if not path.is_file():
        return None
    rel = scope.rel(path)

    def read() -> tuple[Document, list[Issue]]:
        scope.check(path)
        return read_json(path, rel, limit=scope.limits.credentials), []

    doc = issues.attempt(read)
    if doc is None:
        return None
    for platform, value in doc.data.items():
        model = _PLATFORMS.get(platform)
        if platform == "schema_version":  # written by PUT /im-config; a hand-written file may omit it
            if value != CREDENTIALS_SCHEMA_VERSION:
                issues.error(rel, f"schema_version {value!r} is not supported (expected 1)", "schema_version")
        elif model is None:
            issues.warn(rel, "unknown platform (ignored)", platform)
        elif isinstance(value, dict):
            for key in sorted(value.keys() - model.model_fields.keys()):
                issues.warn(rel, "unknown credential key (ignored)", f"{platform}.{key}")
    creds: ChannelCredentials | None = issues.attempt(lambda: validate(ChannelCredentials, doc))
    return creds


def _check_references(
    persona_doc: Document,
    persona: PersonaSpec,
    duties: Mapping[str, DutySpec],
    goals: Mapping[str, Goal],
    skills: Mapping[str, Skill],
    issues: Collector,
    files: Mapping[str, str],
) -> None:
    if persona.default_skill and persona.default_skill not in skills:
        issues.error(
            persona_doc.rel,
            f"default_skill {persona.default_skill!r} is not a skill of this worker",
            "default_skill",
            persona_doc.line_of(["default_skill"]),
        )
    for duty in duties.values():
        rel = files[f"duty:{duty.duty_id}"]
        for field in ("skill_id", "skill_hint"):
            name = getattr(duty, field)
            if name and name not in skills:
                issues.error(rel, f"{name!r} is not a skill of this worker", field)
        unknown = [s for s in duty.preferred_skill_ids if s not in skills]
        if unknown:
            issues.error(rel, f"{unknown} are not skills of this worker", "preferred_skill_ids")
    for goal in goals.values():
        missing = [d for d in goal.referenced_duties() if d not in duties]
        if missing:
            issues.error(files[f"goal:{goal.goal_id}"], f"references unknown duties {missing}", "duty_refs")
