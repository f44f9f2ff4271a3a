"""The `evidence` object of a request body: an inferred action's evidence for the Policy Gate, as
`genworker.worker.governance.evidence` reads it from a fact's payload (docs/policy-gate.md)."""

from __future__ import annotations

from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field

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


class EvidenceBody(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [EXAMPLE]})

    confidence: float | None = Field(None, strict=True, description="0..1: how sure the inference is")
    evidence_sources: list[str] | None = Field(
        None, description="ids of the independent signals that agree, each listed once"
    )
    sources: list[str] | None = Field(None, description="the same as evidence_sources; give one of the two")
    requested_actions: list[str] | None = Field(None, description="the action names the task will take")
    requested_effects: list[Effect] | None = Field(None, description="the tool effects it needs")


def evidence_of(body: EvidenceBody | None) -> Evidence:
    """The evidence the router hands to governance; a malformed field is a 422 naming it."""
    if body is None:
        return NO_EVIDENCE
    try:
        return evidence_from(body.model_dump(mode="json", exclude_none=True), "body.evidence")
    except GovernanceInputError as exc:
        raise ApiError(422, "invalid_evidence", str(exc)) from None
