"""A duty run's contract, checked after the engine finished and before the run may complete.

- `output_schema`: the result must conform (JSON for an object or array schema, the text itself for
  a string schema). A result that does not gets one repair turn (the model sees the schema, its
  result and the problem); if the repaired result still does not conform the run fails
  `output_schema_violation`, naming the field.
- one evaluator turn judges the `quality_criteria` (its verdict is recorded, it does not fail the
  run), the audit evidence that only a reader can find, and escalation conditions written as text.
- `audit`: every evidence item must be there (a completed call of a `tool:`, a non-empty `field:` of
  the result, or what the evaluator found); otherwise the run fails `audit_evidence_missing` naming
  the items. The calls that are evidence join the run's `provenance.audit_refs`.

Every check is recorded on the run (`RunRecord.checks`, worker/contract_record.py).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import jsonschema

from genworker.engine.base import RunResult
from genworker.llm.client import Completion, LLMClient
from genworker.llm.errors import LLMError
from genworker.llm.intent import LLMCallIntent, Purpose
from genworker.worker.contract_record import CheckItem, ContractCheck
from genworker.worker.task import ToolCallRecord
from genworker.workspace.models.base import thaw
from genworker.workspace.models.duty import DutySpec
from genworker.workspace.models.duty_terms import (
    AuditItem,
    AuditTerms,
    DeliveryTarget,
    EscalationRule,
    SlaTerms,
    audit_terms,
    escalation_rule,
    escalation_rules,
    sla_terms,
)

__all__ = ["ContractChecks", "DutyTerms", "Verdicts", "duty_terms", "parse_output", "schema_problem"]

log = logging.getLogger("genworker.duties")

_FENCED = re.compile(r"```(?:json)?\s*\n(.*?)\n```", re.DOTALL)
OUTPUT_LIMIT = 20_000  # characters of the result shown to the repair and evaluator turns


@dataclass(frozen=True, slots=True)
class DutyTerms:
    """What a duty's contract and fields promise, typed (workspace/models/duty_terms.py)."""

    output_schema: Mapping[str, Any] = field(default_factory=dict)
    sla: SlaTerms = field(default_factory=SlaTerms)
    escalations: tuple[EscalationRule, ...] = ()
    audit: AuditTerms = field(default_factory=AuditTerms)
    quality_criteria: tuple[str, ...] = ()
    delivery: tuple[DeliveryTarget, ...] = ()

    @property
    def judged_escalations(self) -> tuple[EscalationRule, ...]:
        return tuple(r for r in self.escalations if r.kind == "judged")

    @property
    def judged_evidence(self) -> tuple[AuditItem, ...]:
        return tuple(i for i in self.audit.evidence if i.kind == "judged")

    @property
    def needs_evaluator(self) -> bool:
        return bool(self.quality_criteria or self.judged_evidence or self.judged_escalations)


def duty_terms(duty: DutySpec) -> DutyTerms:
    """The duty's terms (its values were checked when it loaded, so they read)."""
    contract = duty.contract
    rules: list[EscalationRule] = []
    if duty.escalation is not None:
        rules.append(escalation_rule(duty.escalation.condition, duty.escalation.target))
    if contract is None:
        return DutyTerms(escalations=tuple(rules), quality_criteria=duty.quality_criteria, delivery=duty.delivery)
    rules += escalation_rules(contract.escalation)
    return DutyTerms(
        output_schema=thaw(contract.output_schema),
        sla=sla_terms(contract.sla),
        escalations=tuple(dict.fromkeys(rules)),
        audit=audit_terms(contract.audit, contract.output_schema),
        quality_criteria=duty.quality_criteria,
        delivery=duty.delivery,
    )


# -- output ---------------------------------------------------------------------------------


def _structured(schema: Mapping[str, Any]) -> bool:
    kind = schema.get("type")
    kinds = set(kind) if isinstance(kind, list) else {kind}
    return bool(kinds & {"object", "array"}) or any(k in schema for k in ("properties", "required", "items"))


