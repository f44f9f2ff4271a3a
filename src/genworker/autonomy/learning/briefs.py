"""The learned preferences in the briefs (BriefService.learned):

- the day's interruption budget is the newest applied `budget` version's, else the policy's;
- an item notified through the briefs whose `ref` is one of the worker's runs takes the learned
  priority of items alike (the run's decision gives its similarity features): up or down the levels
  the applied `priority` versions say, never into P0 (preferences.shifted).

Each such decision goes to the decision log — `interruption` (interrupted or briefed, under which
limit) and `priority` entries — with the version that decided and what each version of the same kind
in shadow would have decided; nothing is logged while no version of that kind is applied or in shadow.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from genworker.autonomy.briefs import BriefItem
from genworker.autonomy.learning.learner import Learner
from genworker.autonomy.learning.models import LearningState, similarity_key
from genworker.autonomy.learning.preferences import shifted

__all__ = ["FeaturesOf", "LearnedBriefOverlay"]

FeaturesOf = Callable[[str, str, str], Awaitable[dict[str, str] | None]]
"""(tenant, worker, an item's ref) -> the similarity features of the decision behind it (None: not a run)."""


class LearnedBriefOverlay:
    def __init__(self, learner: Learner, features_of: FeaturesOf) -> None:
        self.learner = learner
        self.features_of = features_of

    def _state(self, tenant_id: str, worker_id: str) -> LearningState | None:
        if not self.learner.config_of(tenant_id).enabled:
            return None
        return self.learner.store.state(tenant_id, worker_id)

    # -- the interruption budget ---------------------------------------------------------------

    def limit(self, tenant_id: str, worker_id: str, base: int) -> int:
        state = self._state(tenant_id, worker_id)
        learned = state.budget() if state is not None else None
        return base if learned is None else learned

    def admitted(self, tenant_id: str, worker_id: str, item_id: str, taken: bool, used: int, limit: int) -> None:
        state = self._state(tenant_id, worker_id)
        shadows = [v for v in state.shadows if v.kind == "budget"] if state is not None else []
        if state is None or not (shadows or state.decides("budget")):
            return
        before = used - 1 if taken else used  # interruptions of the day before this one
        shadow = []
        for version in shadows:
            would = state.budget(version)
            shadow.append({"version": version.version, "limit": would,
                           "would_have": "interrupt" if would is None or before < would else "brief"})  # fmt: skip
        self.learner.log(
            tenant_id, worker_id, "interruption", item_id=item_id, result="interrupt" if taken else "brief",
            used=used, limit=limit, policy_version=state.decides("budget"), shadow=shadow,
        )  # fmt: skip

    # -- priorities ----------------------------------------------------------------------------

    async def prioritise(self, tenant_id: str, worker_id: str, item: BriefItem) -> BriefItem:
        state = await asyncio.to_thread(self._state, tenant_id, worker_id)
        if state is None or item.ref is None or item.priority == "P0":
            return item
        shadows = [v for v in state.shadows if v.kind == "priority"]
        live = state.priorities()
        if not live and not shadows:
            return item
        features = await self.features_of(tenant_id, worker_id, item.ref)
        if features is None:
            return item
        key = similarity_key(
            features, self.learner.config_of(tenant_id).feedback_loop.priority_personalization.similarity_key
        )
        shadows = [v for v in shadows if v.touches(key, "priority")]
        if key not in live and not shadows:
            return item
        priority = shifted(item.priority, live.get(key, 0))
        deciding = max((v.version for v in state.active if v.touches(key, "priority")), default=0)
        shadow = [
            {"version": v.version, "would_have": shifted(item.priority, state.priorities(v).get(key, 0))}
            for v in shadows
        ]
        await asyncio.to_thread(
            self.learner.log, tenant_id, worker_id, "priority", item_id=item.item_id, ref=item.ref,
            similarity_key=key, asked=item.priority, priority=priority, policy_version=deciding, shadow=shadow,
        )  # fmt: skip
        if priority == item.priority:
            return item
        note = f"priority {item.priority} -> {priority}: learned policy v{deciding} for items alike"
        return item.model_copy(update={"priority": priority, "detail": f"{item.detail} ({note})".strip()})
