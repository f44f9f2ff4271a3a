"""SpaceSettings: a worker's effective context-space settings (Steward defaults <- TENANT.json <-
PERSONA.md `context_spaces:`).

========================================  =======  ==========================================
key (seed)                                default  meaning
========================================  =======  ==========================================
enabled                                   false    sensed facts go through spaces (opt-in)
router.recency_window_hours               48       "recently active" for retrieval
router.retrieval_candidates_max           50       candidates retrieved per fact
router.llm_candidates_max                 12       candidates the model is shown
router.always_include_pinned              true     pinned spaces are always retrieved
router.run_resurrection_before_new        true     match old spaces before creating one
router.min_confidence                     0.70     below it a route is a NEW for a person to confirm
router.time_window_minutes                90       facts this close in time to a space's weigh more
router.embeddings                         false    semantic similarity too (needs the embeddings extra)
lifecycle.dormant_after_hours             48       active -> dormant
lifecycle.parked_after_days               7        dormant -> parked
lifecycle.archive_after_days              30       parked -> archived
lifecycle.auto_pin_if_open_commitment     true     an open commitment (or a due date) pins a space
lifecycle.auto_pin_if_waiting_dependency  true     a WAITING dependency pins a space
lifecycle.resurrection_enabled            true     an old space can come back
lifecycle.resurrection_similarity_thr...  0.78     the similarity that brings an old space back, or
                                                   merges a young duplicate into an older space
lifecycle.merge_duplicates                true     a young space that turns out a duplicate is merged
tasks.evidence_threshold                  0.80     a space's evidence score that yields a task
========================================  =======  ==========================================
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from datetime import timedelta
from typing import Final

from genworker.workspace.models.context_space import ContextSpaceOverrides
from genworker.workspace.registry import WorkspaceRegistry

__all__ = ["DEFAULT_SETTINGS", "SpaceSettings", "registry_settings", "resolve_settings"]


@dataclass(frozen=True, slots=True)
class SpaceSettings:
    enabled: bool = False
    recency_window_hours: float = 48.0
    retrieval_candidates_max: int = 50
    llm_candidates_max: int = 12
    always_include_pinned: bool = True
    run_resurrection_before_new: bool = True
    min_confidence: float = 0.70
    time_window_minutes: float = 90.0
    embeddings: bool = False
    dormant_after_hours: float = 48.0
    parked_after_days: float = 7.0
    archive_after_days: float = 30.0
    auto_pin_if_open_commitment: bool = True
    auto_pin_if_waiting_dependency: bool = True
    resurrection_enabled: bool = True
    resurrection_similarity_threshold: float = 0.78
    merge_duplicates: bool = True
    evidence_threshold: float = 0.80

    @property
    def recency_window(self) -> timedelta:
        return timedelta(hours=self.recency_window_hours)

    @property
    def time_window(self) -> timedelta:
        return timedelta(minutes=self.time_window_minutes)

    @property
    def shown_max(self) -> int:
        """Candidates the model sees: never more than were retrieved."""
        return min(self.llm_candidates_max, self.retrieval_candidates_max)

    @property
    def resurrects(self) -> bool:
        return self.resurrection_enabled and self.run_resurrection_before_new

    def merged(self, overrides: ContextSpaceOverrides) -> SpaceSettings:
        given = {
            **_given(overrides.router),
            **_given(overrides.lifecycle),
            **_given(overrides.tasks),
            **({"enabled": overrides.enabled} if overrides.enabled is not None else {}),
        }
        return replace(self, **{k: v for k, v in given.items() if k in _NAMES})  # type: ignore[arg-type]


_NAMES: Final = frozenset(f.name for f in fields(SpaceSettings))
DEFAULT_SETTINGS: Final = SpaceSettings()


def _given(block: object) -> dict[str, object]:
    return {k: v for k, v in vars(block).items() if v is not None} if block is not None else {}


def resolve_settings(
    tenant: ContextSpaceOverrides | None, worker: ContextSpaceOverrides | None = None
) -> SpaceSettings:
    settings = DEFAULT_SETTINGS
    for layer in (tenant, worker):
        if layer is not None:
            settings = settings.merged(layer)
    return settings


def registry_settings(registry: WorkspaceRegistry) -> Callable[[str, str], SpaceSettings]:
    """The effective settings of a loaded worker; the defaults (off) for one that is not loaded."""

    def settings_of(tenant_id: str, worker_id: str) -> SpaceSettings:
        state = registry.tenant(tenant_id)
        worker = registry.worker(tenant_id, worker_id)
        if state is None or worker is None:
            return DEFAULT_SETTINGS
        return resolve_settings(state.tenant.context_spaces, worker.persona.context_spaces)

    return settings_of
