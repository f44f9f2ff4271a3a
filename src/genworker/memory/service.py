"""MemoryService: the runtime's one entry to memory — recall before a run, record after it,
candidates, cross-channel offers — over each worker's and tenant's files and indexes.

Partitions: a run reads only the scopes its `MemoryBinding` derives (run -> duty -> conversation
-> worker -> tenant). A run writes to its own run scope; when it completes, the runtime seals its
episode into the run's duty (or conversation) scope. Worker and tenant scope are written only by
promoting an approved candidate. Every path is under the binding's own tenant.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from genworker.llm.client import LLMClient
from genworker.memory.candidates import Candidate, CandidateStore
from genworker.memory.config import MemoryConfig
from genworker.memory.crosschannel import CrossChannelOffer, OfferStore, find_continuation
from genworker.memory.embeddings import MiniLMEmbedder
from genworker.memory.episodes import tenant_memory_dir, worker_memory_dir
from genworker.memory.errors import MemoryPolicyError
from genworker.memory.extraction import extract_statements
from genworker.memory.index import IndexedMessage, SearchFilters
from genworker.memory.models import (
    Episode,
    MemoryBinding,
    MemoryHit,
    MemoryQuery,
    Provenance,
    Scope,
    ScopeKind,
    new_episode_id,
)
from genworker.memory.orchestrator import MemoryOrchestrator, MemoryProvider, ProviderIssue, RecallResult
from genworker.memory.preferences import Evidence, Statement, StatementsProvider, StatementStore
from genworker.memory.promotion import FactsProvider, FactStore
from genworker.memory.redaction import looks_like_error, redact_for_memory
from genworker.memory.store import OwnerMemory
from genworker.write_journal import DIRECT, DurableFiles

__all__ = ["LocalIndexProvider", "MemoryService", "RunOutcome", "channel_of"]

log = logging.getLogger(__name__)

Embed = Callable[[Sequence[str]], list[list[float]]]


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """What a completed run leaves for memory."""

    user_text: str
    answer: str
    task_id: str | None = None
    goal_id: str | None = None
    channel: str | None = None
    recalled: tuple[str, ...] = ()  # episode ids recalled for the run, reinforced now it succeeded
    secrets: tuple[str, ...] = ()  # values to mask before anything is written


class MemoryService:
    def __init__(
        self,
        root: Path,
        config: MemoryConfig | None = None,
        *,
        llm: LLMClient | None = None,
        providers: Sequence[MemoryProvider] = (),
        embed: Embed | None = None,
        files: DurableFiles = DIRECT,
    ) -> None:
        self.root = root
        self.files = files  # how episode writes are made durable (write_journal.py)
        self.config = config or MemoryConfig()
        self.llm = llm
        self.embed = embed if embed is not None else (MiniLMEmbedder() if self.config.embeddings else None)
        self._owners: dict[tuple[str, ...], OwnerMemory] = {}
        self._lock = threading.Lock()
        self._indexing: set[asyncio.Future[None]] = set()  # learn_later's, until their run is in the index
        self._learning: set[asyncio.Task[None]] = set()  # learn_later's, until done (extraction included)
        self.orchestrator = MemoryOrchestrator(
            (
                LocalIndexProvider(self),
                StatementsProvider(self._statement_stores),
                FactsProvider(self._fact_stores),
                *providers,
            ),
            timeout_s=self.config.timeout_s,
        )

    # -- owners ------------------------------------------------------------------------------

    def worker(self, tenant_id: str, worker_id: str) -> OwnerMemory:
        key = ("worker", tenant_id, worker_id)
        with self._lock:
            if key not in self._owners:
                memory_dir = worker_memory_dir(self.root, tenant_id, worker_id)
                self._owners[key] = OwnerMemory(
                    memory_dir,
                    memory_dir.parent / "runtime",
                    half_life_days=self.config.half_life_days,
                    embed=self.embed,
                    files=self.files,
                )
            return self._owners[key]

    def tenant(self, tenant_id: str) -> OwnerMemory:
        key = ("tenant", tenant_id)
        with self._lock:
            if key not in self._owners:
                memory_dir = tenant_memory_dir(self.root, tenant_id)
                self._owners[key] = OwnerMemory(
                    memory_dir,
                    memory_dir.parent / "runtime",
                    half_life_days=self.config.half_life_days,
                    embed=self.embed,
                    files=self.files,
                )
            return self._owners[key]

    def owner_of(self, binding: MemoryBinding, scope: Scope) -> OwnerMemory:
        if scope.kind == ScopeKind.TENANT:
            return self.tenant(binding.tenant_id)
        return self.worker(binding.tenant_id, binding.worker_id)

    def _memory_dir(self, tenant_id: str, worker_id: str) -> Path:
        return worker_memory_dir(self.root, tenant_id, worker_id)

    def statements(self, tenant_id: str, worker_id: str, kind: Literal["preference", "decision"]) -> StatementStore:
        return StatementStore(self._memory_dir(tenant_id, worker_id), kind)

    def _statement_stores(self, binding: MemoryBinding) -> list[StatementStore]:
        return [self.statements(binding.tenant_id, binding.worker_id, k) for k in ("preference", "decision")]

    def _fact_stores(self, binding: MemoryBinding) -> list[FactStore]:
        """Promoted facts (memory/promotion.py): the worker's (duty, worker scope) and the tenant's."""
        return [
            FactStore(self._memory_dir(binding.tenant_id, binding.worker_id)),
            FactStore(tenant_memory_dir(self.root, binding.tenant_id)),
        ]

    def candidates(self, tenant_id: str, worker_id: str) -> CandidateStore:
        return CandidateStore(self._memory_dir(tenant_id, worker_id))

    def offers(self, tenant_id: str, worker_id: str) -> OfferStore:
        return OfferStore(self._memory_dir(tenant_id, worker_id))

    # -- recall ------------------------------------------------------------------------------

    async def recall(self, query: MemoryQuery) -> RecallResult:
        if not self.config.enabled:
            return RecallResult()
        await self.indexed()
        return await self.orchestrator.query(query)

    async def recall_for_run(
        self, binding: MemoryBinding, text: str, *, goal_id: str | None = None, exclude_runs: Sequence[str] = ()
    ) -> RecallResult:
        """What the context assembler gets before a run; never raises (fail open, status degraded)."""
        query = MemoryQuery(
            text, binding, goal_id=goal_id, limit=self.config.recall_limit, exclude_runs=tuple(exclude_runs)[-200:]
        )
        try:
            return await self.recall(query)
        except Exception as exc:
            log.exception("memory: recall for run %s failed; running without memory", binding.run_id)
            return RecallResult(issues=(ProviderIssue("memory", "error", f"{type(exc).__name__}: {exc}"),))

    # -- writes ------------------------------------------------------------------------------

    async def write_episode(
        self, binding: MemoryBinding, scope: Scope, title: str, text: str, *, source: str = "run",
        provenance: Provenance | None = None, kind: Literal["episode", "summary"] = "episode",
        secrets: tuple[str, ...] = (),
    ) -> Episode:  # fmt: skip
        """A run's own write: only to its run scope (the runtime seals completed runs separately)."""
        if scope != Scope(ScopeKind.RUN, binding.run_id or ""):
            raise MemoryPolicyError(
                f"a run writes only to its own run scope (run:{binding.run_id}), not {scope}; "
                "propose a candidate for worker or tenant memory"
            )
        return await self._write(
            binding, scope, title, text, source=source, provenance=provenance, kind=kind, secrets=secrets
        )

    async def _write(
        self, binding: MemoryBinding, scope: Scope, title: str, text: str, *, source: str,
        provenance: Provenance | None, kind: Literal["episode", "summary"] = "episode", secrets: tuple[str, ...] = (),
        index: bool = True,
    ) -> Episode:  # fmt: skip
        """Write the episode file; then, unless the caller indexes it itself (`index=False`), index it."""
        if looks_like_error(text):
            raise MemoryPolicyError("error text never becomes memory")
        now = datetime.now(UTC)
        episode = Episode(
            episode_id=new_episode_id(now),
            tenant_id=binding.tenant_id,
            worker_id=binding.worker_id,
            scope=str(scope),
            kind=kind,
            title=redact_for_memory(title, secrets)[:200],
            created_at=now,
            source=source,
            provenance=provenance
            or Provenance(run_id=binding.run_id, duty_id=binding.duty_id, thread_id=binding.thread_id),
            body=redact_for_memory(text, secrets),
        )
        owner = self.owner_of(binding, scope)
        await self.files.run(lambda: owner.episodes.write(episode))  # the file: on the loop when journaled
        if index:
            await asyncio.to_thread(owner.index_episode, episode)  # SQLite (and embeddings): a worker thread
        return episode

    async def record_run(self, binding: MemoryBinding, outcome: RunOutcome) -> Episode | None:
        """After a completed run: its episode (sealed into the duty or conversation scope), its
        turns for session search, reinforcement of what it recalled, and — when enabled — the
        preferences and decisions it showed. Never raises: memory must not fail a finished run.
        The two halves, `write_run` and `learn_from_run`, let a caller overlap the second with
        making the first durable."""
        episode = await self.write_run(binding, outcome)
        if episode is not None:
            await self.learn_from_run(binding, outcome, episode)
        return episode

    async def write_run(self, binding: MemoryBinding, outcome: RunOutcome) -> Episode | None:
        """The run's episode file (none for an empty or error answer, or with memory off). Never raises."""
        if not self.config.enabled:
            return None
        answer = outcome.answer.strip()
        if not answer or looks_like_error(answer):
            return None
        provenance = Provenance(
            run_id=binding.run_id, task_id=outcome.task_id, goal_id=outcome.goal_id, duty_id=binding.duty_id,
            thread_id=binding.thread_id, channel=outcome.channel,
        )  # fmt: skip
        title = outcome.user_text.strip().splitlines()[0] if outcome.user_text.strip() else "run"
        body = f"Request: {outcome.user_text.strip()}\n\nOutcome: {answer}"
        try:
            return await self._write(
                binding, _seal_scope(binding), title, body, source="run", provenance=provenance,
                secrets=outcome.secrets, index=False,
            )  # fmt: skip
        except Exception:
            log.exception("memory: recording run %s failed", binding.run_id)
            return None

    async def learn_from_run(self, binding: MemoryBinding, outcome: RunOutcome, episode: Episode) -> None:
        """What follows the episode file: the index (one thread hop for the episode and the turns),
        reinforcement of what the run recalled, extraction when enabled. Never raises."""
        await self._learn(binding, outcome, episode, None)

    def learn_later(self, binding: MemoryBinding, outcome: RunOutcome, episode: Episode) -> None:
        """`learn_from_run` in the background, so a turn can end without waiting for the index. Every
        read of the index (recall, continuation checks) first waits until the runs learnt so far are in
        it; `learned()` waits for the extraction too (at shutdown)."""
        indexed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(self._learn(binding, outcome, episode, indexed), name="memory-learn")
        self._indexing.add(indexed)
        indexed.add_done_callback(self._indexing.discard)
        self._learning.add(task)
        task.add_done_callback(self._learning.discard)
        task.add_done_callback(lambda _: _settle(indexed))  # also when cancelled before it started

    async def indexed(self) -> None:
        """Return once every run `learn_later` got so far is in the index (and reinforced)."""
        if self._indexing:
            await asyncio.wait(set(self._indexing))

    async def learned(self) -> None:
        """Return once every `learn_later` started so far is done, extraction included (they never raise)."""
        if self._learning:
            await asyncio.wait(set(self._learning))

    async def _learn(
        self, binding: MemoryBinding, outcome: RunOutcome, episode: Episode, indexed: asyncio.Future[None] | None
    ) -> None:
        try:
            await asyncio.to_thread(self._index_run, binding, _seal_scope(binding), outcome, episode)
            if outcome.recalled:
                await asyncio.to_thread(self._reinforce, binding, outcome.recalled)
        except Exception:
            log.exception("memory: recording run %s failed", binding.run_id)
        finally:
            if indexed is not None:
                _settle(indexed)
        try:
            if self.config.extract and self.llm is not None:
                await self._extract(binding, _seal_scope(binding), outcome)
        except Exception:
            log.exception("memory: recording run %s failed", binding.run_id)

    def _index_run(self, binding: MemoryBinding, scope: Scope, outcome: RunOutcome, episode: Episode) -> None:
        """The run's episode in its owner's index, and its turns in the worker's session search."""
        self.owner_of(binding, scope).index_episode(episode)
        if binding.thread_id is not None:
            self._index_turns(self.worker(binding.tenant_id, binding.worker_id), binding, outcome, episode)

    @staticmethod
    def _index_turns(owner: OwnerMemory, binding: MemoryBinding, outcome: RunOutcome, episode: Episode) -> None:
        assert binding.thread_id is not None
        channel = outcome.channel or "chat"
        turns = [
            IndexedMessage(f"{binding.run_id}:user", binding.thread_id, channel, "user",
                           redact_for_memory(outcome.user_text, outcome.secrets), episode.created_at, binding.run_id),
            IndexedMessage(f"{binding.run_id}:assistant", binding.thread_id, channel, "assistant",
                           redact_for_memory(outcome.answer, outcome.secrets), episode.created_at, binding.run_id),
        ]  # fmt: skip
        try:
            owner.index.add_messages(turns)
        except Exception:
            log.exception("memory: session search index missed run %s", binding.run_id)

    def _reinforce(self, binding: MemoryBinding, episode_ids: Sequence[str]) -> None:
        for owner in (self.worker(binding.tenant_id, binding.worker_id), self.tenant(binding.tenant_id)):
            for episode_id in episode_ids:
                if not episode_id.startswith("ep_") or not owner.episodes.exists(episode_id):
                    continue
                updated = owner.episodes.reinforce(episode_id, boost=self.config.reinforce_boost)
                if updated is not None and updated.reinforced_at is not None:
                    try:
                        owner.index.set_weight(episode_id, updated.weight, updated.reinforced_at)
                    except Exception:
                        log.exception("memory: reinforcing %s in the index failed", episode_id)

    async def _extract(self, binding: MemoryBinding, scope: Scope, outcome: RunOutcome) -> list[Statement]:
        assert self.llm is not None
        extraction = await extract_statements(self.llm, outcome.user_text, outcome.answer)
        stored = []
        for item in extraction.items:
            store = self.statements(binding.tenant_id, binding.worker_id, item.kind)
            evidence = Evidence(
                run_id=binding.run_id, thread_id=binding.thread_id, quote=redact_for_memory(item.quote, outcome.secrets)
            )
            value = redact_for_memory(item.value, outcome.secrets)
            stored.append(
                await asyncio.to_thread(
                    store.add, item.key, value, scope, replaces=item.replaces_previous, evidence=evidence
                )
            )
        return stored

    # -- candidates and promotion ------------------------------------------------------------

    async def propose(
        self, binding: MemoryBinding, text: str, *, kind: Literal["fact", "rule", "preference", "summary"] = "fact",
        target: Literal["worker", "tenant"] = "worker", title: str = "", secrets: tuple[str, ...] = (),
    ) -> Candidate | None:  # fmt: skip
        """A run's proposal for worker or tenant memory; learned rules and facts start `proposed`."""
        if looks_like_error(text):
            raise MemoryPolicyError("error text never becomes memory")
        store = self.candidates(binding.tenant_id, binding.worker_id)
        provenance = Provenance(run_id=binding.run_id, duty_id=binding.duty_id, thread_id=binding.thread_id)
        return await asyncio.to_thread(
            store.propose,
            redact_for_memory(text, secrets),
            kind=kind,
            title=title,
            target=target,
            provenance=provenance,
        )

    async def decide_candidate(
        self, tenant_id: str, worker_id: str, candidate_id: str, decision: Literal["approve", "reject"], by: str
    ) -> tuple[Candidate, Episode | None]:
        """Approve (the text becomes a worker or tenant episode) or reject (only a fingerprint stays)."""
        candidate = await asyncio.to_thread(self.candidates(tenant_id, worker_id).decide, candidate_id, decision, by)
        if candidate.status != "approved":
            return candidate, None
        binding = MemoryBinding(tenant_id, worker_id)
        scope = (
            Scope(ScopeKind.TENANT, tenant_id) if candidate.target == "tenant" else Scope(ScopeKind.WORKER, worker_id)
        )
        episode = await self._write(
            binding, scope, candidate.title or candidate.kind, candidate.text, source="promotion",
            provenance=candidate.provenance,
        )  # fmt: skip
        return candidate, episode

    # -- cross-channel recall ----------------------------------------------------------------

    async def check_continuation(self, binding: MemoryBinding, text: str, channel: str) -> CrossChannelOffer | None:
        """When `text` continues a matter from another channel: a pending offer (the worker asks)."""
        if binding.thread_id is None or not self.config.enabled:
            return None
        owner = self.worker(binding.tenant_id, binding.worker_id)
        await self.indexed()
        offer = await asyncio.to_thread(find_continuation, owner.index, text, binding.thread_id, channel)
        if offer is not None:
            await asyncio.to_thread(self.offers(binding.tenant_id, binding.worker_id).add, offer)
        return offer

    async def decide_offer(
        self, binding: MemoryBinding, offer_id: str, decision: Literal["accept", "decline"]
    ) -> Episode | None:
        """Accepted: the summary becomes an episode of the asking conversation; declined: nothing."""
        offer = await asyncio.to_thread(self.offers(binding.tenant_id, binding.worker_id).decide, offer_id, decision)
        if offer.status != "accepted":
            return None
        scope = Scope(ScopeKind.CONVERSATION, offer.thread_id)
        provenance = Provenance(thread_id=offer.thread_id, channel=offer.other_channel)
        return await self._write(
            binding, scope, f"Earlier on {offer.other_channel}", offer.summary, source="cross_channel",
            provenance=provenance,
        )  # fmt: skip

    # -- maintenance -------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            for owner in self._owners.values():
                owner.index.close()


