"""MemoryOrchestrator: ask every provider at once, each in isolation and under a timeout; merge
what came back into layers (run -> duty -> conversation -> worker -> tenant), each with its own
item and character budget; fail open (empty, status degraded) when a provider is down or slow."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

from genworker.memory.models import LAYER_ORDER, LayerBudget, MemoryHit, MemoryItem, MemoryQuery, ScopeKind

__all__ = ["DEFAULT_BUDGETS", "MemoryOrchestrator", "MemoryProvider", "ProviderIssue", "RecallResult"]

log = logging.getLogger(__name__)

DEFAULT_BUDGETS: Mapping[ScopeKind, LayerBudget] = {
    ScopeKind.RUN: LayerBudget(3, 1_200),
    ScopeKind.DUTY: LayerBudget(3, 1_500),
    ScopeKind.CONVERSATION: LayerBudget(3, 1_500),
    ScopeKind.WORKER: LayerBudget(4, 2_000),
    ScopeKind.TENANT: LayerBudget(2, 1_000),
}


class MemoryProvider(Protocol):
    """One source of memories (the local index, preferences, a remote index such as OpenViking)."""

    @property
    def name(self) -> str: ...

    async def recall(self, query: MemoryQuery) -> Sequence[MemoryHit]: ...


@dataclass(frozen=True, slots=True)
class ProviderIssue:
    provider: str
    reason: Literal["timeout", "error"]
    detail: str = ""


@dataclass(frozen=True, slots=True)
class RecallResult:
    hits: tuple[MemoryHit, ...] = ()
    issues: tuple[ProviderIssue, ...] = ()
    omitted: int = 0  # hits left out by a layer budget
    layers: Mapping[str, int] = field(default_factory=dict)  # scope kind -> hits kept

    @property
    def status(self) -> Literal["ok", "degraded"]:
        return "degraded" if self.issues else "ok"

    def items(self) -> tuple[MemoryItem, ...]:
        """The hits as the context assembler takes them, conflicts flagged for the model."""
        out = []
        for hit in self.hits:
            head = f"[{hit.scope.kind.value}{', conflicting' if hit.conflict else ''}]"
            title = f"{hit.title}: " if hit.title and hit.title not in hit.text else ""
            out.append(MemoryItem(f"{head} {title}{hit.text}", f"{hit.kind}:{hit.episode_id}"))
        return tuple(out)


class MemoryOrchestrator:
    def __init__(
        self,
        providers: Sequence[MemoryProvider],
        *,
        timeout_s: float = 5.0,
        budgets: Mapping[ScopeKind, LayerBudget] | None = None,
    ) -> None:
        self.providers = tuple(providers)
        self.timeout_s = timeout_s
        self.budgets = dict(DEFAULT_BUDGETS if budgets is None else budgets)

    async def query(self, query: MemoryQuery) -> RecallResult:
        results = await asyncio.gather(*(self._ask(p, query) for p in self.providers))
        hits: list[MemoryHit] = []
        issues: list[ProviderIssue] = []
        for outcome in results:
            if isinstance(outcome, ProviderIssue):
                issues.append(outcome)
            else:
                hits.extend(outcome)
        return self._merge(query, hits, tuple(issues))

    async def _ask(self, provider: MemoryProvider, query: MemoryQuery) -> Sequence[MemoryHit] | ProviderIssue:
        try:
            return await asyncio.wait_for(provider.recall(query), self.timeout_s)
        except TimeoutError:
            log.warning("memory provider %s timed out after %.1fs: recalling without it", provider.name, self.timeout_s)
            return ProviderIssue(provider.name, "timeout", f"no answer within {self.timeout_s:g}s")
        except Exception as exc:  # fault isolation: one provider never fails the run
            log.warning("memory provider %s failed: %s", provider.name, exc)
            return ProviderIssue(provider.name, "error", f"{type(exc).__name__}: {exc}")

    def _merge(self, query: MemoryQuery, hits: list[MemoryHit], issues: tuple[ProviderIssue, ...]) -> RecallResult:
        allowed = set(query.binding.scopes())
        best: dict[str, MemoryHit] = {}
        for hit in hits:
            if hit.scope not in allowed:  # a provider must never widen the binding
                log.warning("memory provider %s returned %s outside the run's binding", hit.provider, hit.scope)
                continue
            kept = best.get(hit.episode_id)
            if kept is None or hit.score > kept.score:
                best[hit.episode_id] = hit
        merged = _mark_conflicts(list(best.values()))
        kept_hits: list[MemoryHit] = []
        layers: dict[str, int] = {}
        omitted = 0
        for kind in LAYER_ORDER:
            layer = sorted((h for h in merged if h.scope.kind == kind), key=lambda h: h.score, reverse=True)
            budget = self.budgets.get(kind, LayerBudget())
            chars = 0
            taken = 0
            for hit in layer:
                room = budget.max_chars - chars
                if taken >= budget.max_items or room <= 0:
                    omitted += 1
                    continue
                if len(hit.text) > room:
                    hit = replace(hit, text=hit.text[: max(room - 1, 0)] + "…")
                chars += len(hit.text)
                taken += 1
                kept_hits.append(hit)
            if taken:
                layers[kind.value] = taken
        return RecallResult(tuple(kept_hits), issues, omitted, layers)


def _mark_conflicts(hits: list[MemoryHit]) -> list[MemoryHit]:
    """Preferences, decisions and promoted facts with one key but different values in several layers: both are
    kept and flagged, the higher layer never silently overriding the lower one."""
    values: dict[str, set[str]] = {}
    for hit in hits:
        key = hit.metadata.get("key")
        if key and hit.kind in ("preference", "decision", "fact"):
            values.setdefault(f"{hit.kind}:{key}", set()).add(hit.text)
    if not any(len(v) > 1 for v in values.values()):
        return hits
    out = []
    for hit in hits:
        key = hit.metadata.get("key")
        clash = key is not None and len(values.get(f"{hit.kind}:{key}", ())) > 1
        out.append(replace(hit, conflict=True) if clash or hit.conflict else hit)
    return out
