"""Loading a worker's rules (`rules/directives`, `rules/learned`) and contacts (inline in
PERSONA.md, `contacts/configured`, `contacts/discovered`, `contacts/index.jsonl`)."""

from __future__ import annotations

import json
from pathlib import Path

from genworker.ids import is_inside
from genworker.workspace import inputs
from genworker.workspace.documents import Document, read_markdown, read_text, validate
from genworker.workspace.errors import Issue, WorkspaceError
from genworker.workspace.limits import SizeLimit
from genworker.workspace.models import Contact, PersonaSpec, Rule
from genworker.workspace.models.persona import ContactSettings
from genworker.workspace.models.rule import RuleKind
from genworker.workspace.scan import Collector, Scope

__all__ = ["load_contacts", "load_rules"]


def load_rules(scope: Scope, folder: Path, issues: Collector, files: dict[str, str]) -> list[Rule]:
    rules: list[Rule] = []
    kinds: tuple[tuple[RuleKind, str], ...] = (("directive", "directives"), ("learned", "learned"))
    for kind, sub in kinds:
        for path in scope.entries(folder / sub, issues, suffix=".md"):
            rel = scope.rel(path)

            def one(path: Path = path, rel: str = rel, kind: RuleKind = kind) -> tuple[Rule, list[Issue]]:
                doc = read_markdown(path, rel, limit=scope.limits.rule, require_front_matter=False)
                return _rule(doc, path.stem, kind)

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


def _rule(doc: Document, stem: str, folder_kind: RuleKind) -> tuple[Rule, list[Issue]]:
    """Upstream's `type` decides the kind when it is set (its writer always sets it); else the folder."""
    data = {"rule_id": stem, **doc.data, "text": doc.body}
    declared = data.pop("type", None)
    kind, found = folder_kind, []
    if declared in ("directive", "learned"):
        kind = declared
        if declared != folder_kind:
            message = f"type {declared!r} in the folder of {folder_kind} rules: the type decides (a {declared} rule)"
            found.append(Issue("warning", doc.rel, message, "type", doc.line_of(["type"])))
    elif declared is not None:
        message = f"unknown type {declared!r} (directive or learned): the folder decides (a {folder_kind} rule)"
        found.append(Issue("warning", doc.rel, message, "type", doc.line_of(["type"])))
    rule, issues = validate(Rule, doc, {**data, "kind": kind})
    return rule, found + issues


def load_contacts(
    scope: Scope, folder: Path, persona: PersonaSpec | None, issues: Collector, files: dict[str, str]
) -> dict[str, Contact]:
    """`persona` None: PERSONA.md has errors; the contact files are still checked (default settings)."""
    contacts = {c.person_id: c for c in persona.contacts} if persona is not None else {}
    for person_id in contacts:
        files[f"person:{person_id}"] = scope.rel(folder / "PERSONA.md")
    settings = persona.contact_settings if persona is not None else ContactSettings()
    root = folder / settings.workspace_root
    inline = frozenset(contacts)
    contacts.update(_contact_files(scope, root / settings.configured_dir, issues, files, inline))
    contacts.update(_contact_files(scope, root / settings.discovered_dir, issues, files, frozenset()))
    index = root / settings.index_file
    if inputs.is_file(index):
        if is_inside(scope.root, index):
            _check_index(scope.rel(index), index, scope.limits.contact_index, issues)
        else:
            issues.error(scope.rel(index), "refused: symlink leaves the workspace")
    return contacts


def _contact_files(
    scope: Scope, folder: Path, issues: Collector, files: dict[str, str], inline: frozenset[str]
) -> dict[str, Contact]:
    """Contact files; `person_id` defaults to the file name. A file with the id of a PERSONA.md
    contact is upstream's copy of it (rewritten at every start there): PERSONA.md is used."""
    loaded: dict[str, Contact] = {}
    for path in scope.entries(folder, issues, suffix=".md"):
        rel = scope.rel(path)

        def one(path: Path = path, rel: str = rel) -> tuple[Contact, list[Issue]]:
            doc = read_markdown(path, rel, limit=scope.limits.contact)
            return validate(Contact, doc, {"person_id": path.stem, "notes": doc.body, **doc.data})

        contact = issues.attempt(one)
        if contact is None:
            continue
        key = f"person:{contact.person_id}"
        if contact.person_id in inline:
            issues.note(rel, "ignored: the same contact is in PERSONA.md, which is used", "person_id")
            continue
        if key in files:
            issues.error(
                rel, f"duplicate person_id {contact.person_id!r}, already defined in {files[key]}", "person_id"
            )
            continue
        files[key] = rel
        loaded[contact.person_id] = contact
    return loaded


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