def parse_output(text: str, schema: Mapping[str, Any]) -> tuple[Any, str | None]:
    """The result as the schema sees it: JSON (the whole text, a fenced block, or the outermost
    braces) for an object or array schema, else the text. (value, why it could not be read)."""
    if not _structured(schema):
        return text, None
    candidates = [text.strip(), *(m.group(1) for m in _FENCED.finditer(text))]
    for opening, closing in ("{}", "[]"):
        start, end = text.find(opening), text.rfind(closing)
        if 0 <= start < end:
            candidates.append(text[start : end + 1])
    for candidate in candidates:
        try:
            return json.loads(candidate), None
        except ValueError:
            continue
    return None, "the result is not JSON"


def _path(parts: Sequence[str | int]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else p) for i, p in enumerate(parts))


def schema_problem(value: Any, schema: Mapping[str, Any]) -> str | None:
    """The most relevant violation, naming the field (`output field 'summary': ...`); None: valid."""
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    error = jsonschema.exceptions.best_match(cls(schema).iter_errors(value))
    if error is None:
        return None
    path = list(error.absolute_path)
    if error.validator == "required" and isinstance(error.instance, Mapping):
        missing = [p for p in error.validator_value if p not in error.instance]
        if missing:
            path.append(missing[0])
    name = _path(path)
    return f"output field {name!r}: {error.message}" if name else f"the output: {error.message}"


def conforms(text: str, schema: Mapping[str, Any]) -> str | None:
    value, unreadable = parse_output(text, schema)
    return unreadable if unreadable is not None else schema_problem(value, schema)


# -- the evaluator's verdicts -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Verdicts:
    """What the evaluator turn said, per numbered item (None: not judged)."""

    criteria: tuple[tuple[bool | None, str], ...] = ()
    evidence: tuple[tuple[bool | None, str], ...] = ()
    conditions: tuple[tuple[bool | None, str], ...] = ()
    error: str | None = None


def _verdict_list(raw: Any, key: str, count: int) -> tuple[tuple[bool | None, str], ...]:
    found: list[tuple[bool | None, str]] = [(None, "not judged")] * count
    for entry in raw if isinstance(raw, list) else ():
        if not isinstance(entry, Mapping):
            continue
        number, value = entry.get("n"), entry.get(key)
        if isinstance(number, int) and 1 <= number <= count and isinstance(value, bool):
            found[number - 1] = (value, str(entry.get("reason", ""))[:500])
    return tuple(found)


def read_verdicts(text: str, terms: DutyTerms) -> Verdicts:
    value, unreadable = parse_output(text, {"type": "object"})
    if unreadable is not None or not isinstance(value, Mapping):
        return Verdicts(error=f"the evaluator's answer is not a JSON object: {text[:200]!r}")
    return Verdicts(
        _verdict_list(value.get("criteria"), "met", len(terms.quality_criteria)),
        _verdict_list(value.get("evidence"), "present", len(terms.judged_evidence)),
        _verdict_list(value.get("conditions"), "holds", len(terms.judged_escalations)),
    )


def _numbered(items: Sequence[str]) -> str:
    return "\n".join(f"{i}. {item}" for i, item in enumerate(items, 1))


