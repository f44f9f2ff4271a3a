"""TaskStore: where task manifests, run records and idempotency claims live on disk.

    tenants/{t}/workers/{w}/tasks/active/{task_id}.json   TaskManifest of a task whose run is not over
    tenants/{t}/workers/{w}/tasks/done/{task_id}.json     ... moved here when the run ends
    tenants/{t}/workers/{w}/runs/{run_id}.json            RunRecord
    tenants/{t}/workers/{w}/runs/_idempotency/{h}.json    IdempotencyClaim, h = sha256(key)[:32]
    .../.locks/NN.lock                                    striped flock files (content unused)

Blocking and policy-free: it never decides a state. Only `TaskLifecycle` may call its write
methods (tests/structural/test_task_state_boundaries.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import ClassVar

from pydantic import ConfigDict, TypeAdapter

from genworker.fsutil import striped_lock
from genworker.ids import InvalidIdError, PlainFolders, safe_join, validate_id
from genworker.worker.lifecycle.errors import RunExists, RunNotFound, TaskExists, TaskFileError, TaskNotFound
from genworker.worker.lifecycle.files import encode, read_file
from genworker.worker.task import RUN_SCHEMA_VERSION, TASK_SCHEMA_VERSION, RunRecord, RunRef, TaskManifest
from genworker.write_journal import DIRECT, DurableFiles

__all__ = ["IDEMPOTENCY_SCHEMA_VERSION", "IdempotencyClaim", "TaskStore", "idempotency_digest"]

IDEMPOTENCY_SCHEMA_VERSION = 1


def idempotency_digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class IdempotencyClaim:
    """Which run an idempotency key created."""

    __pydantic_config__: ClassVar[ConfigDict] = ConfigDict(extra="forbid")

    key: str
    run_id: str
    task_id: str
    created_at: datetime
    schema_version: int = IDEMPOTENCY_SCHEMA_VERSION


_MANIFEST = TypeAdapter(TaskManifest)
_RUN = TypeAdapter(RunRecord)
_WORKERS_MAX = 65_536  # worker folders remembered as checked (a bound: none is ever dropped)
_CLAIM = TypeAdapter(IdempotencyClaim)


class TaskStore:
    def __init__(self, workspace_root: Path, files: DurableFiles = DIRECT) -> None:
        self.root = workspace_root
        self.files = files  # how writes are made durable (write_journal.py)
        self._folders = PlainFolders()  # runs/ and tasks/ folders checked once (ids.py)
        self._workers: dict[tuple[str, str], Path] = {}  # worker folders checked once, likewise

    # -- paths -------------------------------------------------------------------------

    def worker_dir(self, tenant_id: str, worker_id: str) -> Path:
        known = self._workers.get((tenant_id, worker_id))
        if known is not None:
            return known
        validate_id(tenant_id, "tenant_id")
        validate_id(worker_id, "worker_id")
        path = safe_join(self.root, "tenants", tenant_id, "workers", worker_id)
        if path.is_dir() and len(self._workers) < _WORKERS_MAX:
            self._workers[(tenant_id, worker_id)] = path
        return path

    def _json(self, worker: Path, sub: str, file_id: str, kind: str) -> Path:
        """`worker/sub/{file_id}.json`. `worker_dir` checked the path down to `worker`, so only
        the parts below it are checked here (a symlink there must not lead outside)."""
        return self._folders.file(worker, worker / sub, f"{validate_id(file_id, kind)}.json")

    def run_path(self, ref: RunRef) -> Path:
        return self._json(self.worker_dir(ref.tenant_id, ref.worker_id), "runs", ref.run_id, "run_id")

    def manifest_path(self, tenant_id: str, worker_id: str, task_id: str, *, done: bool = False) -> Path:
        sub = "tasks/done" if done else "tasks/active"
        return self._json(self.worker_dir(tenant_id, worker_id), sub, task_id, "task_id")

    def claim_path(self, tenant_id: str, worker_id: str, key: str) -> Path:
        return self._json(
            self.worker_dir(tenant_id, worker_id), "runs/_idempotency", idempotency_digest(key), "idempotency digest"
        )

    def run_lock(self, ref: RunRef) -> AbstractContextManager[None]:
        path = self.run_path(ref)
        return striped_lock(path.parent, path.stem)

    def claim_lock(self, tenant_id: str, worker_id: str, key: str) -> AbstractContextManager[None]:
        path = self.claim_path(tenant_id, worker_id, key)
        return striped_lock(path.parent, path.stem)

    # -- reads -------------------------------------------------------------------------

    def read_run(self, ref: RunRef) -> RunRecord:
        path = self.run_path(ref)
        try:
            return read_file(_RUN, path, RUN_SCHEMA_VERSION)
        except FileNotFoundError:
            raise RunNotFound(ref) from None

    def read_manifest(self, tenant_id: str, worker_id: str, task_id: str) -> TaskManifest:
        """The manifest from tasks/active/, else tasks/done/."""
        for done in (False, True):
            try:
                return read_file(
                    _MANIFEST, self.manifest_path(tenant_id, worker_id, task_id, done=done), TASK_SCHEMA_VERSION
                )
            except FileNotFoundError:
                continue
        raise TaskNotFound(tenant_id, worker_id, task_id)

    def read_claim(self, tenant_id: str, worker_id: str, key: str) -> IdempotencyClaim | None:
        try:
            return read_file(_CLAIM, self.claim_path(tenant_id, worker_id, key), IDEMPOTENCY_SCHEMA_VERSION)
        except FileNotFoundError:
            return None

    def list_runs(
        self, tenant_id: str, worker_id: str, *, limit: int, offset: int = 0, before: datetime | None = None
    ) -> list[RunRecord]:
        """Runs newest first (by queued_at, then run_id); `before` keeps runs queued strictly earlier."""
        if limit < 0 or offset < 0:
            raise ValueError("limit and offset must be 0 or more")
        if before is not None and before.utcoffset() is None:
            raise ValueError("before must be a timezone-aware datetime")
        runs = [self.read_run(ref) for ref in self.run_refs(tenant_id, worker_id)]
        if before is not None:
            runs = [run for run in runs if run.timings.queued_at < before]
        runs.sort(key=lambda run: (run.timings.queued_at, run.run_id), reverse=True)
        return runs[offset : offset + limit]

    def run_refs(self, tenant_id: str, worker_id: str) -> list[RunRef]:
        folder = self.worker_dir(tenant_id, worker_id) / "runs"
        return [RunRef(tenant_id, worker_id, run_id) for run_id in sorted(_ids_in(folder))]

    def active_run_refs(self, tenant_id: str, worker_id: str) -> list[RunRef]:
        """Runs of the tasks in tasks/active/ (the only runs that can still be running);
        a manifest that cannot be read is skipped, full recovery at start-up still sees its run."""
        folder = self.worker_dir(tenant_id, worker_id) / "tasks" / "active"
        refs = []
        for task_id in sorted(_ids_in(folder)):
            try:
                refs.append(RunRef(tenant_id, worker_id, self.read_manifest(tenant_id, worker_id, task_id).run_id))
            except (TaskFileError, TaskNotFound, OSError):
                continue
        return refs

    def workers(self) -> Iterator[tuple[str, str]]:
        """Every (tenant_id, worker_id) folder with valid ids under the workspace."""
        for tenant in sorted(_valid_dirs(self.root / "tenants")):
            for worker in sorted(_valid_dirs(self.root / "tenants" / tenant / "workers")):
                yield tenant, worker

    # -- writes (TaskLifecycle only) -----------------------------------------------

    def create_run(self, run: RunRecord) -> None:
        if not self.files.create_exclusive(self.run_path(run.ref), encode(_RUN, run)):
            raise RunExists(run.ref)

    def save_run(self, run: RunRecord) -> None:
        self.files.write_atomic(self.run_path(run.ref), encode(_RUN, run))

    def create_manifest(self, manifest: TaskManifest) -> None:
        """Write a new manifest to tasks/active/; manifests are written once."""
        t, w, task_id = manifest.tenant_id, manifest.worker_id, manifest.task_id
        if self.manifest_path(t, w, task_id, done=True).exists():
            raise TaskExists(t, w, task_id)
        if not self.files.create_exclusive(self.manifest_path(t, w, task_id), encode(_MANIFEST, manifest)):
            raise TaskExists(t, w, task_id)

    def discard_manifest(self, manifest: TaskManifest) -> None:
        """Remove an active manifest whose run could not be created."""
        self.files.remove(self.manifest_path(manifest.tenant_id, manifest.worker_id, manifest.task_id))

    def finish_manifest(self, tenant_id: str, worker_id: str, task_id: str) -> bool:
        """Move the manifest from tasks/active/ to tasks/done/ (a no-op when already moved).
        False when there is no manifest in either folder."""
        source = self.manifest_path(tenant_id, worker_id, task_id)
        return self.files.move_file(source, self.manifest_path(tenant_id, worker_id, task_id, done=True))

    def claim_idempotency(self, tenant_id: str, worker_id: str, claim: IdempotencyClaim) -> bool:
        """Record that `claim.key` belongs to `claim.run_id`; False when the key is already claimed."""
        return self.files.create_exclusive(self.claim_path(tenant_id, worker_id, claim.key), encode(_CLAIM, claim))

    def discard_claim(self, tenant_id: str, worker_id: str, key: str) -> None:
        self.files.remove(self.claim_path(tenant_id, worker_id, key))


def _ids_in(folder: Path) -> Iterator[str]:
    """Ids of the `{id}.json` files in `folder` (dot files, temp files and lock folders skipped)."""
    try:
        entries = list(folder.iterdir())
    except FileNotFoundError:
        return
    for entry in entries:
        if entry.suffix == ".json" and not entry.name.startswith((".", "_")) and entry.is_file():
            try:
                yield validate_id(entry.stem)
            except InvalidIdError:
                continue


def _valid_dirs(folder: Path) -> Iterator[str]:
    try:
        entries = list(folder.iterdir())
    except FileNotFoundError:
        return
    for entry in entries:
        if entry.is_dir():
            try:
                yield validate_id(entry.name)
            except InvalidIdError:
                continue
