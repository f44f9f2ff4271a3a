"""Hot reload: watch the workspace and reload only the worker, tenant or system layer touched.

Runtime state folders (runtime/, memory/, tasks/, sessions/ ...) never trigger a reload,
so the runtime writing its own state cannot start a reload loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from watchfiles import Change, awatch

from genworker.ids import InvalidIdError, validate_id
from genworker.workspace.registry import ReloadOutcome, WorkspaceRegistry

__all__ = ["ReloadTarget", "WorkspaceWatcher", "classify"]

log = logging.getLogger(__name__)

# Worker sub-paths that define the worker; anything else under a worker is runtime state.
_DEFINITION = {"PERSONA.md", "CHANNEL_CREDENTIALS.json", "duties", "goals", "skills", "rules", "contacts"}


@dataclass(frozen=True, slots=True, order=True)
class ReloadTarget:
    kind: str  # "system" | "tenant" | "worker"
    tenant_id: str = ""
    worker_id: str = ""


def classify(root: Path, path: Path, skills_dirs: Callable[[str, str], str] | None = None) -> ReloadTarget | None:
    """Which part of the workspace a changed path belongs to (None: not a definition file)."""
    try:
        parts = PurePosixPath(path.relative_to(root).as_posix()).parts
    except ValueError:
        return None
    if any(p.startswith(".") or p.endswith(("~", ".swp", ".tmp")) for p in parts):
        return None
    if parts[:2] == ("system", "skills"):
        return ReloadTarget("system")
    if len(parts) < 2 or parts[0] != "tenants" or not _valid(parts[1]):
        return None
    tenant_id = parts[1]
    if len(parts) == 2 or parts[2] in ("TENANT.json", "skills"):
        return ReloadTarget("tenant", tenant_id)
    if parts[2] != "workers" or len(parts) < 4 or not _valid(parts[3]):
        return None
    worker_id = parts[3]
    if len(parts) == 4:
        return ReloadTarget("worker", tenant_id, worker_id)
    if parts[4] == "duties" and len(parts) > 5 and (len(parts) > 6 or not parts[5].endswith(".md")):
        return None  # only duties/*.md define duties; upstream keeps duties/{id}/execution_log.jsonl there
    custom_skills = skills_dirs(tenant_id, worker_id) if skills_dirs else "skills"
    if parts[4] in _DEFINITION or parts[4] == custom_skills.split("/")[0]:
        return ReloadTarget("worker", tenant_id, worker_id)
    return None


def _valid(value: str) -> bool:
    try:
        validate_id(value)
    except InvalidIdError:
        return False
    return True


def coalesce(targets: Iterable[ReloadTarget]) -> list[ReloadTarget]:
    """System covers everything; a tenant covers its workers."""
    unique = set(targets)
    if any(t.kind == "system" for t in unique):
        return [ReloadTarget("system")]
    tenants = {t.tenant_id for t in unique if t.kind == "tenant"}
    return sorted(t for t in unique if t.kind == "tenant" or t.tenant_id not in tenants)


class WorkspaceWatcher:
    """Runs until `stop` is set; calls `on_reload` after every reload (tests, metrics)."""

    def __init__(
        self,
        registry: WorkspaceRegistry,
        *,
        debounce_ms: int = 150,
        on_reload: Callable[[ReloadOutcome], None] | None = None,
    ) -> None:
        self.registry = registry
        self.debounce_ms = debounce_ms
        self.on_reload = on_reload
        self.reloads = 0
        # Set on the first batch of changes of any kind: proof the OS watch is live.
        self.saw_changes = asyncio.Event()

    def _skills_dir(self, tenant_id: str, worker_id: str) -> str:
        worker = self.registry.worker(tenant_id, worker_id)
        return worker.persona.skills_dir if worker else "skills"

    async def run(self, stop: asyncio.Event) -> None:
        root = self.registry.root

        def defines(_: Change, path: str) -> bool:
            """Only definition files reach the loop below (and watchfiles' "N changes detected" log
            line): the runtime writes sessions, runs and memory on every turn. Called on the loop."""
            self.saw_changes.set()  # any change at all proves the OS watch is live
            return classify(root, Path(path), self._skills_dir) is not None

        batches = awatch(root, watch_filter=defines, stop_event=stop, debounce=self.debounce_ms, step=20)
        async for changes in batches:
            found = (classify(root, Path(p), self._skills_dir) for _, p in changes)
            for target in coalesce(t for t in found if t is not None):
                outcome = await asyncio.to_thread(self._reload, target)
                self.reloads += 1
                if outcome.ok:
                    log.info("reloaded %s (version %d)", outcome.target, outcome.version)
                else:
                    log.warning(
                        "reload of %s rejected%s: %s",
                        outcome.target,
                        ", last good version keeps serving" if outcome.kept_last_good else "",
                        "; ".join(str(e) for e in outcome.errors),
                    )
                if self.on_reload is not None:
                    self.on_reload(outcome)

    def _reload(self, target: ReloadTarget) -> ReloadOutcome:
        if target.kind == "system":
            return self.registry.reload_system()
        if target.kind == "tenant":
            return self.registry.reload_tenant(target.tenant_id)
        return self.registry.reload_worker(target.tenant_id, target.worker_id)