def evaluator_prompt(duty: DutySpec, terms: DutyTerms, output: str, calls: Sequence[ToolCallRecord]) -> str:
    made = ", ".join(f"{c.name} ({c.outcome})" for c in calls) or "none"
    parts = [f"Duty: {duty.title}", f"Its action:\n{duty.action}", f"The run's result:\n{output[:OUTPUT_LIMIT]}",
             f"Tool calls the run made: {made}"]  # fmt: skip
    answer: dict[str, str] = {}
    if terms.quality_criteria:
        parts.append(f"Quality criteria (is each met by the result?):\n{_numbered(terms.quality_criteria)}")
        answer["criteria"] = '[{"n": 1, "met": true, "reason": "..."}]'
    if terms.judged_evidence:
        parts.append(
            "Evidence the run must show in its result or tool calls (is each present?):\n"
            + _numbered([i.name for i in terms.judged_evidence])
        )
        answer["evidence"] = '[{"n": 1, "present": true, "reason": "..."}]'
    if terms.judged_escalations:
        parts.append(
            "Escalation conditions (does the result show that each holds?):\n"
            + _numbered([r.condition for r in terms.judged_escalations])
        )
        answer["conditions"] = '[{"n": 1, "holds": false, "reason": "..."}]'
    shape = "{" + ", ".join(f'"{k}": {v}' for k, v in answer.items()) + "}"
    parts.append(f"Answer with one JSON object and nothing else: {shape}, one entry per numbered item.")
    return "\n\n".join(parts)


# -- the checks -------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Checked:
    """The result after the checks (repaired, or failed), what they found, and the audit refs."""

    result: RunResult
    checks: tuple[ContractCheck, ...]
    audit_refs: tuple[str, ...]
    verdicts: Verdicts


