"""What a duty promises and where its result goes: `delivery` destinations, and the parts of its
`contract` the runtime enforces (output_schema, sla, escalation, audit).

The contract's maps stay as written in `DutyContract` (its snapshot is the author's text); the
readers here turn them into typed terms, and a value they cannot read fails the duty's load naming
its key. Keys they do not know load with a warning (`contract_warnings`): they are not enforced.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal

from pydantic import AfterValidator, BeforeValidator, model_validator

from genworker.ids import InvalidIdError, validate_id
from genworker.workspace.models.base import Model, StrTuple, parse_duration, relative_path

__all__ = [
    "ESCALATION_KINDS",
    "AuditItem",
    "AuditTerms",
    "DeliveryList",
    "DeliveryTarget",
    "EscalationRule",
    "SlaTerms",
    "audit_terms",
    "check_output_schema",
    "contract_warnings",
    "delivery_list",
    "escalation_rule",
    "escalation_rules",
    "sla_terms",
]

DELIVERY_PLATFORMS: Final = ("slack", "feishu", "wecom", "dingtalk", "email")
OWNER: Final = "owner"
_EMAIL = re.compile(r"^[^@\s,;<>\"]+@[^@\s,;<>\"]+\.[^@\s,;<>\"]+$")
DeliveryFormat = Literal["text", "card", "file"]
# A folder the runtime writes results into must not be one the watcher reloads the worker from.
_DEFINITION_FOLDERS: Final = frozenset({"duties", "goals", "skills", "rules", "contacts", "runtime", "memory", "runs"})


# -- delivery -------------------------------------------------------------------------------


def _destination(value: Any) -> Any:
    """`owner`, a contact, `slack:C0123` (a bound chat) or an address: the short forms."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if _EMAIL.match(text):
        return {"email": [text]}
    prefix, sep, _ = text.partition(":")
    if sep and prefix.strip().lower() in DELIVERY_PLATFORMS:
        return {"chat": text}
    return {"contact": text}


class DeliveryTarget(Model):
    """One place a duty's result goes, as exactly one of:

    - `contact`: a person of the worker's contacts (person_id, name, alias or handle), or `owner`
      (the contact `identity.reports_to` names): their identities in order, the first the worker
      can reach wins; `platform` keeps only that one;
    - `chat`: a chat bound to one of the worker's channels (`chat_ids`, `features.group_chat_ids`),
      as `C0123` or `slack:C0123`;
    - `channel`: a channel of the worker (its platform, or its binding key): its default chat;
    - `email`: addresses (one mail to all of them);
    - `folder`: a folder inside the worker's directory (a shared or synced drive): the result is
      written there as `{folder}/{duty_id}/{date}-{run_id}.md`.

    `format`: `text` (Markdown), `card` (a Slack Block Kit message or a Feishu card; where the
    platform has none, Markdown), `file` (the result attached as a Markdown file; email only).
    `subject` (email): default the duty's title. `fallback`: another destination (a person, chat,
    channel or addresses) tried when this one's channels do not take the result.
    """

    contact: str | None = None
    chat: str | None = None
    channel: str | None = None
    email: StrTuple = ()
    folder: Annotated[str, AfterValidator(relative_path)] | None = None
    platform: Literal["slack", "feishu", "wecom", "dingtalk", "email"] | None = None
    format: DeliveryFormat = "text"
    subject: str | None = None
    fallback: DeliveryTarget | None = None

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, data: Any) -> Any:
        return _destination(data)

    @model_validator(mode="after")
    def _one_destination(self) -> DeliveryTarget:
        given = [k for k in ("contact", "chat", "channel", "email", "folder") if getattr(self, k)]
        if len(given) != 1:
            raise ValueError(
                "a delivery names exactly one of 'contact', 'chat', 'channel', 'email' or 'folder'"
                + (f" (got {', '.join(given)})" if given else "")
            )
        bad = [a for a in self.email if not _EMAIL.match(a)]
        if bad:
            raise ValueError(f"email: {bad[0]!r} is not an email address")
        if self.platform is not None and self.contact is None:
            raise ValueError("'platform' narrows a 'contact'; a chat names its platform as 'slack:C0123'")
        if self.chat is not None and not self.chat.strip():
            raise ValueError("chat: empty")
        if self.format == "file" and not (self.email or self.folder or self.platform == "email" or self._email_channel):
            raise ValueError("format 'file' is sent by email only: use 'email', or a contact with platform: email")
        if self.fallback is not None and (self.folder is not None or self.fallback.folder is not None):
            raise ValueError("a folder is written, not sent: it has no fallback and is none")
        if self.fallback is not None and self.fallback.fallback is not None:
            raise ValueError("fallback: one fallback, not a chain")
        if self.folder is not None and self.folder.split("/")[0] in _DEFINITION_FOLDERS:
            raise ValueError(f"folder: {self.folder!r} is where the worker is defined; choose another folder")
        return self

    @property
    def _email_channel(self) -> bool:
        return (self.channel or "").strip().lower() == "email" or (self.chat or "").lower().startswith("email:")

    def describe(self) -> str:
        """The destination as written, for people: `contact sam (email)`, `chat slack:C0123`, `email a, b`,
        `chat slack:C0123 (else email a)`."""
        written = self._describe()
        return written if self.fallback is None else f"{written} (else {self.fallback._describe()})"

    def _describe(self) -> str:
        if self.contact is not None:
            return f"contact {self.contact}" + (f" ({self.platform})" if self.platform else "")
        if self.chat is not None:
            return f"chat {self.chat}"
        if self.channel is not None:
            return f"channel {self.channel}"
        if self.folder is not None:
            return f"folder {self.folder}"
        return "email " + ", ".join(self.email)


