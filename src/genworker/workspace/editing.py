"""Editing a worker's own files from outside the filesystem (the console): which files, checking an
edit with the loader itself, and saving it atomically, committed to git where the workspace is a
repository.

Only PERSONA.md, `duties/*.md`, `goals/*.md` and text files under `skills/` are editable
(`EDITABLE_PATTERN`); a symlink, or a path that resolves outside the worker's folder, is refused.

An edit is checked by loading the whole worker with it, as the runtime would: the files the worker
loads from now are copied into a private temporary workspace with the same layout (never
CHANNEL_CREDENTIALS.json: secrets are not copied), the edited file is put in, and `load_worker`
runs there. So the issues are the loader's own, with the workspace paths and lines it reports, and
references between files (a goal's duties, the worker id in PERSONA.md) are checked too. An edit is
valid when it leaves no error in the edited file and makes no error elsewhere that was not there.

Below trust level 2 a tenant's edit may not add or change an stdio MCP server: that runs a command
on the server, which only the workspace's owner (editing the files) may configure.

A save is compare-and-swap on the file's content hash (`version`): the client sends the version it
opened, and a file that changed on disk since is a conflict. Saves are serialised by one lock per
workspace (which also keeps two commits off git's index at once).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from genworker.fsutil import file_lock, remove_file, write_atomic
from genworker.workspace import inputs
from genworker.workspace.documents import read_markdown, validate
from genworker.workspace.errors import Issue, WorkspaceError
from genworker.workspace.git import Author, GitError, commit_file, is_ignored, repository_of
from genworker.workspace.limits import FileLimits
from genworker.workspace.models import PersonaSpec, Tenant
from genworker.workspace.models.tenant import MIN_TRUST_LEVEL
from genworker.workspace.scan import Scope
from genworker.workspace.snapshot import Skill
from genworker.workspace.worker_loader import load_worker

__all__ = [
    "EDITABLE_PATTERN",
    "EditCheck",
    "EditConflict",
    "EditInvalid",
    "EditableFile",
    "GitOutcome",
    "PathRefused",
    "Saved",
    "WorkerFiles",
    "version_of",
]

log = logging.getLogger("genworker.workspace.editing")

_SEGMENT = r"[A-Za-z0-9_](?:\.?[A-Za-z0-9_-]){0,99}"  # no leading '.', no '..', short enough for any filesystem
_SKILL_FILE = rf"skills/(?:{_SEGMENT}/){{0,5}}{_SEGMENT}\.(?:md|txt|json|yaml|yml)"
EDITABLE_PATTERN = rf"^(?:PERSONA\.md|(?:duties|goals)/{_SEGMENT}\.md|{_SKILL_FILE})$"
EDITABLE_MAX_LENGTH = 512
_EDITABLE = re.compile(EDITABLE_PATTERN)
_MAX_FILES = 2000
_NEVER_COPIED = frozenset({"CHANNEL_CREDENTIALS.json"})
_NEW_FILE_MODE = 0o644
Kind = Literal["persona", "duty", "goal", "skill", "skill_file"]


def version_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class PathRefused(Exception):
    """Not an editable file of the worker; the message says why."""


class EditConflict(Exception):
    """The file changed on disk since the client opened it."""

    def __init__(self, rel: str, message: str, version: str | None) -> None:
        super().__init__(message)
        self.rel = rel
        self.version = version  # on disk now (None: no such file)


class EditInvalid(Exception):
    def __init__(self, check: EditCheck) -> None:
        super().__init__(f"{check.rel}: the edit does not load: " + "; ".join(str(i) for i in check.errors))
        self.check = check


@dataclass(frozen=True, slots=True)
class EditableFile:
    path: str  # in the worker's folder
    kind: Kind
    size: int
    version: str


@dataclass(frozen=True, slots=True)
class EditCheck:
    rel: str  # the edited file, from the workspace root (as issues name it)
    issues: tuple[Issue, ...]  # the edited file's errors and warnings, then errors it makes elsewhere

    @property
    def errors(self) -> tuple[Issue, ...]:
        return tuple(i for i in self.issues if i.severity == "error")

    @property
    def valid(self) -> bool:
        return not self.errors


@dataclass(frozen=True, slots=True)
class GitOutcome:
    repository: bool
    committed: bool
    sha: str | None = None
    reason: str = ""  # why nothing was committed


@dataclass(frozen=True, slots=True)
class Saved:
    rel: str
    version: str
    changed: bool
    check: EditCheck | None
    git: GitOutcome


@dataclass(frozen=True, slots=True)
class WorkerFiles:
    """The editable files of one worker of a loaded tenant."""

    root: Path  # the workspace, resolved
    limits: FileLimits
    tenant: Tenant
    inherited: Mapping[str, Skill]  # system and tenant skills, as the registry resolves them
    worker_id: str
    running_persona: PersonaSpec | None = None  # the version serving now, if any

    @property
    def folder(self) -> Path:
        return self.root / "tenants" / self.tenant.tenant_id / "workers" / self.worker_id

    def workspace_rel(self, path: str) -> str:
        return f"tenants/{self.tenant.tenant_id}/workers/{self.worker_id}/{path}"

    # -- which files ---------------------------------------------------------------

    def resolve(self, path: str) -> Path:
        """The file `path` names in the worker's folder; PathRefused unless it is editable."""
        if len(path) > EDITABLE_MAX_LENGTH or not _EDITABLE.fullmatch(path):
            raise PathRefused(
                f"{path!r} is not an editable file: PERSONA.md, duties/<name>.md, goals/<name>.md or a "
                "text file (.md .txt .json .yaml .yml) under skills/, named with letters, digits, '_', '-', '.'"
            )
        target = self.folder / path
        try:
            if target.is_symlink():
                raise PathRefused(f"{path!r} is a symbolic link: edit the file it points to")
            if not target.resolve().is_relative_to(self.folder.resolve()):
                raise PathRefused(f"{path!r} leaves the worker's folder (through a symbolic link)")
            if target.exists() and not target.is_file():
                raise PathRefused(f"{path!r} is not a regular file")
        except OSError as exc:  # a name too long for the filesystem, a symlink loop
            raise PathRefused(f"{path!r} cannot be used: {exc.strerror or exc}") from None
        return target

    def files(self) -> list[EditableFile]:
        found = []
        for path in self._candidates():
            rel = path.relative_to(self.folder).as_posix()
            try:
                self.resolve(rel)
                data = path.read_bytes()
            except (PathRefused, OSError):
                continue
            found.append(EditableFile(rel, _kind(rel), len(data), version_of(data)))
            if len(found) >= _MAX_FILES:
                break
        return found

    def _candidates(self) -> Iterator[Path]:
        folder = self.folder
        yield folder / "PERSONA.md"
        for sub in ("duties", "goals"):
            if (folder / sub).is_dir():
                yield from sorted((folder / sub).glob("*.md"))
        skills = folder / "skills"
        if skills.is_dir():
            for dirpath, dirs, names in os.walk(skills):  # does not follow symlinked folders
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                yield from (Path(dirpath) / n for n in sorted(names))

    def read(self, path: str) -> tuple[bytes, str] | None:
        """The file's bytes and version; None when it does not exist."""
        try:
            data = self.resolve(path).read_bytes()
        except FileNotFoundError:
            return None
        return data, version_of(data)

    # -- checking ------------------------------------------------------------------

    def check(self, path: str, content: str) -> EditCheck:
        """What the loader says about the worker with `content` in `path` (blocking: files and a load)."""
        self.resolve(path)
        rel = self.workspace_rel(path)
        before, seen = self._load(self.root)
        with tempfile.TemporaryDirectory(prefix="genworker-edit-") as tmp:
            shadow = Path(tmp).resolve()
            copied: set[Path] = set()
            edited = shadow / rel
            self._copy(seen, shadow, copied)
            edited.parent.mkdir(parents=True, exist_ok=True)
            edited.write_bytes(content.encode("utf-8"))
            copied.add(edited)
            for _ in range(3):  # the edit may make the loader read files it did not read before
                after, seen = self._load(shadow)
                if not self._copy(seen, shadow, copied):
                    break
            guard = self._stdio_guard(path, edited, rel) if path == "PERSONA.md" else []
        known = set(before)
        own = [i for i in after if i.file == rel]
        made = [i for i in after if i.file != rel and i.severity == "error" and i not in known]
        return EditCheck(rel, tuple(own + guard + made))

    def _load(self, root: Path) -> tuple[list[Issue], list[Path]]:
        """The worker's errors and warnings when loaded from `root`, and every path the load looked at."""
        scope = Scope(root, self.limits)
        folder = root / "tenants" / self.tenant.tenant_id / "workers" / self.worker_id
        with inputs.tracking() as seen:
            try:
                _, issues = load_worker(scope, self.tenant, folder, self.inherited)
            except WorkspaceError as exc:
                issues = list(exc.issues)
        return [i for i in issues if i.severity != "note"], [Path(p) for p in seen.stamps]

    def _copy(self, seen: Iterable[Path], shadow: Path, copied: set[Path]) -> bool:
        """Copy what the load looked at from the workspace into `shadow` (folders made, files copied);
        True when anything new was copied."""
        grew = False
        for looked in seen:
            rel = _relative(looked, (self.root, shadow))
            if rel is None or looked.name in _NEVER_COPIED:
                continue
            source, target = self.root / rel, shadow / rel
            if target in copied:
                continue
            copied.add(target)
            if source.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                grew = True
            elif source.is_file():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target)
                grew = True
        return grew

    def _stdio_guard(self, path: str, edited: Path, rel: str) -> list[Issue]:
        if self.tenant.trust_level >= MIN_TRUST_LEVEL:
            return []
        try:
            doc = read_markdown(edited, rel, limit=self.limits.persona)
            persona, _ = validate(PersonaSpec, doc)
        except WorkspaceError:
            return []  # the load reports it
        allowed = _stdio(self.running_persona) | _stdio(self._persona_on_disk(path))
        added = sorted(name for name, *_ in _stdio(persona) - allowed)
        if not added:
            return []
        message = (
            f"stdio MCP servers {added} run a command on the server: tenant {self.tenant.tenant_id!r} has trust "
            f"level {self.tenant.trust_level} (it needs {MIN_TRUST_LEVEL}), so only the workspace's files, "
            "not the console, may add or change them"
        )
        return [Issue("error", rel, message, "mcp_servers", doc.line_of(["mcp_servers"]))]

    def _persona_on_disk(self, path: str) -> PersonaSpec | None:
        try:
            doc = read_markdown(self.folder / path, self.workspace_rel(path), limit=self.limits.persona)
            return validate(PersonaSpec, doc)[0]
        except WorkspaceError:
            return None

    # -- saving --------------------------------------------------------------------

    def save(self, path: str, content: str, base_version: str | None, author: Author, message: str) -> Saved:
        """Write `content` to `path` if the file is still at `base_version` (None: it must not exist yet)
        and the worker loads with it; commit it where the workspace is a git repository. Blocking.

        EditConflict when the file changed since, EditInvalid when the edit does not load, GitError when
        git refused the commit (the file is then put back as it was)."""
        target = self.resolve(path)
        rel = self.workspace_rel(path)
        data = content.encode("utf-8")
        with file_lock(self.root / "runtime" / "locks" / "console-edit.lock"):
            current = self.read(path)
            on_disk = None if current is None else current[1]
            if on_disk != base_version:
                raise EditConflict(rel, _conflict(rel, base_version, on_disk), on_disk)
            if current is not None and current[0] == data:
                return Saved(
                    rel, on_disk or "", False, None, GitOutcome(False, False, reason="unchanged: nothing to save")
                )
            check = self.check(path, content)
            if not check.valid:
                raise EditInvalid(check)
            mode = _NEW_FILE_MODE if current is None else stat.S_IMODE(target.stat().st_mode)
            write_atomic(target, data, mode=mode)
            try:
                git = self._commit(target, author, message)
            except GitError:
                _put_back(target, current, mode)
                raise
        log.info("[Workspace] %s saved from the console by %s (%s)", rel, author.name, git.sha or git.reason)
        return Saved(rel, version_of(data), True, check, git)

    def _commit(self, target: Path, author: Author, message: str) -> GitOutcome:
        top = repository_of(self.folder)
        if top is None:
            return GitOutcome(False, False, reason="the workspace is not a git repository")
        in_repo = target.resolve().relative_to(top).as_posix()
        if is_ignored(top, in_repo):
            return GitOutcome(True, False, reason=f"git ignores {in_repo} (.gitignore)")
        return GitOutcome(True, True, sha=commit_file(top, in_repo, author, message))


