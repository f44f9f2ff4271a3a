"""Listing workspace folders safely and collecting issues while loading."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from genworker.ids import InvalidIdError, validate_id
from genworker.workspace import inputs
from genworker.workspace.documents import read_markdown
from genworker.workspace.errors import Issue, WorkspaceError
from genworker.workspace.limits import DEFAULT_LIMITS, FileLimits, SizeLimit

__all__ = ["Collector", "Scope", "load_by_id"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Scope:
    """The workspace root every loaded path must stay inside, how to name files, and how large
    each kind of file may be.

    Resolved folders are cached for the life of the Scope (one load operation): a path's
    real location is its parent's plus its name unless it is itself a symlink, so checking
    costs one lstat per folder instead of a full resolve per file.
    """

    root: Path
    limits: FileLimits = DEFAULT_LIMITS
    _real: dict[Path, Path | None] = field(default_factory=dict, compare=False, repr=False)

    def real(self, path: Path, *, symlink: bool | None = None) -> Path | None:
        """Where `path` really is (None: unresolvable, e.g. a symlink loop)."""
        if path in self._real:
            return self._real[path]
        if path == self.root or not path.is_relative_to(self.root):
            real: Path | None = _resolve(path)
        elif path.is_symlink() if symlink is None else symlink:
            real = _resolve(path)
        else:
            parent = self.real(path.parent)
            real = None if parent is None else parent / path.name
        self._real[path] = real
        return real

    def inside(self, path: Path, *, symlink: bool | None = None) -> bool:
        real, root = self.real(path, symlink=symlink), self.real(self.root)
        return real is not None and root is not None and real.is_relative_to(root)

    def rel(self, path: Path) -> str:
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError:
            return path.as_posix()

    def check(self, path: Path) -> None:
        """Refuse a fixed-name file (PERSONA.md, TENANT.json ...) that resolves outside the root."""
        if not self.inside(path):
            raise WorkspaceError.single(self.rel(path), "refused: symlink leaves the workspace")

    def entries(
        self, folder: Path, issues: Collector, *, suffix: str = "", dirs: bool = False, id_kind: str = ""
    ) -> Iterator[Path]:
        """Children of `folder` (sorted); symlinks that resolve outside the root are refused.

        With `id_kind`, a child whose name is not a valid id is reported and skipped.
        """
        if not inputs.is_dir(folder):
            return
        if not self.inside(folder):
            issues.error(self.rel(folder), "refused: symlink leaves the workspace")
            return
        with os.scandir(folder) as found:
            children = sorted((e for e in found if not e.name.startswith(".")), key=lambda e: e.name)
        for entry in children:
            path = Path(entry.path)
            try:
                is_dir = entry.is_dir()
            except OSError:  # a symlink loop
                issues.error(self.rel(path), "refused: symlink leaves the workspace")
                continue
            if is_dir if dirs else not is_dir and entry.name.endswith(suffix):
                if not self.inside(path, symlink=entry.is_symlink()):
                    issues.error(self.rel(path), "refused: symlink leaves the workspace")
                    continue
                if id_kind:
                    try:
                        validate_id(path.name, id_kind)
                    except InvalidIdError as exc:
                        issues.error(self.rel(path), f"refused: {exc}")
                        continue
                yield path


def _resolve(path: Path) -> Path | None:
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # RuntimeError: symlink loop (Python < 3.13)
        return None


@dataclass(slots=True)
class Collector:
    issues: list[Issue] = field(default_factory=list)

    def error(self, file: str, message: str, field: str = "", line: int | None = None) -> None:
        self.issues.append(Issue("error", file, message, field, line))

    def warn(self, file: str, message: str, field: str = "", line: int | None = None) -> None:
        self.issues.append(Issue("warning", file, message, field, line))

    def note(self, file: str, message: str, field: str = "", line: int | None = None) -> None:
        self.issues.append(Issue("note", file, message, field, line))

    def attempt(self, load: Callable[[], tuple[T, list[Issue]]]) -> T | None:
        """Run one file's load; keep its warnings and notes, turn its WorkspaceError into issues."""
        try:
            value, warnings = load()
        except WorkspaceError as exc:
            self.issues.extend(exc.issues)
            return None
        self.issues.extend(warnings)
        return value

    @property
    def errors(self) -> list[Issue]:
        return [i for i in self.issues if i.severity == "error"]

    @property
    def warnings(self) -> list[Issue]:
        return [i for i in self.issues if i.severity == "warning"]

    @property
    def notes(self) -> list[Issue]:
        return [i for i in self.issues if i.severity == "note"]


def load_by_id(
    scope: Scope,
    folder: Path,
    issues: Collector,
    files: dict[str, str],
    kind: str,
    load: Any,
    skip: frozenset[str] | set[str] = frozenset(),
    *,
    limit: SizeLimit,
    duplicate: Literal["warning", "error"] = "warning",
) -> dict[str, Any]:
    """Load every `*.md` of `folder` with `load(doc)`.

    An id already defined keeps its first definition (files in name order, as upstream loads
    them); the later file is reported as a warning, or as an error with `duplicate="error"`.
    """
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
            message = f"duplicate {kind}_id {obj_id!r}, already defined in {files[key]}"
            if duplicate == "error":
                issues.error(rel, message, f"{kind}_id")
            else:
                issues.warn(rel, f"{message} (this file is ignored)", f"{kind}_id")
            continue
        files[key] = rel
        loaded[obj_id] = obj
    return loaded
