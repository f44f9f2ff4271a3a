"""Problems found while loading a workspace: each names its file, field path and line."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

__all__ = ["Issue", "MCPConfigError", "Severity", "WorkspaceError"]

Severity = Literal["error", "warning", "note"]
"""A "note" says how a file was read (an upstream spelling mapped, a field ignored on purpose):
shown by `genworker check --explain`, never counted as a problem."""


@dataclass(frozen=True, slots=True)
class Issue:
    severity: Severity
    file: str
    message: str
    field: str = ""
    line: int | None = None

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        field = f" {self.field}:" if self.field else ""
        return f"{where}: {self.severity}:{field} {self.message}"

    def as_dict(self) -> dict[str, object]:
        return {
            "severity": self.severity,
            "file": self.file,
            "field": self.field,
            "line": self.line,
            "message": self.message,
        }


class WorkspaceError(Exception):
    """A workspace file is invalid. Carries every issue found in it."""

    def __init__(self, issues: Iterable[Issue]) -> None:
        self.issues = tuple(issues)
        super().__init__("; ".join(str(i) for i in self.issues))

    @classmethod
    def single(cls, file: str, message: str, field: str = "", line: int | None = None) -> WorkspaceError:
        return cls([Issue("error", file, message, field, line)])


class MCPConfigError(ValueError):
    """An `mcp_servers` entry is invalid. Names the file, the entry and each field at fault."""

    def __init__(self, source: str, issues: list[str]) -> None:
        self.source = source
        self.issues = issues
        super().__init__(f"{source}: invalid mcp_servers: " + "; ".join(issues))
