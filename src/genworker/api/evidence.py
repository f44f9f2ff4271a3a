"""The `evidence` object of a request body: an inferred action's evidence for the Policy Gate, as
`genworker.worker.governance.evidence` reads it from a fact's payload (docs/policy-gate.md)."""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import ConfigDict, Field

from genworker.api.bodies import RequestBody, json_enum
from genworker.api.errors import ApiError
from genworker.tools.base import Effect
from genworker.worker.governance.errors import GovernanceInputError
from genworker.worker.governance.evidence import NO_EVIDENCE, Evidence, evidence_from

__all__ = ["EXAMPLE", "EvidenceBody", "evidence_of"]

EXAMPLE: Final[dict[str, Any]] = {
    "confidence": 0.97,
    "evidence_sources": ["github", "pagerduty"],
    "requested_actions": ["internal_status_transition"],
    "requested_effects": ["external"],
}


# a name that is not only white space (governance strips names)
Name = Annotated[str, Field(min_length=1, pattern=r"\S")]
_ONE_OF: Final = ("evidence_sources", "sources")
_KEY: Final = r"^[A-Za-z0-9_][^\x00-\x1f\x7f]*$"


class PlannedEffectBody(RequestBody):
    # starting with a letter, digit or '_', no control characters (a class every regex engine reads alike)
    resource_key: str = Field(max_length=300, pattern=_KEY, examples=["github:issue:42"])
    operation: str = Field(max_length=300, pattern=_KEY, examples=["set_status:closed"])
    expected_version: str | None = Field(None, max_length=300, description="the ETag / updated_at read")
    reversibility: Literal["reversible", "undo_window", "irreversible"] = "reversible"


class EvidenceBody(RequestBody):
    model_config = ConfigDict(json_schema_extra={"examples": [EXAMPLE], "not": {"required": list(_ONE_OF)}})

    confidence: float | None = Field(None, ge=0, le=1, description="0..1: how sure the inference is")
    evidence_sources: list[Name] | None = Field(
        None,
        description="ids of the independent signals that agree, each listed once",
        json_schema_extra={"uniqueItems": True},
    )
    sources: list[Name] | None = Field(
        None, description="the same as evidence_sources; give one of the two", json_schema_extra={"uniqueItems": True}
    )
    requested_actions: list[Name] | None = Field(None, description="the action names the task will take")
    requested_effects: list[json_enum(Effect)] | None = Field(  # type: ignore[valid-type]
        None, description="the tool effects it needs"
    )
    planned_effects: list[PlannedEffectBody] | None = Field(
        None, max_length=50, description="what the task will change, for the Conflict Arbiter (docs/conflicts.md)"
    )


def evidence_of(body: EvidenceBody | None) -> Evidence:
    """The evidence the router hands to governance; a malformed field is a 422 naming it."""
    if body is None:
        return NO_EVIDENCE
    if set(_ONE_OF) <= body.model_fields_set:  # as the schema says, even when one of them is null
        raise ApiError(422, "invalid_evidence", "body.evidence: give one of evidence_sources or sources, not both")
    try:
        return evidence_from(body.model_dump(mode="json", exclude_none=True), "body.evidence")
    except GovernanceInputError as exc:
        raise ApiError(422, "invalid_evidence", str(exc)) from None
