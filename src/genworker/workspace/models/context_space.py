"""The `context_spaces:` block of TENANT.json and PERSONA.md: Steward's Context Space router and
lifecycle, overridable per tenant, then per worker.

Every key is optional: a missing one inherits (Steward default <- tenant <- worker). The leaf keys
are the seed's: `router` holds `routing.context_space_router`, `lifecycle` holds
`lifecycle.context_space`; `enabled` (off by default) and `tasks.evidence_threshold` are genworker's.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from genworker.workspace.models.base import Model

__all__ = [
    "SPACE_STATES",
    "ContextSpaceOverrides",
    "LifecycleOverrides",
    "RouterOverrides",
    "SpaceTaskOverrides",
]

SPACE_STATES = ("active", "dormant", "parked", "archived")


class RouterOverrides(Model):
    """Seed `routing.context_space_router`."""

    mode: Literal["llm_multiple_choice"] | None = None
    allow_unbounded_space_store: Literal[True] | None = None  # nothing is ever deleted; cannot be off
    recency_window_hours: float | None = Field(default=None, gt=0, le=24 * 365)
    retrieval_candidates_max: int | None = Field(default=None, ge=1, le=500)
    llm_candidates_max: int | None = Field(default=None, ge=1, le=50)
    always_include_pinned: bool | None = None
    run_resurrection_before_new: bool | None = None
    output_schema: Literal["strict_space_id_or_new"] | None = None
    min_confidence: float | None = Field(default=None, ge=0.0, le=1.0)
    time_window_minutes: float | None = Field(default=None, gt=0, le=24 * 60)  # genworker's: the seed's 30-90 min
    embeddings: bool | None = None  # genworker's: semantic similarity too (the embeddings extra)

    @field_validator("allow_unbounded_space_store", mode="before")
    @classmethod
    def _cannot_be_off(cls, value: object) -> object:
        if value is not None and value is not True:
            raise ValueError("context spaces are never deleted, so the store is unbounded; this cannot be off")
        return value

    @model_validator(mode="after")
    def _bounded(self) -> RouterOverrides:
        shown, retrieved = self.llm_candidates_max, self.retrieval_candidates_max
        if shown is not None and retrieved is not None and shown > retrieved:
            raise ValueError(f"llm_candidates_max ({shown}) is more than retrieval_candidates_max ({retrieved})")
        return self


class LifecycleOverrides(Model):
    """Seed `lifecycle.context_space`."""

    states: tuple[str, ...] | None = None  # only the seed's four, in its order
    dormant_after_hours: float | None = Field(default=None, gt=0, le=24 * 365)
    parked_after_days: float | None = Field(default=None, gt=0, le=3650)
    archive_after_days: float | None = Field(default=None, gt=0, le=3650)
    auto_pin_if_open_commitment: bool | None = None
    auto_pin_if_waiting_dependency: bool | None = None
    resurrection_enabled: bool | None = None
    resurrection_similarity_threshold: float | None = Field(default=None, ge=0.0, le=1.0)
    merge_duplicates: bool | None = None  # genworker's: the seed's anti-fragmentation rule after creation

    @field_validator("states")
    @classmethod
    def _seed_states(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is not None and tuple(value) != SPACE_STATES:
            raise ValueError(f"the states are {list(SPACE_STATES)}, in that order; they cannot be changed")
        return value

    @model_validator(mode="after")
    def _ordered(self) -> LifecycleOverrides:
        parked, archived = self.parked_after_days, self.archive_after_days
        if parked is not None and archived is not None and archived < parked:
            raise ValueError(f"archive_after_days ({archived:g}) is less than parked_after_days ({parked:g})")
        return self


class SpaceTaskOverrides(Model):
    evidence_threshold: float | None = Field(default=None, gt=0.0, le=1.0)  # a space's score that yields a task


class ContextSpaceOverrides(Model):
    enabled: bool | None = None  # sensed facts go through context spaces (off by default)
    router: RouterOverrides = RouterOverrides()
    lifecycle: LifecycleOverrides = LifecycleOverrides()
    tasks: SpaceTaskOverrides = SpaceTaskOverrides()
