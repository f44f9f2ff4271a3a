"""Rules and contacts written the way upstream genworker writes them (issue #22), and how learned
rules reach the prompt: filtered by the run's skill, the most confident ten, tagged."""

from __future__ import annotations

import datetime as dt

import pytest
from pydantic import ValidationError

from genworker.worker.context.segments import MAX_LEARNED_RULES, ordered_rules, rules_segment
from genworker.workspace.models import Contact, PersonaSpec, Rule
from genworker.workspace.models.contact import ContactIdentity
from genworker.workspace.snapshot import Worker

UPSTREAM_LEARNED = """\
---
rule_id: rule-1a2b3c4d
type: learned
category: strategy
status: active
confidence: 0.55
scope:
  skills:
  - data-analysis
source:
  type: self_reflection
  evidence: Partition filters made the query finish.
  created_at: '2026-04-21T04:44:48+00:00'
last_applied: '2026-04-25T08:31:00+00:00'
apply_count: 3
---
# Filter large fact tables by partition date before any join.

Full scans time out.
"""


def test_upstream_learned_rule_front_matter(ws) -> None:
    ws.persona()
    ws.write("tenants/acme/workers/w/rules/learned/rule-1a2b3c4d.md", UPSTREAM_LEARNED)
    worker, warnings = ws.load_worker()
    assert warnings == []
    (rule,) = worker.rules
    assert (rule.kind, rule.category, rule.status, rule.confidence, rule.apply_count) == (
        "learned",
        "strategy",
        "active",
        0.55,
        3,
    )
    assert rule.scope == ("data-analysis",)
    assert (rule.source.type, rule.source.evidence) == ("self_reflection", "Partition filters made the query finish.")
    assert rule.created_at == dt.datetime(2026, 4, 21, 4, 44, 48, tzinfo=dt.UTC)  # from source.created_at
    assert rule.last_applied == dt.datetime(2026, 4, 25, 8, 31, tzinfo=dt.UTC)
    (scope_note,) = [n for n in worker.notes if n.field == "scope"]
    assert (scope_note.message, scope_note.line) == ("mapped: {'skills': ['data-analysis']} -> ['data-analysis']", 8)


@pytest.mark.parametrize("status", ["suspended", "archived", "crystallized"])
def test_upstream_statuses_load_and_are_not_applied(status: str) -> None:
    rule = Rule.model_validate({"rule_id": "r", "kind": "learned", "status": status, "text": "x"})
    assert rule.status == status
    assert ordered_rules([rule]) == []


def test_defaults_confidence_per_kind_scope_and_source() -> None:
    learned = Rule.model_validate({"rule_id": "r", "kind": "learned", "scope": {}, "source": "feedback"})
    directive = Rule.model_validate({"rule_id": "d", "kind": "directive"})
    assert (learned.confidence, directive.confidence) == (0.5, 1.0)
    assert learned.scope == () and learned.source.type == "feedback"
    assert Rule.model_validate({"rule_id": "r", "kind": "learned", "scope": ["a", "b"]}).scope == ("a", "b")
    with pytest.raises(ValidationError, match="scope may only name skills"):
        Rule.model_validate({"rule_id": "r", "kind": "learned", "scope": {"workers": ["x"]}})


def test_type_decides_the_kind_and_a_disagreeing_folder_is_a_warning(ws) -> None:
    ws.persona()
    ws.write("tenants/acme/workers/w/rules/directives/a.md", "---\ntype: learned\n---\n# A\n")
    ws.write("tenants/acme/workers/w/rules/directives/b.md", "---\ncategory: preference\n---\n# B\n")
    ws.write("tenants/acme/workers/w/rules/learned/c.md", "---\ntype: rule\n---\n# C\n")
    worker, warnings = ws.load_worker()
    assert {r.rule_id: r.kind for r in worker.rules} == {"a": "learned", "b": "directive", "c": "learned"}
    by_file = {w.file.rsplit("/", 1)[-1]: (w.field, w.line, w.message) for w in warnings}
    assert by_file == {
        "a.md": ("type", 2, "type 'learned' in the folder of directive rules: the type decides (a learned rule)"),
        "c.md": ("type", 2, "unknown type 'rule' (directive or learned): the folder decides (a learned rule)"),
    }


# -- contacts ---------------------------------------------------------------------------------------