_PLATFORMS = frozenset({"slack", "feishu", "wecom", "dingtalk", "email"})


def channel_of(source_type: str, source_id: str | None) -> str:
    """The channel a run came from: the IM platform for channel messages (source_id
    "platform:sender"), else the source type (chat, duty, schedule ...)."""
    platform = (source_id or "").partition(":")[0]
    return platform if source_type == "chat" and platform in _PLATFORMS else source_type


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _seal_scope(binding: MemoryBinding) -> Scope:
    if binding.duty_id:
        return Scope(ScopeKind.DUTY, binding.duty_id)
    if binding.thread_id:
        return Scope(ScopeKind.CONVERSATION, binding.thread_id)
    return Scope(ScopeKind.RUN, binding.run_id or "unbound")


# An FTS query ranks every document that shares a word with the question, so its cost grows with
# the index (about 1.5 ms at 1,000 matching documents, 29 ms at 20,000 on the bench machine):
# past this many documents a recall leaves the event loop, which would stall every other request.
INLINE_RECALL_DOCS = 1_000


def _read_inline(owner: OwnerMemory) -> bool:
    """Whether a recall may read `owner`'s index on the event loop: nothing to read, or an index
    already in line with the files and small."""
    if not owner.episodes.folder.is_dir():
        return True
    return owner.synced and owner.index.size_hint() <= INLINE_RECALL_DOCS


