"""The text of each segment, cut to its quota: identity, constraints and rules, contacts,
memory (the system prompt, in that order) and the task with its provenance.

List segments keep whole items in order and count what did not fit; identity and task are
cut as text, keeping the identity's head and the task's head and tail.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from genworker.worker.context.models import ContextSegment, MemoryItem, SegmentName
from genworker.worker.context.tokens import count_tokens, truncate_tokens
from genworker.worker.task import TaskProvenance
from genworker.workspace.models import Contact, Rule
from genworker.workspace.snapshot import Worker

__all__ = [
    "contacts_segment",
    "identity_segment",
    "memory_segment",
    "ordered_rules",
    "provenance_items",
    "rules_segment",
    "task_segment",
]

# What the model is told about a task's origin; snapshot refs and keys are for audit, not the model.
_PROVENANCE_FIELDS = (
    "source_type",
    "source_id",
    "goal_id",
    "duty_id",
    "trigger_id",
    "process_id",
    "step_id",
    "contract_version",
    "scheduled_for",
)


def _bullet(text: str) -> str:
    return "- " + text.strip().replace("\n", "\n  ")


def _fill(name: SegmentName, header: str, items: Iterable[str], quota: int, omitted: int = 0) -> ContextSegment:
    """Whole items in order while they fit; an item too large for what is left is skipped."""
    used = count_tokens(header) + 1
    kept: list[str] = []
    for item in items:
        cost = count_tokens(item) + 1
        if used + cost > quota:
            omitted += 1
            continue
        kept.append(item)
        used += cost
    text = "\n".join((header, *kept)) if kept else ""
    while kept and count_tokens(text) > quota:  # token boundaries merge across lines, rarely
        kept.pop()
        omitted += 1
        text = "\n".join((header, *kept)) if kept else ""
    return ContextSegment(name, text, quota, items=len(kept), omitted=omitted)


def identity_segment(worker: Worker, quota: int) -> ContextSegment:
    identity = worker.persona.identity
    who = f"You are {identity.name}"
    if identity.role:
        who += f", {identity.role}"
    if identity.department:
        who += f" in {identity.department}"
    lines = ["## Identity", who + "."]
    if identity.reports_to:
        lines.append(f"You report to {identity.reports_to}.")
    if identity.background:
        lines.append(f"Background: {identity.background.strip()}")
    personality = identity.personality
    if personality.traits:
        lines.append("Personality: " + ", ".join(personality.traits))
    if personality.communication_style.strip():
        lines.append(f"Communication: {personality.communication_style.strip()}")
    if personality.decision_style.strip():
        lines.append(f"Decisions: {personality.decision_style.strip()}")
    lines.append(f"Working mode: {worker.persona.mode.value.replace('_', ' ')}")
    if identity.principles:
        lines.append("Principles:")
        lines.extend(_bullet(p) for p in identity.principles)
    if worker.instructions.strip():
        lines.extend(("", worker.instructions.strip()))
    text = "\n".join(lines)
    cut = truncate_tokens(text, quota, what="persona")
    return ContextSegment(SegmentName.SYSTEM_IDENTITY, cut, quota, truncated=cut != text)


def ordered_rules(rules: Iterable[Rule]) -> list[Rule]:
    """Active rules: directives before learned rules, each by priority (highest first), then id."""
    active = [r for r in rules if r.status == "active"]
    return sorted(active, key=lambda r: (r.kind != "directive", -r.priority, r.rule_id))


def _rule_line(rule: Rule) -> str:
    body = rule.text.strip() or rule.title
    text = f"{rule.title}: {body}" if rule.title and body != rule.title else body
    return _bullet(f"(learned) {text}" if rule.kind == "learned" else text)


def rules_segment(worker: Worker, quota: int) -> ContextSegment:
    items = [_bullet(c) for c in worker.persona.constraints if c.strip()]
    items += [_rule_line(r) for r in ordered_rules(worker.rules) if (r.text.strip() or r.title)]
    return _fill(SegmentName.CONSTRAINTS_RULES, "## Constraints and rules (always follow these)", items, quota)


def _contact_line(contact: Contact) -> str:
    about = ", ".join(p for p in (contact.role, contact.organization) if p)
    line = f"{contact.name} ({about})" if about else contact.name
    line += f" [{contact.person_id}]"
    if contact.identities:
        line += "; " + ", ".join(f"{i.channel}: {i.handle}" for i in contact.identities)
    notes = contact.notes.strip().splitlines()
    if notes:
        line += f"; notes: {notes[0][:200]}"
    return _bullet(line)


def contacts_segment(worker: Worker, quota: int) -> ContextSegment:
    limit = worker.persona.contact_settings.context_limit
    contacts = list(worker.contacts.values())
    items = [_contact_line(c) for c in contacts[:limit]]
    return _fill(SegmentName.CONTACTS, "## Contacts", items, quota, omitted=max(len(contacts) - limit, 0))


def memory_segment(memory: Sequence[str | MemoryItem], quota: int) -> ContextSegment:
    items: list[str] = []
    for entry in memory:
        item = MemoryItem(entry) if isinstance(entry, str) else entry
        if item.text.strip():
            items.append(_bullet(f"{item.text.strip()} ({item.source})" if item.source else item.text))
    return _fill(SegmentName.MEMORY, "## Relevant memory", items, quota)


def provenance_items(provenance: TaskProvenance | Mapping[str, object] | None) -> dict[str, str]:
    if provenance is None:
        return {}
    if isinstance(provenance, TaskProvenance):
        values: dict[str, object] = {f: getattr(provenance, f) for f in _PROVENANCE_FIELDS}
        verdict = provenance.governance_decision
        if verdict is not None:
            values["governance"] = " ".join(
                f"{f.name}={getattr(verdict, f.name)}" for f in dataclasses.fields(verdict) if getattr(verdict, f.name)
            )
    else:
        values = dict(provenance)
    return {k: str(v) for k, v in values.items() if v not in (None, "", (), [])}


def task_segment(task_text: str, provenance: Mapping[str, str], quota: int) -> ContextSegment:
    footer = "Task provenance: " + ", ".join(f"{k}={v}" for k, v in provenance.items()) if provenance else ""
    room = quota - (count_tokens(footer) + 2 if footer else 0)
    body = truncate_tokens(task_text, max(room, 0), keep="middle", what="task text")
    text = f"{body}\n\n{footer}" if footer else body
    return ContextSegment(SegmentName.TASK, text, quota, truncated=body != task_text)