def _put_back(target: Path, before: tuple[bytes, str] | None, mode: int) -> None:
    if before is None:
        remove_file(target)
    else:
        write_atomic(target, before[0], mode=mode)


def _kind(path: str) -> Kind:
    if path == "PERSONA.md":
        return "persona"
    if path.startswith("duties/"):
        return "duty"
    if path.startswith("goals/"):
        return "goal"
    return "skill" if path.endswith("/SKILL.md") else "skill_file"


def _relative(path: Path, roots: tuple[Path, ...]) -> Path | None:
    for root in roots:
        if path.is_relative_to(root):
            return path.relative_to(root)
    return None


def _conflict(rel: str, base: str | None, on_disk: str | None) -> str:
    if base is None:
        return f"{rel} was created on disk since you opened the editor"
    if on_disk is None:
        return f"{rel} was deleted on disk since you opened it"
    return f"{rel} changed on disk since you opened it"


_Stdio = tuple[str, str | None, tuple[str, ...], str | None, tuple[tuple[str, str], ...]]


def _stdio(persona: PersonaSpec | None) -> set[_Stdio]:
    if persona is None:
        return set()
    return {
        (s.name, s.command, s.args, s.cwd, tuple(sorted((k, v.get_secret_value()) for k, v in s.env.items())))
        for s in persona.mcp_servers
        if s.transport == "stdio" and s.enabled
    }