class ContractChecks:
    def __init__(self, llm: LLMClient, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.llm = llm
        self.clock = clock

    async def check(self, duty: DutySpec, result: RunResult, calls: Sequence[ToolCallRecord]) -> Checked:
        """Check a completed result against the duty's contract; the result to settle the run with."""
        terms = duty_terms(duty)
        checks: list[ContractCheck] = []
        usage = list(result.llm_calls)
        output = result.output
        if terms.output_schema:
            output, check, failure = await self._output(output, terms.output_schema, usage)
            checks.append(check)
            if failure is not None:
                failed = replace(
                    result, status="failed", error_code="output_schema_violation", error=failure, llm_calls=tuple(usage)
                )
                return Checked(failed, tuple(checks), (), Verdicts())
        verdicts = await self._evaluate(duty, terms, output, calls, usage) if terms.needs_evaluator else Verdicts()
        if terms.quality_criteria:
            checks.append(self._quality(terms, verdicts))
        if terms.judged_escalations:
            checks.append(self._conditions(terms, verdicts))
        settled = replace(result, output=output, llm_calls=tuple(usage))
        if not terms.audit.evidence:
            return Checked(settled, tuple(checks), (), verdicts)
        audit, refs = self._audit(terms, output, calls, verdicts)
        checks.append(audit)
        if audit.verdict == "failed":
            settled = replace(settled, status="failed", error_code="audit_evidence_missing", error=audit.detail)
        return Checked(settled, tuple(checks), refs, verdicts)

    async def _output(
        self, output: str, schema: Mapping[str, Any], usage: list[Any]
    ) -> tuple[str, ContractCheck, str | None]:
        problem = conforms(output, schema)
        if problem is None:
            return output, ContractCheck("output_schema", "passed", self.clock()), None
        log.info("[Duties] the result breaks its output schema (%s): one repair turn", problem)
        prompt = (
            f"Output schema (JSON Schema):\n{json.dumps(schema, ensure_ascii=False)}\n\n"
            f"The result:\n{output[:OUTPUT_LIMIT]}\n\nProblem: {problem}\n\n"
            "Answer with the whole corrected result, conforming to the schema, and nothing else."
        )
        system = "You repair a duty run's result so that it conforms to the duty's output schema, keeping its content."
        try:
            repaired = await self._turn(Purpose.EXTRACT, system, prompt, usage)
        except LLMError as exc:
            failure = f"{problem} (the repair turn failed: {exc})"
            return output, ContractCheck("output_schema", "failed", self.clock(), failure), failure
        still = conforms(repaired, schema)
        if still is not None:
            failure = f"{still} (after one repair turn; first: {problem})"
            return output, ContractCheck("output_schema", "failed", self.clock(), failure), failure
        value, _ = parse_output(repaired, schema)
        text = json.dumps(value, ensure_ascii=False, indent=2) if _structured(schema) else repaired
        return text, ContractCheck("output_schema", "repaired", self.clock(), f"repaired: {problem}"), None

    async def _turn(self, purpose: Purpose, system: str, prompt: str, usage: list[Any]) -> str:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
        completion: Completion = await self.llm.complete(LLMCallIntent(purpose), messages)
        usage.append(completion.record)
        return completion.text

    async def _evaluate(
        self, duty: DutySpec, terms: DutyTerms, output: str, calls: Sequence[ToolCallRecord], usage: list[Any]
    ) -> Verdicts:
        system = "You evaluate the result of a duty run against the duty's contract. You answer with JSON only."
        try:
            answer = await self._turn(Purpose.CLASSIFY, system, evaluator_prompt(duty, terms, output, calls), usage)
        except LLMError as exc:
            log.warning("[Duties] duty %s: the evaluator turn failed: %s", duty.duty_id, exc)
            return Verdicts(error=f"the evaluator turn failed: {exc}")
        verdicts = read_verdicts(answer, terms)
        if verdicts.error:
            log.warning("[Duties] duty %s: %s", duty.duty_id, verdicts.error)
        return verdicts

    def _quality(self, terms: DutyTerms, verdicts: Verdicts) -> ContractCheck:
        judged = verdicts.criteria or ((None, verdicts.error or "not judged"),) * len(terms.quality_criteria)
        items = tuple(CheckItem(c, ok, note) for c, (ok, note) in zip(terms.quality_criteria, judged, strict=True))
        if any(i.ok is False for i in items):
            verdict, detail = "failed", "not met: " + "; ".join(i.name for i in items if i.ok is False)
        elif all(i.ok for i in items):
            verdict, detail = "passed", ""
        else:
            verdict, detail = "inconclusive", verdicts.error or "some criteria were not judged"
        return ContractCheck("quality", verdict, self.clock(), detail, items)  # type: ignore[arg-type]

    def _conditions(self, terms: DutyTerms, verdicts: Verdicts) -> ContractCheck:
        rules = terms.judged_escalations
        judged = verdicts.conditions or ((None, verdicts.error or "not judged"),) * len(rules)
        items = tuple(CheckItem(r.condition, ok, note) for r, (ok, note) in zip(rules, judged, strict=True))
        holding = [i.name for i in items if i.ok]
        detail = ("holds: " + "; ".join(holding)) if holding else ""
        return ContractCheck("escalation", "failed" if holding else "passed", self.clock(), detail, items)

    def _audit(
        self, terms: DutyTerms, output: str, calls: Sequence[ToolCallRecord], verdicts: Verdicts
    ) -> tuple[ContractCheck, tuple[str, ...]]:
        structured, _ = parse_output(output, terms.output_schema) if terms.output_schema else (None, None)
        judged = iter(verdicts.evidence or ((None, verdicts.error or "not judged"),) * len(terms.judged_evidence))
        items: list[CheckItem] = []
        refs: list[str] = []
        for item in terms.audit.evidence:
            if item.kind == "tool":
                done = [c.call_id for c in calls if c.name == item.name and c.outcome == "completed"]
                refs += done
                items.append(CheckItem(item.describe(), bool(done), f"calls {', '.join(done)}" if done else "no call"))
            elif item.kind == "field":
                present = isinstance(structured, Mapping) and structured.get(item.name) not in (None, "", [], {})
                items.append(CheckItem(item.describe(), present, "" if present else "missing or empty"))
            else:
                ok, note = next(judged)
                items.append(CheckItem(item.describe(), ok, note))
        missing = [i.name for i in items if not i.ok]
        if missing:
            detail = "audit evidence missing: " + ", ".join(missing)
            return ContractCheck("audit", "failed", self.clock(), detail, tuple(items)), tuple(refs)
        return ContractCheck("audit", "passed", self.clock(), "", tuple(items)), tuple(refs)
