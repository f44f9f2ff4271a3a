"""Loading one tenant folder (TENANT.json, tenant skills, every worker) and system skills."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from genworker.workspace import inputs
from genworker.workspace.documents import read_json, validate
from genworker.workspace.errors import Issue, WorkspaceError
from genworker.workspace.load_cache import LoadSession, TenantCache
from genworker.workspace.models import SkillLevel, Tenant
from genworker.workspace.scan import Collector, Scope
from genworker.workspace.skills import effective_skills, load_skills
from genworker.workspace.snapshot import Skill, TenantState, Worker, WorkerFailure, frozen_map
from genworker.workspace.worker_loader import load_worker

log = logging.getLogger(__name__)

__all__ = ["default_worker_issues", "load_system_skills", "load_tenant", "load_tenant_worker"]


def load_system_skills(scope: Scope, product_skills: Path | None) -> tuple[Mapping[str, Skill], list[Issue]]:
    """Product skills first, then `workspace/system/skills` (which wins for the same name)."""
    issues = Collector()
    layers = []
    if product_skills is not None:
        product = Scope(product_skills.parent, scope.limits)
        layers.append(load_skills(product, product_skills, SkillLevel.SYSTEM, issues))
    layers.append(load_skills(scope, scope.root / "system" / "skills", SkillLevel.SYSTEM, issues))
    return effective_skills(*layers), issues.issues


def load_tenant(
    scope: Scope,
    folder: Path,
    system_skills: Mapping[str, Skill],
    version: int = 0,
    cache: LoadSession | None = None,
) -> TenantState:
    """Load a tenant and all its workers. Raises WorkspaceError when TENANT.json is unusable.

    With `cache`, a worker none of whose inputs changed comes from the load cache."""
    issues = Collector()
    with inputs.tracking() as found:
        tenant, skills = _tenant_and_skills(scope, folder, issues)
    tenant_cache = None if cache is None else cache.tenant(tenant.tenant_id, found)
    state = TenantState(tenant=tenant, skills=frozen_map(skills))
    workers: dict[str, Worker] = {}
    failures: dict[str, WorkerFailure] = {}
    for worker_dir in scope.entries(folder / "workers", issues, dirs=True, id_kind="worker id"):
        if not (worker_dir / "PERSONA.md").exists():
            issues.warn(scope.rel(worker_dir), "no PERSONA.md: not a worker (skipped)")
            continue
        result = load_tenant_worker(scope, state, system_skills, worker_dir, version, tenant_cache)
        if isinstance(result, Worker):
            workers[result.worker_id] = result
        else:
            failures[result.worker_id] = result
    problems = tuple(i for i in issues.issues if i.severity != "note")
    return replace(
        state,
        workers=frozen_map(workers),
        failures=frozen_map(failures),
        issues=problems,
        notes=tuple(issues.notes),
    )


def _tenant_and_skills(scope: Scope, folder: Path, issues: Collector) -> tuple[Tenant, dict[str, Skill]]:
    path = folder / "TENANT.json"
    if not path.is_file():
        raise WorkspaceError.single(scope.rel(path), "missing TENANT.json")
    scope.check(path)
    doc = read_json(path, scope.rel(path), limit=scope.limits.tenant)
    data = dict(doc.data)
    if "tenant_id" not in data:  # optional, as upstream: the folder names the tenant
        data["tenant_id"] = folder.name
        issues.note(doc.rel, f"mapped: (absent) -> {folder.name!r}, the folder name", "tenant_id")
    tenant, warnings = validate(Tenant, doc, data)
    issues.issues.extend(warnings)
    if tenant.tenant_id != folder.name:
        raise WorkspaceError.single(
            doc.rel,
            f"tenant_id {tenant.tenant_id!r} must equal the folder name {folder.name!r}",
            "tenant_id",
            doc.line_of(["tenant_id"]),
        )
    return tenant, load_skills(scope, folder / "skills", SkillLevel.TENANT, issues, trust_level=tenant.trust_level)


def default_worker_issues(state: TenantState) -> list[Issue]:
    """Checked against the current workers, so adding or deleting a worker updates it."""
    name = state.tenant.default_worker
    if not name or name in state.workers or name in state.failures:
        return []
    rel = f"tenants/{state.tenant_id}/TENANT.json"
    return [Issue("warning", rel, f"default_worker {name!r} has no folder under workers/ (ignored)", "default_worker")]


def load_tenant_worker(
    scope: Scope,
    state: TenantState,
    system_skills: Mapping[str, Skill],
    folder: Path,
    version: int,
    cache: TenantCache | None = None,
) -> Worker | WorkerFailure:
    inherited = effective_skills(system_skills, state.skills)
    cached = None if cache is None else cache.lookup(folder.name)
    if cached is not None:
        return replace(cached, skills=effective_skills(inherited, cached.skills), version=version)
    try:
        with inputs.tracking() as found:
            worker, _ = load_worker(scope, state.tenant, folder, inherited)
    except WorkspaceError as exc:
        errors = tuple(i for i in exc.issues if i.severity != "note")
        notes = tuple(i for i in exc.issues if i.severity == "note")
        return WorkerFailure(state.tenant_id, folder.name, errors, version, notes)
    except Exception as exc:  # a loader bug must fail this worker, not the whole workspace
        log.exception("unexpected error loading worker %s/%s", state.tenant_id, folder.name)
        issue = Issue("error", scope.rel(folder), f"internal error while loading: {type(exc).__name__}: {exc}")
        return WorkerFailure(state.tenant_id, folder.name, (issue,), version)
    if cache is not None:
        cache.store(worker, found)
    return replace(worker, version=version)