UPSTREAM_CONTACT = """\
---
primary_name: Sam Ortiz
role: Growth analyst
identities:
- channel_type: slack
  handle: U0FIXTURE7
  display_name: sam
  email: ''
  source: discovered
- channel_type: email
  handle: ''
  display_name: Sam Ortiz
  email: sam.ortiz@example.com
  source: discovered
source: discovered
is_same_org_as_owner: true
merge_history:
- person-0a0b0c0d
---

Asked twice about the funnel numbers.
"""


def test_upstream_contact_file(ws) -> None:
    ws.persona()
    ws.write("tenants/acme/workers/w/contacts/discovered/person-4f5e6d7c.md", UPSTREAM_CONTACT)
    worker, warnings = ws.load_worker()
    assert warnings == []
    sam = worker.contacts["person-4f5e6d7c"]  # the file name, as upstream's store names it
    assert sam.name == "Sam Ortiz"
    assert [(i.channel, i.handle, i.source) for i in sam.identities] == [
        ("slack", "U0FIXTURE7", "discovered"),
        ("email", "sam.ortiz@example.com", "discovered"),  # an empty handle is the email
    ]
    assert (sam.source, sam.is_same_org_as_owner, sam.merge_history) == ("discovered", True, ("person-0a0b0c0d",))
    assert sam.notes == "Asked twice about the funnel numbers."


def test_name_and_primary_name_that_differ_warn_and_primary_name_wins(ws) -> None:
    ws.persona()
    ws.write("tenants/acme/workers/w/contacts/configured/sam.md", "---\nname: Sammy\nprimary_name: Sam\n---\n")
    worker, (warning,) = ws.load_worker()
    assert worker.contacts["sam"].name == "Sam"
    assert (warning.field, warning.line) == ("name", 2)
    assert warning.message == "name 'Sammy' and primary_name 'Sam' differ: primary_name is used"


def test_inline_contacts_in_upstream_spelling() -> None:
    persona = PersonaSpec.model_validate(
        {
            "identity": {"worker_id": "w", "name": "W"},
            "contacts": [{"person_id": "ops", "primary_name": "Morgan", "identities": [{"channel_type": "feishu"}]}],
        }
    )
    (contact,) = persona.contacts
    assert (contact.name, contact.identities[0].channel, contact.identities[0].handle) == ("Morgan", "feishu", "")
    assert Contact(person_id="x").display_name == "x"
    with pytest.raises(ValidationError, match="not both"):
        ContactIdentity.model_validate({"channel": "a", "channel_type": "b"})


# -- the prompt ----------------------------------------------------------------------------------------


def _worker(*rules: Rule) -> Worker:
    persona = PersonaSpec.model_validate({"identity": {"worker_id": "w", "name": "W"}})
    return Worker("acme", "w", persona, "", {}, {}, {}, tuple(rules), {}, None, {})


def _learned(rule_id: str, confidence: float, scope: tuple[str, ...] = (), category: str = "preference") -> Rule:
    return Rule.model_validate(
        {
            "rule_id": rule_id,
            "kind": "learned",
            "confidence": confidence,
            "scope": list(scope),
            "category": category,
            "text": f"# {rule_id} text\n\nwhy",
        }
    )


def test_learned_rules_follow_the_runs_skill_the_most_confident_ten() -> None:
    rules = [_learned(f"l{i:02d}", i / 100) for i in range(12)]
    rules += [_learned("sql-only", 0.99, ("sql-report",)), _learned("other-only", 0.98, ("other",))]
    directive = Rule.model_validate({"rule_id": "d", "kind": "directive", "text": "Never share PII."})
    chosen = ordered_rules([*rules, directive], "sql-report")
    assert [r.rule_id for r in chosen] == ["d", "sql-only", *[f"l{i:02d}" for i in range(11, 2, -1)]]
    assert len(chosen) == 1 + MAX_LEARNED_RULES
    assert "other-only" in [r.rule_id for r in ordered_rules(rules, None)]  # no skill: every scope applies


def test_learned_rule_lines_carry_category_and_confidence() -> None:
    worker = _worker(_learned("r", 0.55, category="strategy"))
    text = rules_segment(worker, 500, "any").text
    assert "- (learned) [strategy/0.55] r text\n  \n  why" in text