class LocalIndexProvider:
    """The embedded SQLite FTS5 index (plus vectors when embeddings are on) of the worker and tenant."""

    name = "local"

    def __init__(self, service: MemoryService) -> None:
        self.service = service

    async def recall(self, query: MemoryQuery) -> Sequence[MemoryHit]:
        b = query.binding
        owners = (self.service.worker(b.tenant_id, b.worker_id), self.service.tenant(b.tenant_id))
        if self.service.embed is None and all(_read_inline(o) for o in owners):
            # One small SQLite FTS read (WAL: it never waits for a writer), cheaper than a thread hop;
            # the first recall's sync of the files, a large index and any embedding: a worker thread.
            return self._recall(query)
        return await asyncio.to_thread(self._recall, query)

    def _recall(self, query: MemoryQuery) -> list[MemoryHit]:
        b = query.binding
        scopes = b.scopes()
        vector = self.service.embed([query.text])[0] if self.service.embed is not None else None
        hits: list[MemoryHit] = []
        for owner, owned in (
            (self.service.worker(b.tenant_id, b.worker_id), tuple(s for s in scopes if s.kind != ScopeKind.TENANT)),
            (self.service.tenant(b.tenant_id), tuple(s for s in scopes if s.kind == ScopeKind.TENANT)),
        ):
            if not owned or not owner.episodes.folder.is_dir():  # nothing remembered: create no index
                continue
            owner.sync()
            filters = SearchFilters(
                owned, query.goal_id, query.duty_id, query.kinds, query.since, query.until,
                exclude_runs=query.exclude_runs,
            )  # fmt: skip
            hits.extend(owner.index.search(query.text, filters, query.limit, query_vector=vector))
        return hits
