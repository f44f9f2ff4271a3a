"""Listing workspace folders safely and collecting issues while loading."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from genworker.ids import InvalidIdError, is_inside, validate_id
from genworker.workspace.errors import Issue, WorkspaceError

__all__ = ["Collector", "Scope"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Scope:
    """The workspace root every loaded path must stay inside, and how to name files."""

    root: Path

    def rel(self, path: Path) -> str:
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError:
            return path.as_posix()

    def check(self, path: Path) -> None:
        """Refuse a fixed-name file (PERSONA.md, TENANT.json ...) that resolves outside the root."""
        if not is_inside(self.root, path):
            raise WorkspaceError.single(self.rel(path), "refused: symlink leaves the workspace")

    def entries(
        self, folder: Path, issues: Collector, *, suffix: str = "", dirs: bool = False, id_kind: str = ""
    ) -> Iterator[Path]:
        """Children of `folder` (sorted); symlinks that resolve outside the root are refused.

        With `id_kind`, a child whose name is not a valid id is reported and skipped.
        """
        if not folder.is_dir():
            return
        for path in sorted(folder.iterdir()):
            if path.name.startswith("."):
                continue
            if path.is_dir() if dirs else not path.is_dir() and path.name.endswith(suffix):
                if not is_inside(self.root, path):
                    issues.error(self.rel(path), "refused: symlink leaves the workspace")
                    continue
                if id_kind:
                    try:
                        validate_id(path.name, id_kind)
                    except InvalidIdError as exc:
                        issues.error(self.rel(path), f"refused: {exc}")
                        continue
                yield path


@dataclass(slots=True)
class Collector:
    issues: list[Issue] = field(default_factory=list)

    def error(self, file: str, message: str, field: str = "", line: int | None = None) -> None:
        self.issues.append(Issue("error", file, message, field, line))

    def warn(self, file: str, message: str, field: str = "", line: int | None = None) -> None:
        self.issues.append(Issue("warning", file, message, field, line))

    def attempt(self, load: Callable[[], tuple[T, list[Issue]]]) -> T | None:
        """Run one file's load; keep its warnings, turn its WorkspaceError into issues."""
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
