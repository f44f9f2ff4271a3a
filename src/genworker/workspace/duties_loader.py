"""Loading a worker's `duties/*.md`, with the shared defaults of `duties/_defaults.md`.

Only `duties/*.md` define duties: sub-folders (upstream genworker keeps `duties/{id}/execution_log.jsonl`
there) are not read. What loads but deserves a word (`duty_warnings`: posture values in
`execution_policy`, numeric cron weekdays, an unknown status...) is a warning at its line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from genworker.workspace import inputs
from genworker.workspace.documents import Document, read_markdown, validate
from genworker.workspace.errors import Issue, WorkspaceError
from genworker.workspace.models import DutySpec
from genworker.workspace.models.duty import DEFAULTABLE_FIELDS, apply_defaults, apply_defaults_deep, duty_warnings
from genworker.workspace.scan import Collector, Scope, load_by_id

__all__ = ["DEFAULTS_FILE", "load_duties"]

DEFAULTS_FILE = "_defaults.md"


def load_duties(scope: Scope, folder: Path, issues: Collector, files: dict[str, str]) -> dict[str, DutySpec]:
    shared: dict[str, Any] = {}
    defaults_path = folder / DEFAULTS_FILE
    if inputs.is_file(defaults_path):

        def read_defaults() -> tuple[Document, list[Issue]]:
            scope.check(defaults_path)
            return read_markdown(defaults_path, scope.rel(defaults_path), limit=scope.limits.duty), []

        doc = issues.attempt(read_defaults)
        if doc is not None:
            shared = dict(doc.data)
            for key in shared.keys() - DEFAULTABLE_FIELDS:
                issues.warn(doc.rel, "not a field duties can default (ignored)", key, doc.line_of([key]))
            issues.issues.extend(_warnings(doc))

    def load(doc: Document) -> tuple[DutySpec, list[Issue]]:
        own = dict(doc.data)
        local = own.get("duty_defaults") or {}
        if not isinstance(local, dict):
            raise WorkspaceError.single(doc.rel, "must be a mapping", "duty_defaults", doc.line_of(["duty_defaults"]))
        ignored = [
            Issue(
                "warning",
                doc.rel,
                "not a field duties can default (ignored)",
                f"duty_defaults.{key}",
                doc.line_of(["duty_defaults", key]),
            )
            for key in sorted(local.keys() - DEFAULTABLE_FIELDS)
        ]
        defaults = apply_defaults_deep(local, shared)
        data = apply_defaults(own, defaults)
        data["duty_defaults"] = defaults
        if doc.body:
            data["action"] = doc.body
        duty, warnings = validate(DutySpec, doc, data)
        return duty, ignored + warnings + _warnings(doc)

    return load_by_id(scope, folder, issues, files, "duty", load, skip={DEFAULTS_FILE}, limit=scope.limits.duty)


def _warnings(doc: Document) -> list[Issue]:
    return [
        Issue("warning", doc.rel, message, _dotted(loc), doc.line_of(list(loc)))
        for loc, message in duty_warnings(doc.data)
    ]


def _dotted(loc: tuple[str | int, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else p) for i, p in enumerate(loc))
