"""A duty's `delivery` and the enforced parts of its `contract`, as files write them: what loads,
what is refused naming its key, what warns, and how a result is read against its output schema."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from genworker.autonomy.duties.contract import duty_terms, parse_output, read_verdicts, schema_problem
from genworker.autonomy.duties.delivery import render_result
from genworker.workspace.models.duty import DutySpec, duty_warnings
from genworker.workspace.models.duty_terms import AuditItem, SlaTerms


def spec(**fields: Any) -> DutySpec:
    return DutySpec.model_validate({"duty_id": "report", "title": "Report", "action": "Report.", **fields})


def contract(**parts: Any) -> dict[str, Any]:
    return {"contract": {"version": "1", **parts}}


def refused(**fields: Any) -> str:
    with pytest.raises(ValidationError) as caught:
        spec(**fields)
    return str(caught.value)


def test_destinations_in_short_and_long_forms() -> None:
    duty = spec(delivery=["owner", "slack:C-OPS", "cfo@acme.example", {"email": ["a@x.example", "b@x.example"],
                "format": "file", "subject": "Weekly"}, {"channel": "feishu", "format": "card"}, {"folder": "reports"},
                {"contact": "sam", "platform": "email"}])  # fmt: skip
    assert [t.describe() for t in duty.delivery] == [
        "contact owner",
        "chat slack:C-OPS",
        "email cfo@acme.example",
        "email a@x.example, b@x.example",
        "channel feishu",
        "folder reports",
        "contact sam (email)",
    ]
    assert [t.format for t in duty.delivery] == ["text", "text", "text", "file", "card", "text", "text"]
    assert spec(delivery={"chat": "C-OPS"}).delivery[0].chat == "C-OPS"  # one destination alone
    routed = spec(delivery=[{"chat": "slack:C-OPS", "fallback": "ops@acme.example"}]).delivery[0]
    assert routed.describe() == "chat slack:C-OPS (else email ops@acme.example)"


@pytest.mark.parametrize(
    ("delivery", "message"),
    [
        ({"chat": "slack:C1", "email": ["a@x.example"]}, "exactly one of 'contact', 'chat', 'channel', 'email' or"),
        ({"format": "text"}, "exactly one of"),
        ({"email": ["not-an-address"]}, "email: 'not-an-address' is not an email address"),
        ({"chat": "slack:C1", "format": "file"}, "format 'file' is sent by email only"),
        ({"chat": "slack:C1", "platform": "slack"}, "'platform' narrows a 'contact'"),
        ({"folder": "../elsewhere"}, "must be a relative path inside the worker folder"),
        ({"folder": "duties/out"}, "is where the worker is defined"),
        ({"contact": "sam", "format": "poster"}, "delivery.0.format"),
        ({"folder": "reports", "fallback": "owner"}, "a folder is written, not sent"),
        ({"chat": "slack:C1", "fallback": {"contact": "a", "fallback": "b"}}, "one fallback, not a chain"),
    ],
)
def test_a_destination_that_cannot_be_sent_is_refused_naming_it(delivery: dict[str, Any], message: str) -> None:
    assert message in refused(delivery=[delivery])


def test_sla_terms_in_the_spellings_files_use() -> None:
    terms = duty_terms(spec(**contract(sla={"response_minutes": 30, "complete_within": "2h", "retries": 2})))
    assert terms.sla == SlaTerms(response_s=1800.0, completion_s=7200.0, retries=2, retry_backoff_s=60.0)
    nested = duty_terms(spec(**contract(sla={"completion_time": "1s", "retry": {"max_attempts": 1, "backoff": "5m"}})))
    assert (nested.sla.completion_s, nested.sla.retries, nested.sla.retry_backoff_s) == (1.0, 1, 300.0)
    assert duty_terms(spec()).sla == SlaTerms() and not SlaTerms().timed


@pytest.mark.parametrize(
    ("sla", "message"),
    [
        ({"completion_time": "soon"}, "sla.completion_time: expected a duration"),
        ({"response_minutes": "ten"}, "sla.response_minutes: a number of minutes"),
        ({"retries": 11}, "sla.retries: a whole number from 0 to 10"),
        ({"completion_time": "1h", "complete_within": "2h"}, "sla: write one of completion_time, complete_within"),
    ],
)
def test_an_unreadable_sla_is_refused_naming_the_key(sla: dict[str, Any], message: str) -> None:
    assert message in refused(**contract(sla=sla))


def test_escalation_rules_and_their_targets() -> None:
    duty = spec(
        escalation={"condition": "A metric moves more than 20%", "target": "sam"},
        **contract(escalation={"conditions": ["sla_breached", "run failed"], "target": "worker:reviewer"}),
    )
    rules = duty_terms(duty).escalations
    assert [(r.kind, r.target_kind, r.target_name) for r in rules] == [
        ("judged", "any", "sam"),
        ("sla_breached", "worker", "reviewer"),
        ("failed", "worker", "reviewer"),
    ]
    assert "another tenant's worker" in refused(**contract(escalation={"condition": "failed", "target": "globex/bob"}))
    assert "another tenant's worker" in refused(escalation={"condition": "failed", "target": "worker:globex~bob"})
    assert "escalation.target: a contact" in refused(**contract(escalation={"condition": "failed"}))


def test_audit_evidence_items() -> None:
    schema = {"type": "object", "properties": {"report_markdown": {"type": "string"}}}
    duty = spec(**contract(output_schema=schema, audit={"record": ["tool:file_read", "report_markdown", "queries"]}))
    assert duty_terms(duty).audit.evidence == (
        AuditItem("tool", "file_read"),
        AuditItem("field", "report_markdown"),
        AuditItem("judged", "queries"),
    )
    assert "audit.evidence[0]: tool: needs a name" in refused(**contract(audit={"evidence": ["tool:"]}))


def test_an_output_schema_that_is_not_json_schema_is_refused() -> None:
    assert "output_schema.type is not valid JSON Schema" in refused(**contract(output_schema={"type": "objekt"}))
    message = refused(**contract(output_schema={"type": "object", "properties": {"n": {"minimum": "one"}}}))
    assert "output_schema.properties.n.minimum is not valid JSON Schema" in message


def test_contract_keys_that_are_not_enforced_warn() -> None:
    data = contract(
        sla={"complete_by": "Monday 10:00", "on_timeout": "post a note"},
        escalation={"condition": "failed", "target": "sam", "channel": "feishu"},
        audit={"evidence": ["queries"], "retain": "2y"},
    )
    found = {".".join(map(str, loc)): message for loc, message in duty_warnings(data)}
    assert set(found) == {"contract.sla.complete_by", "contract.sla.on_timeout", "contract.escalation.channel"}
    assert found["contract.sla.complete_by"].startswith("not enforced: this server reads response_time, completion")
    assert found["contract.sla.on_timeout"] == "on_timeout 'post a note' is read as 'escalate' (escalate | none)"


def test_a_result_is_read_as_the_schema_wants_it() -> None:
    schema = {"type": "object", "required": ["summary"], "properties": {"summary": {"type": "string"}}}
    assert parse_output('{"summary": "ok"}', schema) == ({"summary": "ok"}, None)
    fenced = 'Here it is:\n```json\n{"summary": "ok"}\n```\nDone.'
    assert parse_output(fenced, schema) == ({"summary": "ok"}, None)
    assert parse_output('Result: {"summary": "ok"} (final)', schema) == ({"summary": "ok"}, None)
    assert parse_output("no json here", schema) == (None, "the result is not JSON")
    assert parse_output("plain text", {"type": "string"}) == ("plain text", None)
    assert schema_problem({}, schema) == "output field 'summary': 'summary' is a required property"
    assert schema_problem({"summary": 3}, schema) == "output field 'summary': 3 is not of type 'string'"
    nested = {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "number"}}}}
    assert schema_problem({"items": [1, "x"]}, nested) == "output field 'items[1]': 'x' is not of type 'number'"
    assert schema_problem([], schema) == "the output: [] is not of type 'object'"
    assert schema_problem({"summary": "ok"}, schema) is None


def test_the_evaluator_answer_is_read_item_by_item() -> None:
    terms = duty_terms(spec(quality_criteria=["a", "b"], **contract(audit={"evidence": ["sources"]})))
    answer = '{"criteria": [{"n": 2, "met": false, "reason": "b missing"}], "evidence": [{"n": 1, "present": true}]}'
    verdicts = read_verdicts(answer, terms)
    assert verdicts.criteria == ((None, "not judged"), (False, "b missing"))
    assert verdicts.evidence == ((True, ""),)
    assert read_verdicts("I think it is fine", terms).error is not None


def test_a_structured_result_reads_as_markdown() -> None:
    schema = {"type": "object"}
    output = '{"summary": "Signups fell.", "anomalies": [{"metric": "signups", "change_pct": -14.5}], "ok": true}'
    assert render_result(output, schema) == (
        "**summary**: Signups fell.\n\n**anomalies**:\n- metric: signups, change_pct: -14.5\n\n**ok**: True"
    )
    assert render_result("just text", {}) == "just text"
