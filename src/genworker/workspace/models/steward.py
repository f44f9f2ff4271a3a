"""The `conflict:` and `learning:` blocks of TENANT.json (Steward's Conflict Arbiter and feedback
loop). Every key is optional; Steward's defaults apply. The irreversible guards accept only `true`:
no setting lets the arbiter settle an irreversible conflict alone, or learning make an irreversible
action silent.
"""

from __future__ import annotations

from typing import Literal, Self

from pydantic import Field, field_validator, model_validator

from genworker.workspace.models.base import Model

__all__ = [
    "SIMILARITY_FEATURES",
    "BudgetAutoTuneConfig",
    "ConflictConfig",
    "FeedbackLoopConfig",
    "LearningConfig",
    "LearningRetention",
    "PriorityPersonalizationConfig",
    "Resolution",
    "SimilarityFeature",
]

Resolution = Literal["merge", "serialize", "replan", "escalate"]


class ConflictConfig(Model):
    enabled: bool = True
    detect_at_plan_time: bool = True
    detect_at_commit_time: bool = True
    default_resolution_order: tuple[Resolution, ...] = ("merge", "serialize", "replan", "escalate")
    lock_ttl_seconds: int = Field(default=120, ge=1, le=3600)
    declared_plan_ttl_seconds: int = Field(default=86_400, ge=1, le=30 * 86_400)  # a plan declared over the API
    semantic_conflict_check_for_brief: bool = True
    auto_escalate_on_irreversible_conflict: Literal[True] = True

    @field_validator("default_resolution_order")
    @classmethod
    def _order(cls, value: tuple[Resolution, ...]) -> tuple[Resolution, ...]:
        if len(set(value)) != len(value):
            raise ValueError("lists a resolution more than once")
        if "escalate" not in value:  # the last resort: a person; without it a conflict could stay unresolved
            return (*value, "escalate")
        return value

    @field_validator("auto_escalate_on_irreversible_conflict", mode="before")
    @classmethod
    def _cannot_be_off(cls, value: object) -> object:
        if value is not True:
            raise ValueError("a conflict involving an irreversible action always goes to a person; this cannot be off")
        return value


SimilarityFeature = Literal["source", "intent", "entity_type", "counterpart_role"]
SIMILARITY_FEATURES: tuple[SimilarityFeature, ...] = ("source", "intent", "entity_type", "counterpart_role")


class PriorityPersonalizationConfig(Model):
    """edit_priority feedback on similar items (same `similarity_key`) shifts their future priority."""

    enabled: bool = True
    similarity_key: tuple[SimilarityFeature, ...] = Field(default=SIMILARITY_FEATURES, min_length=1)
    manual_priority_boost_weight: float = Field(default=0.25, gt=0, le=1)  # levels per level a person moved one
    max_auto_boost_level: int = Field(default=1, ge=0, le=3)  # at most this many levels up or down


class BudgetAutoTuneConfig(Model):
    """The interruption budget moves a step at a time with people's feedback, within floor and ceiling."""

    enabled: bool = True
    target_utilization: float = Field(default=0.75, gt=0, le=1)
    floor: int = Field(default=6, ge=0, le=1000)
    ceiling: int = Field(default=16, ge=1, le=1000)
    step_per_day: int = Field(default=1, ge=1, le=100)

    @model_validator(mode="after")
    def _bounds(self) -> Self:
        if self.floor > self.ceiling:
            raise ValueError(f"floor {self.floor} is above ceiling {self.ceiling}")
        return self


class FeedbackLoopConfig(Model):
    reject_auto_to_confirm: bool = True
    reject_auto_threshold: int = Field(default=2, ge=1, le=100)
    promote_confirm_to_auto_threshold: int = Field(default=5, ge=1, le=1000)
    freeze_on_negative_feedback_spike: bool = True
    negative_spike_count: int = Field(default=5, ge=2, le=1000)  # negative feedback events ...
    negative_spike_window_hours: float = Field(default=24.0, gt=0, le=24 * 30)  # ... within this window
    priority_personalization: PriorityPersonalizationConfig = PriorityPersonalizationConfig()
    interruption_budget_auto_tune: BudgetAutoTuneConfig = BudgetAutoTuneConfig()


class LearningRetention(Model):
    """How much of the decision log and the feedback is kept (policy steps and policy.json always are).
    The age limits never go below what learning reads: `decay_half_life_days` and the shadow period."""

    decision_log_days: float = Field(default=90.0, gt=0, le=3650)
    decision_log_max_entries: int = Field(default=50_000, ge=100, le=10_000_000)
    feedback_days: float = Field(default=90.0, gt=0, le=3650)
    feedback_max_events: int = Field(default=10_000, ge=100, le=10_000_000)


class LearningConfig(Model):
    enabled: bool = True
    mode: Literal["assisted"] = "assisted"  # learned changes apply only once a person approves them
    min_samples_for_adaptation: int = Field(default=5, ge=1, le=1000)
    decay_half_life_days: float = Field(default=30.0, gt=0, le=3650)
    safe_apply_after_shadow_days: float = Field(default=7.0, ge=0, le=365)
    never_override_irreversible_rules: Literal[True] = True
    feedback_loop: FeedbackLoopConfig = FeedbackLoopConfig()
    retention: LearningRetention = LearningRetention()

    @field_validator("never_override_irreversible_rules", mode="before")
    @classmethod
    def _cannot_be_off(cls, value: object) -> object:
        if value is not True:
            raise ValueError("learning never makes an irreversible action run without a person; this cannot be off")
        return value