def delivery_list(value: Any) -> Any:
    """One destination (a mapping or a string) is a one-item list."""
    if isinstance(value, str | Mapping):
        return [value]
    return value


DeliveryList = Annotated[tuple[DeliveryTarget, ...], BeforeValidator(delivery_list)]


# -- sla --------------------------------------------------------------------------------------

OnTimeout = Literal["escalate", "none"]
_RESPONSE = ("response_time", "response", "response_minutes")
_COMPLETION = ("completion_time", "complete_within", "completion", "completion_minutes", "complete_minutes")
_RETRIES = ("retries", "retry")
_BACKOFF = ("retry_backoff", "backoff")
_SLA_NAMES: Final = "response_time, completion_time, retries, retry_backoff, on_timeout"
SLA_KEYS: Final = frozenset({*_RESPONSE, *_COMPLETION, *_RETRIES, *_BACKOFF, "on_timeout", "note", "description"})


@dataclass(frozen=True, slots=True)
class SlaTerms:
    """`contract.sla`: `response_time` (from the trigger's slot to the run starting),
    `completion_time` (from the slot to the run ending), `retries` of a failed run after
    `retry_backoff`, and `on_timeout` (escalate | none)."""

    response_s: float | None = None
    completion_s: float | None = None
    retries: int = 0
    retry_backoff_s: float = 60.0
    on_timeout: OnTimeout = "escalate"

    @property
    def timed(self) -> bool:
        return self.response_s is not None or self.completion_s is not None


def _one_of(raw: Mapping[str, Any], names: tuple[str, ...], where: str) -> tuple[str, Any] | None:
    found = [(k, raw[k]) for k in names if k in raw]
    if len(found) > 1:
        raise ValueError(f"{where}: write one of {', '.join(k for k, _ in found)}")
    return found[0] if found else None


def _seconds(key: str, value: Any, where: str) -> float:
    if key.endswith("_minutes"):
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise ValueError(f"{where}.{key}: a number of minutes greater than zero, got {value!r}")
        return float(value) * 60
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise ValueError(f"{where}.{key}: {exc}") from None


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 10:
        raise ValueError(f"{where}: a whole number from 0 to 10, got {value!r}")
    return value


