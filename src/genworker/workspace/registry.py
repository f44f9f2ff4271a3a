"""WorkspaceRegistry: the loaded workspace, reloadable one worker or tenant at a time.

Loads run in worker threads; each swaps immutable values under a lock, so readers always
see a consistent worker. An invalid edit keeps the last good version serving and records
the errors; every reload bumps `version`.
"""

from __future__ import annotations

import gc
import logging
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from genworker.ids import validate_id
from genworker.workspace.errors import Issue, WorkspaceError
from genworker.workspace.inputs import tracking
from genworker.workspace.limits import DEFAULT_LIMITS, FileLimits
from genworker.workspace.load_cache import LoadCache, LoadSession
from genworker.workspace.scan import Collector, Scope
from genworker.workspace.skills import effective_skills
from genworker.workspace.snapshot import Skill, TenantState, Worker, WorkerFailure, frozen_map
from genworker.workspace.tenant_loader import (
    default_worker_issues,
    load_system_skills,
    load_tenant,
    load_tenant_worker,
)

if TYPE_CHECKING:
    from genworker.settings import Settings

__all__ = ["PRODUCT_SKILLS", "ReloadOutcome", "Summary", "WorkspaceRegistry"]

log = logging.getLogger(__name__)

PRODUCT_SKILLS = Path(__file__).resolve().parents[3] / "skills"


@dataclass(frozen=True, slots=True)
class ReloadOutcome:
    target: str
    version: int
    ok: bool
    errors: tuple[Issue, ...] = ()
    kept_last_good: bool = False
    removed: bool = False


@dataclass(frozen=True, slots=True)
class Summary:
    tenants: int
    workers: int
    failed_workers: int
    duties: int
    goals: int
    skills: int


