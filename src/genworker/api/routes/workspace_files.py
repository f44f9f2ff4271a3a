"""A worker's own files, edited over the API (the console's editor): list them, read one with its
version, check an edit with the workspace loader, save it. Tenant-scoped like every worker route.

A save writes the file atomically only when the edit loads (else 422 with the loader's issues, each
with its file and line) and the file is still at the version the client opened (else 409 naming
the file); where the workspace is a git repository it is committed, alone, with the key's label as
the author and the client's message; then the worker is reloaded. See workspace/editing.py.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request
from pydantic import Field

from genworker.api.auth import get_api_keys, principal_worker, require_principal, worker_not_found
from genworker.api.bodies import RequestBody
from genworker.api.deps import get_runtime
from genworker.api.errors import ApiError, error_response, error_responses
from genworker.api.params import WorkerId
from genworker.auth import Principal
from genworker.runtime.composition import Runtime
from genworker.workspace.editing import (
    EDITABLE_MAX_LENGTH,
    EDITABLE_PATTERN,
    EditCheck,
    EditConflict,
    EditInvalid,
    PathRefused,
    Saved,
    WorkerFiles,
)
from genworker.workspace.git import Author, GitError, repository_of

__all__ = ["router"]

router = APIRouter(prefix="/api/v1/workers/{worker_id}", tags=["workspace files"], responses=error_responses(404))

Auth = Annotated[Principal, Depends(require_principal)]
RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
FilePath = Annotated[
    str,
    Path(
        min_length=1,
        max_length=EDITABLE_MAX_LENGTH,
        pattern=EDITABLE_PATTERN,
        description="in the worker's folder: PERSONA.md, duties/<name>.md, goals/<name>.md, skills/.../<name>.md",
        examples=["PERSONA.md"],
    ),
]
MAX_CONTENT = 8 * 1024 * 1024  # characters; the loader's own size limits (GENWORKER_MAX_*_KIB) apply too
VERSION_PATTERN = r"^sha256:[0-9a-f]{64}$"


class CheckBody(RequestBody):
    path: str = Field(max_length=EDITABLE_MAX_LENGTH, pattern=EDITABLE_PATTERN, examples=["PERSONA.md"])
    content: str = Field(max_length=MAX_CONTENT)


class SaveBody(RequestBody):
    content: str = Field(max_length=MAX_CONTENT)
    base_version: str | None = Field(
        pattern=VERSION_PATTERN, description="the version read with the file; null: create a file that does not exist"
    )
    message: str = Field(default="", max_length=2000, description="the commit message (default: 'Edit <path>')")


def _files(principal: Principal, runtime: Runtime, worker_id: str) -> WorkerFiles:
    """The worker's files, for a worker of the key's tenant that loaded or failed to load (a broken
    worker is the one most in need of an edit); 404 otherwise."""
    tenant_id, worker = principal_worker(principal, worker_id)
    registry = runtime.registry
    state = registry.tenant(tenant_id)
    if state is None or (worker not in state.workers and worker not in state.failures):
        raise worker_not_found(worker_id)
    running = state.workers.get(worker)
    return WorkerFiles(
        registry.root,
        registry.limits,
        state.tenant,
        registry.skills_for(tenant_id),
        worker,
        None if running is None else running.persona,
    )


def _refused(exc: PathRefused) -> Any:
    return error_response(
        422,
        "path_refused",
        str(exc),
        fields=[{"loc": ["path", "file_path"], "message": str(exc), "type": "path_refused"}],
    )


def _issues(check: EditCheck) -> list[dict[str, object]]:
    return [i.as_dict() for i in check.issues]


async def _author(request: Request, principal: Principal) -> Author:
    """The key's label as the person's name (the key id when it has none)."""
    keys = await asyncio.to_thread(get_api_keys(request).list, principal.tenant_id)
    label = next((k.label for k in keys if k.key_id == principal.key_id), "")
    name = "".join(ch for ch in label if ch not in "<>").strip() or f"API key {principal.key_id}"
    return Author(name, f"{principal.key_id}@{principal.tenant_id}.genworker.invalid")


@router.get("/files", summary="The worker's editable files, each with its version")
async def list_files(worker_id: WorkerId, principal: Auth, runtime: RuntimeDep, request: Request) -> Any:
    files = _files(principal, runtime, worker_id)
    found = await asyncio.to_thread(files.files)
    try:
        repository = await asyncio.to_thread(repository_of, files.folder) is not None
        reason = "" if repository else "the workspace is not a git repository: a save writes the file only"
    except GitError as exc:
        repository, reason = False, str(exc)
    author = await _author(request, principal)
    return {
        "worker_id": files.worker_id,
        "files": [{"path": f.path, "kind": f.kind, "size": f.size, "version": f.version} for f in found],
        "git": {"repository": repository, "author": author.name, "note": reason},
    }


@router.post(
    "/validate-file",
    summary="Check an edit with the workspace loader: its issues, each with file and line",
    responses=error_responses(422),
)
async def validate_file(worker_id: WorkerId, body: CheckBody, principal: Auth, runtime: RuntimeDep) -> Any:
    """Nothing is written. `valid` is false when the edited file has an error or the edit makes one
    in another file of the worker."""
    files = _files(principal, runtime, worker_id)
    try:
        check = await asyncio.to_thread(files.check, body.path, body.content)
    except PathRefused as exc:
        return _refused(exc)
    return {"path": body.path, "file": check.rel, "valid": check.valid, "issues": _issues(check)}


@router.get(
    "/files/{file_path:path}", summary="One editable file: its text and version", responses=error_responses(422)
)
async def read_file(worker_id: WorkerId, file_path: FilePath, principal: Auth, runtime: RuntimeDep) -> Any:
    files = _files(principal, runtime, worker_id)
    try:
        found = await asyncio.to_thread(files.read, file_path)
    except PathRefused as exc:
        return _refused(exc)
    if found is None:
        raise ApiError(404, "file_not_found", f"{files.workspace_rel(file_path)} does not exist")
    data, version = found
    try:
        content = data.decode("utf-8")
    except UnicodeDecodeError:
        return error_response(422, "not_text", f"{files.workspace_rel(file_path)} is not UTF-8 text")
    return {"path": file_path, "file": files.workspace_rel(file_path), "content": content, "version": version}


@router.put(
    "/files/{file_path:path}",
    summary="Save an edit: written only if it loads and the file is unchanged since read; committed to git",
    responses=error_responses(409, 422),
)
async def save_file(
    worker_id: WorkerId,
    file_path: FilePath,
    body: SaveBody,
    principal: Auth,
    runtime: RuntimeDep,
    request: Request,
) -> Any:
    """409 `edit_conflict` when the file changed on disk since `base_version` (`file` names it,
    `version` is its version now); 409 `git_refused` when git refused the commit (the file is put back);
    422 `invalid_edit` with the loader's `issues` (nothing is written)."""
    files = _files(principal, runtime, worker_id)
    author = await _author(request, principal)
    message = body.message.strip() or f"Edit {file_path} of worker {files.worker_id}"
    message += f"\n\nSaved in the genworker console (tenant {principal.tenant_id}, API key {principal.key_id})."
    try:
        saved = await asyncio.to_thread(files.save, file_path, body.content, body.base_version, author, message)
    except PathRefused as exc:
        return _refused(exc)
    except EditConflict as exc:
        return error_response(409, "edit_conflict", str(exc), file=exc.rel, version=exc.version)
    except EditInvalid as exc:
        return error_response(422, "invalid_edit", str(exc), file=exc.check.rel, issues=_issues(exc.check))
    except GitError as exc:
        return error_response(409, "git_refused", f"not saved: {exc}", file=files.workspace_rel(file_path))
    reload = None
    if saved.changed:
        outcome = await runtime.reload(files.tenant.tenant_id, files.worker_id)
        reload = {"ok": outcome.ok, "version": outcome.version, "errors": [e.as_dict() for e in outcome.errors]}
    return _saved(saved, author, message, reload)


def _saved(saved: Saved, author: Author, message: str, reload: dict[str, Any] | None) -> dict[str, Any]:
    git = saved.git
    commit = None
    if git.committed:
        commit = {"sha": git.sha, "author": author.name, "email": author.email, "message": message}
    return {
        "file": saved.rel,
        "version": saved.version,
        "changed": saved.changed,
        "commit": commit,
        "git": {"repository": git.repository, "committed": git.committed, "reason": git.reason},
        "reload": reload,
        "issues": [] if saved.check is None else _issues(saved.check),
    }
