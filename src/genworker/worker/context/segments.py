"""The text of each segment, cut to its quota: identity, constraints and rules, contacts,
memory (the system prompt, in that order) and the task; and the provenance facts the model is told.

List segments keep whole items in order and count what did not fit; identity and task are
cut as text, keeping the identity's head and the task's head and tail.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from genworker.memory.models import MemoryItem
from genworker.worker.context.models import ContextSegment, SegmentName
from genworker.worker.context.tokens import count_tokens, truncate_tokens
from genworker.worker.task import TaskProvenance
from genworker.workspace.models import Contact, Rule
from genworker.workspace.snapshot import Worker

__all__ = [
    "MAX_LEARNED_RULES",
    "contacts_segment",
    "identity_segment",
    "memory_segment",
    "ordered_rules",
    "provenance_items",
    "rules_segment",
    "task_segment",
]

# What the model is told about a task's origin, in the system prompt: the kind of source and what
# links the task to the worker's duties, goals and processes. Who or what sent it (`source_id`: an API
# key id, an IM sender, an inbox item), the governance verdict, snapshot refs and keys are for audit.
_PROVENANCE_FIELDS = (
    "source_type",
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
    who = f"You are {identity.display_name}"
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


MAX_LEARNED_RULES = 10  # learned rules in one prompt, the most confident first (as upstream)


def ordered_rules(rules: Iterable[Rule], skill_id: str | None = None) -> list[Rule]:
    """Active rules: every directive, by priority (highest first), then id; then at most
    MAX_LEARNED_RULES learned rules that apply to the run's skill (an empty scope applies to
    every skill; no skill: all apply), the most confident first, then by priority and id."""
    active = [r for r in rules if r.status == "active"]
    directives = sorted((r for r in active if r.kind == "directive"), key=lambda r: (-r.priority, r.rule_id))
    learned = sorted(
        (r for r in active if r.kind == "learned" and (not r.scope or skill_id is None or skill_id in r.scope)),
        key=lambda r: (-r.confidence, -r.priority, r.rule_id),
    )
    return directives + learned[:MAX_LEARNED_RULES]


def _rule_text(rule: Rule) -> str:
    lines = rule.text.strip().splitlines()
    if lines and lines[0].startswith("#"):  # upstream writes the rule as the file's heading
        lines[0] = lines[0].lstrip("#").strip()
    return "\n".join(lines).strip()


def _rule_line(rule: Rule) -> str:
    body = _rule_text(rule) or rule.title
    text = f"{rule.title}: {body}" if rule.title and body != rule.title else body
    if rule.kind == "learned":
        return _bullet(f"(learned) [{rule.category}/{rule.confidence:.2f}] {text}")
    return _bullet(text)


def rules_segment(worker: Worker, quota: int, skill_id: str | None = None) -> ContextSegment:
    items = [_bullet(c) for c in worker.persona.constraints if c.strip()]
    items += [_rule_line(r) for r in ordered_rules(worker.rules, skill_id) if (r.text.strip() or r.title)]
    return _fill(SegmentName.CONSTRAINTS_RULES, "## Constraints and rules (always follow these)", items, quota)


def _contact_line(contact: Contact) -> str:
    about = ", ".join(p for p in (contact.role, contact.organization) if p)
    line = f"{contact.display_name} ({about})" if about else contact.display_name
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


# A person's message speaks for itself: its source alone tells the model nothing.
_CONVERSATIONAL = frozenset({"chat", "task", "openai"})


def _fact(value: object) -> str:
    return value.isoformat(timespec="seconds") if isinstance(value, datetime) else str(value)


def provenance_items(provenance: TaskProvenance | Mapping[str, object] | None) -> dict[str, str]:
    """The provenance facts the model is told (see `_PROVENANCE_FIELDS`), in that order."""
    if provenance is None:
        return {}
    get = provenance.get if isinstance(provenance, Mapping) else lambda f: getattr(provenance, f)
    facts = {f: _fact(v) for f in _PROVENANCE_FIELDS if (v := get(f)) not in (None, "", (), [])}
    if facts.keys() <= {"source_type"} and facts.get("source_type", "chat") in _CONVERSATIONAL:
        return {}
    return facts


def task_segment(task_text: str, quota: int) -> ContextSegment:
    """The task as given (the user's message, a duty's action): never anything of ours added."""
    body = truncate_tokens(task_text, quota, keep="middle", what="task text")
    return ContextSegment(SegmentName.TASK, body, quota, truncated=body != task_text)