def sla_terms(raw: Mapping[str, Any], where: str = "sla") -> SlaTerms:
    """The typed `sla`; ValueError names the key it cannot read."""
    response = _one_of(raw, _RESPONSE, where)
    completion = _one_of(raw, _COMPLETION, where)
    retries, backoff = 0, 60.0
    retry = _one_of(raw, _RETRIES, where)
    if retry is not None:
        key, value = retry
        if isinstance(value, Mapping):
            retries = _count(value.get("max_attempts", value.get("attempts", 0)), f"{where}.{key}.max_attempts")
            if "backoff" in value:
                backoff = _seconds("backoff", value["backoff"], f"{where}.{key}")
        else:
            retries = _count(value, f"{where}.{key}")
    written = _one_of(raw, _BACKOFF, where)
    if written is not None:
        backoff = _seconds(written[0], written[1], where)
    on_timeout = raw.get("on_timeout", "escalate")
    return SlaTerms(
        _seconds(*response, where) if response else None,
        _seconds(*completion, where) if completion else None,
        retries,
        backoff,
        on_timeout if on_timeout in ("escalate", "none") else "escalate",
    )


# -- escalation -------------------------------------------------------------------------------

# Conditions the runtime decides itself; any other text is judged by the run's evaluator turn.
ESCALATION_KINDS: Final[Mapping[str, str]] = {
    "sla_breached": "sla_breached",
    "sla_breach": "sla_breached",
    "sla": "sla_breached",
    "timeout": "sla_breached",
    "failed": "failed",
    "run_failed": "failed",
    "failure": "failed",
    "quality_failed": "quality_failed",
    "audit_missing": "audit_missing",
    "output_invalid": "output_invalid",
}
EscalationKind = Literal["sla_breached", "failed", "quality_failed", "audit_missing", "output_invalid", "judged"]


@dataclass(frozen=True, slots=True)
class EscalationRule:
    """When (`condition`) to hand the matter to whom (`target`: a contact, `owner`, or a worker of the
    same tenant, optionally written `contact:<name>` / `worker:<id>`)."""

    condition: str
    target: str
    kind: EscalationKind

    @property
    def target_kind(self) -> Literal["contact", "worker", "any"]:
        prefix = self.target.partition(":")[0].strip().lower()
        return prefix if prefix in ("contact", "worker") and ":" in self.target else "any"  # type: ignore[return-value]

    @property
    def target_name(self) -> str:
        return self.target.partition(":")[2].strip() if self.target_kind != "any" else self.target.strip()


def _kind(condition: str) -> EscalationKind:
    words = re.sub(r"[\s-]+", "_", condition.strip().lower())
    return ESCALATION_KINDS.get(words, "judged")  # type: ignore[return-value]


def escalation_rule(condition: Any, target: Any, where: str = "escalation") -> EscalationRule:
    if not isinstance(condition, str) or not condition.strip():
        raise ValueError(f"{where}.condition: a condition is required")
    if not isinstance(target, str) or not target.strip():
        raise ValueError(f"{where}.target: a contact, 'owner' or a worker id is required")
    rule = EscalationRule(condition.strip(), target.strip(), _kind(condition))
    name = rule.target_name
    if "/" in name or "~" in name:
        raise ValueError(f"{where}.target: {target!r} names another tenant's worker; escalation stays in the tenant")
    if rule.target_kind == "worker":
        try:
            validate_id(name, "worker id")
        except InvalidIdError as exc:
            raise ValueError(f"{where}.target: {exc}") from None
    return rule


ESCALATION_KEYS: Final = frozenset({"condition", "conditions", "triggers", "target", "note", "description"})


def escalation_rules(raw: Mapping[str, Any], where: str = "escalation") -> tuple[EscalationRule, ...]:
    """`{condition, target}`, or `{conditions: [...], target}` (the seed's `triggers` too)."""
    if not raw:
        return ()
    target = raw.get("target")
    conditions: Any = raw.get("condition")
    listed = _one_of(raw, ("conditions", "triggers"), where)
    if listed is not None:
        if conditions is not None:
            raise ValueError(f"{where}: write 'condition' or '{listed[0]}', not both")
        conditions = listed[1]
        if not isinstance(conditions, list | tuple) or not conditions:
            raise ValueError(f"{where}.{listed[0]}: a list of conditions")
        return tuple(escalation_rule(c, target, f"{where}.{listed[0]}[{i}]") for i, c in enumerate(conditions))
    return (escalation_rule(conditions, target, where),)


# -- audit ------------------------------------------------------------------------------------