class WorkspaceRegistry:
    def __init__(
        self,
        root: Path,
        product_skills: Path | None = PRODUCT_SKILLS,
        limits: FileLimits = DEFAULT_LIMITS,
        *,
        cache: bool | LoadCache = False,
    ) -> None:
        """`cache`: serve `load_all` from the load cache (True: `runtime/cache/` of the workspace)."""
        self.root = root.resolve()
        self.limits = limits
        self.cache = LoadCache(self.root, limits) if cache is True else cache or None
        self._scope = Scope(self.root, limits)
        self._product_skills = product_skills if product_skills and product_skills.is_dir() else None
        self._lock = threading.RLock()
        self._version = 0
        self._system: Mapping[str, Skill] = frozen_map({})
        self._system_issues: tuple[Issue, ...] = ()
        self._system_notes: tuple[Issue, ...] = ()
        self._tenants: dict[str, TenantState] = {}
        self._tenant_errors: dict[str, tuple[Issue, ...]] = {}
        self._stale: dict[str, tuple[Issue, ...]] = {}  # target -> errors of a rejected reload
        self._root_issues: tuple[Issue, ...] = ()

    @classmethod
    def from_settings(cls, settings: Settings, *, cache: bool = False) -> WorkspaceRegistry:
        """The workspace of `settings`, with its file size limits (GENWORKER_MAX_*_KIB); `cache`:
        use the load cache unless GENWORKER_LOAD_CACHE is false."""
        enabled = cache and settings.flag("GENWORKER_LOAD_CACHE", True)
        return cls(settings.workspace, limits=FileLimits.from_settings(settings), cache=enabled)

    # -- loading -----------------------------------------------------------------

    def load_all(self) -> Summary:
        with self._lock, _paused_gc():
            self._scope = Scope(self.root, self.limits)  # fresh symlink cache per operation
            self._version += 1
            self._tenants.clear()
            self._tenant_errors.clear()
            self._stale.clear()
            session = None if self.cache is None else self.cache.begin()
            with tracking() as system_inputs:
                self._load_system()
            if session is not None:
                session.set_system(system_inputs)
            issues = Collector()
            if not (self.root / "tenants").is_dir():
                issues.error(self._scope.rel(self.root / "tenants"), "workspace has no tenants/ folder")
            for folder in self._scope.entries(self.root / "tenants", issues, dirs=True, id_kind="tenant id"):
                self._load_tenant(folder.name, keep_last_good=False, cache=session)
            self._root_issues = tuple(issues.issues)
            if session is not None:
                stats = session.finish()
                log.info(
                    "workspace %s: %d workers from the load cache, %d parsed, %d added to it",
                    self.root,
                    stats.cached,
                    stats.parsed,
                    stats.stored,
                )
            return self.summary()

    def reload_system(self) -> ReloadOutcome:
        with self._lock, _paused_gc():
            self._scope = Scope(self.root, self.limits)  # fresh symlink cache per operation
            self._version += 1
            self._load_system()
            for tenant_id in list(self._tenants):
                self._load_tenant(tenant_id, keep_last_good=True)
            return ReloadOutcome(
                "system",
                self._version,
                ok=not any(i.severity == "error" for i in self._system_issues),
                errors=self._system_issues,
            )

    def reload_tenant(self, tenant_id: str) -> ReloadOutcome:
        validate_id(tenant_id, "tenant id")
        with self._lock, _paused_gc():
            self._scope = Scope(self.root, self.limits)
            self._version += 1
            return self._load_tenant(tenant_id, keep_last_good=True)

    def reload_worker(self, tenant_id: str, worker_id: str) -> ReloadOutcome:
        validate_id(tenant_id, "tenant id")
        validate_id(worker_id, "worker id")
        target = f"{tenant_id}/{worker_id}"
        with self._lock, _paused_gc():
            self._scope = Scope(self.root, self.limits)
            self._version += 1
            state = self._tenants.get(tenant_id)
            if state is None:
                return self._load_tenant(tenant_id, keep_last_good=True)
            folder = self.root / "tenants" / tenant_id / "workers" / worker_id
            if folder.is_dir() and worker_id not in state.workers and not (folder / "PERSONA.md").exists():
                return self._load_tenant(tenant_id, keep_last_good=True)  # not a worker: the tenant notes it
            if not folder.is_dir():
                self._stale.pop(target, None)
                self._tenants[tenant_id] = replace(
                    state,
                    workers=_without(state.workers, worker_id),
                    failures=_without(state.failures, worker_id),
                )
                return ReloadOutcome(target, self._version, ok=True, removed=True)
            result = load_tenant_worker(self._scope, state, self._system, folder, self._version)
            if isinstance(result, Worker):
                self._stale.pop(target, None)
                self._tenants[tenant_id] = replace(
                    state,
                    workers=frozen_map({**state.workers, worker_id: result}),
                    failures=_without(state.failures, worker_id),
                )
                return ReloadOutcome(target, self._version, ok=True)
            if worker_id in state.workers:
                self._stale[target] = result.errors
                return ReloadOutcome(target, self._version, ok=False, errors=result.errors, kept_last_good=True)
            self._tenants[tenant_id] = replace(state, failures=frozen_map({**state.failures, worker_id: result}))
            return ReloadOutcome(target, self._version, ok=False, errors=result.errors)

    def _load_system(self) -> None:
        skills, issues = load_system_skills(self._scope, self._product_skills)
        self._system = skills
        self._system_issues = tuple(i for i in issues if i.severity != "note")
        self._system_notes = tuple(i for i in issues if i.severity == "note")

    def _load_tenant(self, tenant_id: str, *, keep_last_good: bool, cache: LoadSession | None = None) -> ReloadOutcome:
        folder = self.root / "tenants" / tenant_id
        if not folder.is_dir():
            self._tenants.pop(tenant_id, None)
            self._tenant_errors.pop(tenant_id, None)
            self._drop_stale(tenant_id)
            return ReloadOutcome(tenant_id, self._version, ok=True, removed=True)
        try:
            state = load_tenant(self._scope, folder, self._system, self._version, cache)
        except WorkspaceError as exc:
            if keep_last_good and tenant_id in self._tenants:
                self._stale[tenant_id] = exc.issues
                return ReloadOutcome(tenant_id, self._version, ok=False, errors=exc.issues, kept_last_good=True)
            self._tenants.pop(tenant_id, None)
            self._tenant_errors[tenant_id] = exc.issues
            return ReloadOutcome(tenant_id, self._version, ok=False, errors=exc.issues)
        self._drop_stale(tenant_id)
        self._tenant_errors.pop(tenant_id, None)
        rejected = state.failures  # workers whose files fail now, including those that keep their last good version
        previous = self._tenants.get(tenant_id) if keep_last_good else None
        if previous is not None:
            state = self._keep_last_good_workers(previous, state)
        self._tenants[tenant_id] = state
        errors = tuple(i for i in (*state.issues, *default_worker_issues(state)) if i.severity == "error")
        failed = tuple(e for f in rejected.values() for e in f.errors)
        kept = any(worker_id in state.workers for worker_id in rejected)
        return ReloadOutcome(
            tenant_id, self._version, ok=not errors and not failed, errors=errors + failed, kept_last_good=kept
        )

    def _keep_last_good_workers(self, previous: TenantState, state: TenantState) -> TenantState:
        """A worker that loaded before and fails now keeps serving its last good version."""
        workers = dict(state.workers)
        failures = dict(state.failures)
        for worker_id, failure in state.failures.items():
            if worker_id in previous.workers:
                workers[worker_id] = previous.workers[worker_id]
                del failures[worker_id]
                self._stale[f"{state.tenant_id}/{worker_id}"] = failure.errors
        return replace(state, workers=frozen_map(workers), failures=frozen_map(failures))

    def _drop_stale(self, tenant_id: str) -> None:
        for target in [t for t in self._stale if t == tenant_id or t.startswith(f"{tenant_id}/")]:
            del self._stale[target]

    # -- queries -----------------------------------------------------------------

    @property
    def version(self) -> int:
        return self._version

    def tenants(self) -> list[TenantState]:
        with self._lock:
            return [self._tenants[t] for t in sorted(self._tenants)]

    def tenant(self, tenant_id: str) -> TenantState | None:
        with self._lock:
            return self._tenants.get(tenant_id)

    def worker(self, tenant_id: str, worker_id: str) -> Worker | None:
        state = self.tenant(tenant_id)
        return None if state is None else state.workers.get(worker_id)

    def workers(self) -> list[Worker]:
        return [w for state in self.tenants() for w in state.workers.values()]

    def default_worker(self, tenant_id: str) -> Worker | None:
        """The tenant's `default_worker`, or its only worker when it names none (or one without a folder)."""
        state = self.tenant(tenant_id)
        if state is None:
            return None
        named = state.tenant.default_worker
        if named and (named in state.workers or named in state.failures):
            return state.workers.get(named)
        if len(state.workers) == 1 and not state.failures:
            return next(iter(state.workers.values()))
        return None

    def failures(self) -> list[WorkerFailure]:
        return [f for state in self.tenants() for f in state.failures.values()]

    def skills_for(self, tenant_id: str) -> Mapping[str, Skill]:
        state = self.tenant(tenant_id)
        return effective_skills(self._system, state.skills if state else {})

    def issues(self) -> list[Issue]:
        """Every current problem: load errors, rejected reloads and warnings."""
        with self._lock:
            found = [*self._root_issues, *self._system_issues]
            for errors in self._tenant_errors.values():
                found.extend(errors)
            for state in self._tenants.values():
                found.extend(state.issues)
                found.extend(default_worker_issues(state))
                for worker in state.workers.values():
                    found.extend(worker.warnings)
                for failure in state.failures.values():
                    found.extend(failure.errors)
            for errors in self._stale.values():
                found.extend(errors)
            return list(dict.fromkeys(found))

    def notes(self) -> list[Issue]:
        """How files were read where they use upstream spellings (kept out of `issues()`)."""
        with self._lock:
            found = list(self._system_notes)
            for state in self._tenants.values():
                found.extend(state.notes)
                for worker in state.workers.values():
                    found.extend(worker.notes)
                for failure in state.failures.values():
                    found.extend(failure.notes)
            return list(dict.fromkeys(found))

    def summary(self) -> Summary:
        workers = self.workers()
        skills = {s.file for w in workers for s in w.skills.values()} | {s.file for s in self._system.values()}
        return Summary(
            tenants=len(self.tenants()),
            workers=len(workers),
            failed_workers=len(self.failures()),
            duties=sum(len(w.duties) for w in workers),
            goals=sum(len(w.goals) for w in workers),
            skills=len(skills),
        )

    def describe(self) -> dict[str, Any]:
        """The workspace part of /api/v1/debug/runtime."""
        with self._lock:
            tenants = {}
            for tenant_id, state in sorted(self._tenants.items()):
                workers: dict[str, Any] = {}
                for worker_id, worker in state.workers.items():
                    stale = self._stale.get(f"{tenant_id}/{worker_id}", ())
                    workers[worker_id] = {
                        "status": "loaded",
                        "version": worker.version,
                        "reload_errors": [i.as_dict() for i in stale],
                        "warnings": len(worker.warnings),
                    }
                for worker_id, failure in state.failures.items():
                    workers[worker_id] = {
                        "status": "failed",
                        "version": failure.version,
                        "errors": [i.as_dict() for i in failure.errors],
                    }
                tenants[tenant_id] = {
                    "status": "loaded",
                    "default_worker": state.tenant.default_worker,
                    "issues": [i.as_dict() for i in (*state.issues, *default_worker_issues(state))],
                    "reload_errors": [i.as_dict() for i in self._stale.get(tenant_id, ())],
                    "workers": dict(sorted(workers.items())),
                }
            for tenant_id, errors in self._tenant_errors.items():
                tenants[tenant_id] = {"status": "failed", "errors": [i.as_dict() for i in errors]}
            return {"root": str(self.root), "version": self._version, "tenants": tenants}


@contextmanager
def _paused_gc() -> Iterator[None]:
    """Loading allocates many short-lived objects; cyclic GC passes over the growing registry
    cost more than the whole validation, and nothing made during a load is cyclic garbage.

    Afterwards what the load made goes straight to the oldest generation (freeze + unfreeze)
    instead of being scanned as young objects by the first collection after `gc.enable()`:
    0.2-0.3 s for 1,000 workers, a third of a restart from the load cache."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.freeze()
            gc.unfreeze()
            gc.enable()


def _without(items: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    return frozen_map({k: v for k, v in items.items() if k != key})
