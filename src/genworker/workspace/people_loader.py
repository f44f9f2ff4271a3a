"""Loading a worker's rules (`rules/directives`, `rules/learned`) and contacts (inline in
PERSONA.md, `contacts/configured`, `contacts/discovered`, `contacts/index.jsonl`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from genworker.ids import is_inside
from genworker.workspace.documents import Document, read_markdown, read_text, validate
from genworker.workspace.errors import Issue, WorkspaceError
from genworker.workspace.limits import SizeLimit
from genworker.workspace.models import Contact, PersonaSpec, Rule
from genworker.workspace.models.persona import ContactSettings
from genworker.workspace.scan import Collector, Scope, load_by_id

__all__ = ["load_contacts", "load_rules"]


def load_rules(scope: Scope, folder: Path, issues: Collector, files: dict[str, str]) -> list[Rule]:
    rules: list[Rule] = []
    for kind, sub in (("directive", "directives"), ("learned", "learned")):

        def load(doc: Document, kind: str = kind) -> tuple[Rule, list[Issue]]:
            stem = Path(doc.rel).stem
            return validate(Rule, doc, {"rule_id": stem, **doc.data, "kind": kind, "text": doc.body})

        for path in scope.entries(folder / sub, issues, suffix=".md"):
            rel = scope.rel(path)

            def one(path: Path = path, rel: str = rel, load: Any = load) -> tuple[Rule, list[Issue]]:
                doc = read_markdown(path, rel, limit=scope.limits.rule, require_front_matter=False)
                return load(doc)  # type: ignore[no-any-return]

            rule = issues.attempt(one)
            if rule is None:
                continue
            key = f"rule:{rule.rule_id}"
            if key in files:
                issues.error(rel, f"duplicate rule_id {rule.rule_id!r}, already defined in {files[key]}", "rule_id")
                continue
            files[key] = rel
            rules.append(rule)
    return sorted(rules, key=lambda r: (-r.priority, r.rule_id))


def load_contacts(
    scope: Scope, folder: Path, persona: PersonaSpec | None, issues: Collector, files: dict[str, str]
) -> dict[str, Contact]:
    """`persona` None: PERSONA.md has errors; the contact files are still checked (default settings)."""
    contacts = {c.person_id: c for c in persona.contacts} if persona is not None else {}
    for person_id in contacts:
        files[f"person:{person_id}"] = scope.rel(folder / "PERSONA.md")
    settings = persona.contact_settings if persona is not None else ContactSettings()
    root = folder / settings.workspace_root
    for sub in (settings.configured_dir, settings.discovered_dir):
        contacts.update(
            load_by_id(
                scope,
                root / sub,
                issues,
                files,
                "person",
                lambda doc: validate(Contact, doc, {"notes": doc.body, **doc.data}),
                limit=scope.limits.contact,
                duplicate="error",
            )
        )
    index = root / settings.index_file
    if index.is_file():
        if is_inside(scope.root, index):
            _check_index(scope.rel(index), index, scope.limits.contact_index, issues)
        else:
            issues.error(scope.rel(index), "refused: symlink leaves the workspace")
    return contacts


def _check_index(rel: str, path: Path, limit: SizeLimit, issues: Collector) -> None:
    try:
        text = read_text(path, rel, limit)
    except WorkspaceError as exc:
        issues.issues.extend(exc.issues)
        return
    for number, line in enumerate(text.split("\n"), start=1):  # not splitlines(): U+2028 may be in a name
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            issues.error(rel, f"invalid JSON line: {exc.msg}", line=number)
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("person_id"), str):
            issues.error(rel, "each line must be an object with a string person_id", "person_id", number)
