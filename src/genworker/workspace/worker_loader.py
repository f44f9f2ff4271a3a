"""Loading one worker folder: PERSONA.md, duties, goals, skills, rules, contacts, credentials.

A worker loads whole or not at all: every problem in any of its files is collected and
reported together, and a worker with errors is `failed` (its last good version, if any,
keeps serving — that is the registry's job).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import get_args

from genworker.workspace import inputs
from genworker.workspace.documents import Document, read_json, read_markdown, validate
from genworker.workspace.duties_loader import load_duties
from genworker.workspace.errors import Issue, WorkspaceError
from genworker.workspace.models import ChannelCredentials, DutySpec, Goal, PersonaSpec, Tenant
from genworker.workspace.models.skill import SkillLevel
from genworker.workspace.models.tenant import MIN_TRUST_LEVEL
from genworker.workspace.people_loader import load_contacts, load_rules
from genworker.workspace.scan import Collector, Scope, load_by_id
from genworker.workspace.skills import effective_skills, load_skills
from genworker.workspace.snapshot import Skill, Worker, frozen_map

__all__ = ["load_worker"]

_PLATFORMS = {
    name: get_args(field.annotation)[0]  # `X | None` -> X
    for name, field in ChannelCredentials.model_fields.items()
}


def load_worker(
    scope: Scope, tenant: Tenant, folder: Path, inherited: Mapping[str, Skill]
) -> tuple[Worker, list[Issue]]:
    """Load the worker in `folder`; raise WorkspaceError listing every error found.

    Every file is read and checked even when PERSONA.md has errors, so one run of
    `genworker check` lists all of them.
    """
    issues = Collector()
    persona_path = folder / "PERSONA.md"
    if not persona_path.is_file():
        raise WorkspaceError.single(scope.rel(persona_path), "missing PERSONA.md")
    scope.check(persona_path)
    rel = scope.rel(persona_path)
    persona_doc = issues.attempt(lambda: (read_markdown(persona_path, rel, limit=scope.limits.persona), []))
    persona = None if persona_doc is None else issues.attempt(lambda: validate(PersonaSpec, persona_doc))
    if persona_doc is not None and persona is not None and persona.identity.worker_id != folder.name:
        issues.error(
            persona_doc.rel,
            f"worker_id {persona.identity.worker_id!r} must equal the folder name {folder.name!r}",
            "identity.worker_id",
            persona_doc.line_of(["identity", "worker_id"]),
        )
    files: dict[str, str] = {"persona": rel}
    duties = load_duties(scope, folder / "duties", issues, files)
    goals = load_by_id(
        scope,
        folder / "goals",
        issues,
        files,
        "goal",
        lambda doc: validate(Goal, doc, {**doc.data, "body": doc.body}),
        limit=scope.limits.goal,
    )
    skills_dir = persona.skills_dir if persona is not None else "skills"
    own_skills = load_skills(scope, folder / skills_dir, SkillLevel.WORKER, issues, trust_level=tenant.trust_level)
    skills = effective_skills(inherited, own_skills)
    rules = load_rules(scope, folder / "rules", issues, files)
    contacts = load_contacts(scope, folder, persona, issues, files)
    credentials = _load_credentials(scope, folder / "CHANNEL_CREDENTIALS.json", issues)
    if persona_doc is None or persona is None:
        raise WorkspaceError(issues.issues)
    _check_references(persona_doc, persona, duties, goals, skills, issues, files)
    _check_pre_script_trust(tenant, duties, goals, issues, files)
    _check_channel_credentials(scope.rel(folder / "CHANNEL_CREDENTIALS.json"), persona, credentials, issues)
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
        notes=tuple(issues.notes),
    )
    return worker, issues.warnings


CREDENTIALS_SCHEMA_VERSION = 1


_SLACK_SIGNING = (
    "field required: Slack's webhooks cannot be verified without it (a workspace written for upstream's "
    "socket mode needs it here too: Slack app settings, Basic Information, Signing Secret)"
)


def _load_credentials(scope: Scope, path: Path, issues: Collector) -> ChannelCredentials | None:
    if not inputs.is_file(path):  # recorded when absent too: the load cache sees it appear
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
            for key in sorted(value.keys() - model.accepted_keys()):
                issues.warn(rel, "unknown credential key (ignored)", f"{platform}.{key}")

    def check() -> tuple[ChannelCredentials, list[Issue]]:
        try:
            return validate(ChannelCredentials, doc)
        except WorkspaceError as exc:
            raise WorkspaceError(
                replace(i, message=_SLACK_SIGNING)
                if (i.field, i.message) == ("slack.signing_secret", "field required")
                else i
                for i in exc.issues
            ) from None

    creds: ChannelCredentials | None = issues.attempt(check)
    return creds


def _check_channel_credentials(
    rel: str, persona: PersonaSpec, credentials: ChannelCredentials | None, issues: Collector
) -> None:
    wecom = credentials.wecom if credentials is not None else None
    if wecom is not None and wecom.agent_id is None and any(c.type == "wecom" for c in persona.channels):
        issues.warn(rel, "not set: this worker can answer WeCom group chats but not direct messages", "wecom.agent_id")


def _check_pre_script_trust(
    tenant: Tenant,
    duties: Mapping[str, DutySpec],
    goals: Mapping[str, Goal],
    issues: Collector,
    files: Mapping[str, str],
) -> None:
    """Inline and path pre_scripts run code (tools/pre_script.py refuses them below MIN_TRUST_LEVEL):
    say so at load, not at each failed run. Upstream runs them at any trust level."""
    if tenant.trust_level >= MIN_TRUST_LEVEL:
        return
    scripts = [(f"duty:{d.duty_id}", "pre_script", "of this duty", d.pre_script) for d in duties.values()]
    scripts += [
        (f"goal:{g.goal_id}", "default_pre_script", "this goal starts", g.default_pre_script) for g in goals.values()
    ]
    for key, field, whose, script in scripts:
        if script is not None and script.kind != "ref":
            issues.warn(
                files[key],
                f"{script.kind} pre-scripts run code, which needs trust level {MIN_TRUST_LEVEL} (tenant "
                f"{tenant.tenant_id!r} has {tenant.trust_level}): every run {whose} fails with pre_script_failed "
                f"until TENANT.json sets trust_level {MIN_TRUST_LEVEL}",
                field,
            )


def _check_references(
    persona_doc: Document,
    persona: PersonaSpec,
    duties: Mapping[str, DutySpec],
    goals: Mapping[str, Goal],
    skills: Mapping[str, Skill],
    issues: Collector,
    files: Mapping[str, str],
) -> None:
    """Skill names are looked up at run time (an unknown one falls back to matching), as upstream:
    a warning. A goal's duty links must resolve: an error."""
    if persona.default_skill and persona.default_skill not in skills:
        fallback = sorted(name for name, skill in skills.items() if skill.spec.settings.default_skill)
        instead = f"skills marked default_skill ({', '.join(fallback)})" if fallback else "no skill"
        issues.warn(
            persona_doc.rel,
            f"default_skill {persona.default_skill!r} is not a skill of this worker: "
            f"requests that match no skill use {instead}",
            "default_skill",
            persona_doc.line_of(["default_skill"]),
        )
    for duty in duties.values():
        rel = files[f"duty:{duty.duty_id}"]
        for field in ("skill_id", "skill_hint"):
            name = getattr(duty, field)
            if name and name not in skills:
                message = f"{name!r} is not a skill of this worker: the duty runs with the skill that matches"
                issues.warn(rel, message, field)
        unknown = [s for s in duty.preferred_skill_ids if s not in skills]
        if unknown:
            issues.warn(rel, f"{unknown} are not skills of this worker (ignored)", "preferred_skill_ids")
    for goal in goals.values():
        rel = files[f"goal:{goal.goal_id}"]
        unknown = [s for s in goal.preferred_skill_ids if s not in skills]
        if unknown:
            issues.warn(rel, f"{unknown} are not skills of this worker (ignored)", "preferred_skill_ids")
        missing = [d for d in goal.referenced_duties() if d not in duties]
        if missing:
            issues.error(rel, f"references unknown duties {missing}", "duty_refs")