AUDIT_EVIDENCE: Final = ("evidence", "required_evidence", "record", "require")
AUDIT_KEYS: Final = frozenset({*AUDIT_EVIDENCE, "retain", "retention", "note", "description"})


@dataclass(frozen=True, slots=True)
class AuditItem:
    """One piece of evidence a run must show: a completed call of a `tool`, a non-empty `field` of
    its structured result, or (`judged`) anything else, which the evaluator turn looks for."""

    kind: Literal["tool", "field", "judged"]
    name: str

    def describe(self) -> str:
        return self.name if self.kind == "judged" else f"{self.kind}:{self.name}"


@dataclass(frozen=True, slots=True)
class AuditTerms:
    evidence: tuple[AuditItem, ...] = ()


def audit_terms(raw: Mapping[str, Any], output_schema: Mapping[str, Any], where: str = "audit") -> AuditTerms:
    """`evidence` (or `required_evidence`, `record`): `tool:<name>`, `field:<name>`, a bare name of
    an output_schema property (a field), or free text (judged)."""
    found = _one_of(raw, AUDIT_EVIDENCE, where)
    if found is None:
        return AuditTerms()
    key, items = found
    if isinstance(items, str):
        items = [items]
    if not isinstance(items, list | tuple):
        raise ValueError(f"{where}.{key}: a list of evidence items")
    properties = output_schema.get("properties")
    names = set(properties) if isinstance(properties, Mapping) else set()
    parsed = []
    for index, item in enumerate(items):
        if not isinstance(item, str) or not item.strip():
            raise ValueError(f"{where}.{key}[{index}]: an evidence item is text, got {item!r}")
        text = item.strip()
        prefix, sep, rest = text.partition(":")
        if sep and prefix in ("tool", "field"):
            if not rest.strip():
                raise ValueError(f"{where}.{key}[{index}]: {prefix}: needs a name")
            parsed.append(AuditItem(prefix, rest.strip()))  # type: ignore[arg-type]
        elif text in names:
            parsed.append(AuditItem("field", text))
        else:
            parsed.append(AuditItem("judged", text))
    return AuditTerms(tuple(parsed))


# -- output schema ----------------------------------------------------------------------------


def check_output_schema(schema: Mapping[str, Any]) -> None:
    """ValueError when `schema` is not a valid JSON Schema (the draft its `$schema` names, else 2020-12)."""
    if not schema:
        return
    import jsonschema  # only duties with a schema pay for the import
    from jsonschema.exceptions import SchemaError

    from genworker.workspace.models.base import thaw

    plain = thaw(schema)
    try:
        jsonschema.validators.validator_for(plain, default=jsonschema.Draft202012Validator).check_schema(plain)
    except SchemaError as exc:
        at = "".join(f".{p}" if isinstance(p, str) else f"[{p}]" for p in exc.absolute_path)
        raise ValueError(f"output_schema{at} is not valid JSON Schema: {exc.message}") from None


# -- warnings ---------------------------------------------------------------------------------

Loc = tuple[str | int, ...]


def contract_warnings(data: Mapping[str, Any]) -> list[tuple[Loc, str]]:
    """(location, message) for contract keys that load but are not enforced."""
    contract = data.get("contract")
    if not isinstance(contract, Mapping):
        return []
    found: list[tuple[Loc, str]] = []
    readable = {"sla": _SLA_NAMES, "escalation": "condition (or conditions), target", "audit": "evidence, retain"}
    for part, known in (("sla", SLA_KEYS), ("escalation", ESCALATION_KEYS), ("audit", AUDIT_KEYS)):
        section = contract.get(part)
        if not isinstance(section, Mapping):
            continue
        found += [
            (("contract", part, key), f"not enforced: this server reads {readable[part]}")
            for key in section
            if key not in known
        ]
    on_timeout = contract.get("sla", {}).get("on_timeout") if isinstance(contract.get("sla"), Mapping) else None
    if on_timeout is not None and on_timeout not in ("escalate", "none"):
        found.append(
            (("contract", "sla", "on_timeout"), f"on_timeout {on_timeout!r} is read as 'escalate' (escalate | none)")
        )
    return found
