"""Recall over real files and a real SQLite FTS5 index: the right episode among 10,000 with
filters; the index deleted, corrupted or behind the files is rebuilt with nothing lost;
partitions and tenants are enforced; errors are never stored."""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from genworker.memory import MemoryBinding, MemoryQuery, MemoryService, RunOutcome, Scope, ScopeKind, reindex
from genworker.memory.config import MemoryConfig
from genworker.memory.errors import MemoryPolicyError
from genworker.memory.index import SearchFilters
from genworker.memory.models import Episode, Provenance, render_episode

pytestmark = pytest.mark.anyio

T0 = datetime(2026, 1, 1, tzinfo=UTC)
WORDS = tuple(
    " ".join(
        (
            "invoice vendor audit payment contract renewal meeting report budget forecast hiring onboarding",
            "laptop printer travel expense policy review quarterly monthly weekly customer ticket refund",
            "shipment warehouse inventory pricing discount launch campaign newsletter security incident",
        )
    ).split(" ")
)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    for tenant, worker in (("acme", "alice"), ("acme", "bob"), ("globex", "gina")):
        (tmp_path / "tenants" / tenant / "workers" / worker).mkdir(parents=True)
    return tmp_path


@pytest.fixture
def service(root: Path) -> Iterator[MemoryService]:
    svc = MemoryService(root)
    yield svc
    svc.close()


def make_episode(n: int, scope: str, body: str, *, goal: str | None, at: datetime, tenant: str = "acme") -> Episode:
    return Episode(
        episode_id=f"ep_{at:%Y%m%d%H%M%S}_{n:08x}",
        tenant_id=tenant,
        worker_id="alice",
        scope=scope,
        title=body.split(".")[0][:60],
        created_at=at,
        provenance=Provenance(run_id=f"run_{n}", goal_id=goal),
        body=body,
    )


def generated(count: int, seed: int = 7) -> Iterator[Episode]:
    rng = random.Random(seed)
    for n in range(count):
        body = " ".join(rng.choices(WORDS, k=24)) + "."
        yield make_episode(n, "worker:alice", body, goal=f"g{n % 10}", at=T0 + timedelta(minutes=53 * n))


def generate(folder: Path, count: int) -> None:
    """Episode files written straight to disk (a fixture, not the runtime's write path)."""
    folder.mkdir(parents=True, exist_ok=True)
    for episode in generated(count):
        (folder / f"{episode.episode_id}.md").write_text(render_episode(episode), encoding="utf-8")


def test_the_right_episode_among_10000_with_filters(root: Path, service: MemoryService) -> None:
    owner = service.worker("acme", "alice")
    target_at = T0 + timedelta(days=200, seconds=30)
    target = make_episode(
        99_999, "worker:alice", "Globex quarterly vendor audit: the printer contract renewal was approved.",
        goal="g3", at=target_at,
    )  # fmt: skip
    decoy = make_episode(
        99_998, "worker:alice", "Globex quarterly vendor audit: the printer contract renewal was rejected.",
        goal="g4", at=target_at,
    )  # fmt: skip
    owner.index.add([*generated(10_000), target, decoy])
    assert owner.index.count() == 10_002

    scopes = (Scope(ScopeKind.WORKER, "alice"),)
    query = "globex vendor audit printer contract renewal"
    by_goal = owner.index.search(query, SearchFilters(scopes, goal_id="g3"), 3)
    assert by_goal[0].episode_id == target.episode_id
    window = SearchFilters(scopes, since=target_at - timedelta(seconds=5), until=target_at + timedelta(seconds=5))
    assert {h.episode_id for h in owner.index.search(query, window, 5)} == {target.episode_id, decoy.episode_id}
    before = SearchFilters(scopes, until=target_at - timedelta(days=1), goal_id="g3")
    assert target.episode_id not in {h.episode_id for h in owner.index.search(query, before, 20)}
    assert owner.index.search(query, SearchFilters(scopes, kinds=("summary",)), 5) == []
    other_scope = SearchFilters((Scope(ScopeKind.DUTY, "alice"),))
    assert owner.index.search(query, other_scope, 5) == []


def test_reindex_rebuilds_from_the_files_and_reports_progress(root: Path, service: MemoryService) -> None:
    owner = service.worker("acme", "alice")
    generate(owner.episodes.folder, 300)
    progress: list[tuple[int, int]] = []
    assert reindex(root, "acme", "alice", lambda done, total: progress.append((done, total))) == 300
    assert progress[-1] == (300, 300)
    with pytest.raises(FileNotFoundError, match="no worker 'nobody'"):
        reindex(root, "acme", "nobody")


async def test_recall_through_the_service_finds_it_with_the_goal_filter(root: Path, service: MemoryService) -> None:
    owner = service.worker("acme", "alice")
    generate(owner.episodes.folder, 400)
    target = make_episode(77_777, "worker:alice", "Hiring plan: onboarding laptop for Zhang Wei.", goal="g5", at=T0)
    owner.episodes.write(target)
    binding = MemoryBinding("acme", "alice", run_id="r_now")
    result = await service.recall(MemoryQuery("onboarding laptop Zhang Wei", binding, goal_id="g5"))
    assert result.status == "ok"
    assert result.hits[0].episode_id == target.episode_id


def test_a_deleted_index_is_rebuilt_from_the_files(root: Path, service: MemoryService) -> None:
    owner = service.worker("acme", "alice")
    generate(owner.episodes.folder, 50)
    assert owner.reindex() == 50
    service.close()
    owner.index.path.unlink()
    fresh = MemoryService(root)
    try:
        again = fresh.worker("acme", "alice")
        assert again.index.count() == 50
        assert again.index.rebuilds == 1
    finally:
        fresh.close()


def test_a_corrupted_index_is_rebuilt_with_nothing_lost(root: Path, service: MemoryService) -> None:
    owner = service.worker("acme", "alice")
    generate(owner.episodes.folder, 40)
    owner.reindex()
    service.close()
    owner.index.path.write_bytes(b"this is not a database" * 100)
    fresh = MemoryService(root)
    try:
        again = fresh.worker("acme", "alice")
        hits = again.index.search(WORDS[0], SearchFilters((Scope(ScopeKind.WORKER, "alice"),)), 100)
        assert hits and again.index.count() == 40
        assert len(list(again.episodes.scan())) == 40
    finally:
        fresh.close()


async def test_an_index_failure_never_blocks_the_write_and_the_next_recall_catches_up(
    root: Path, service: MemoryService
) -> None:
    owner = service.worker("acme", "alice")

    def broken(_episodes: object) -> None:
        raise OSError("disk full (index only)")

    owner.index.add = broken  # type: ignore[method-assign]
    binding = MemoryBinding("acme", "alice", run_id="r1", thread_id="t1")
    episode = await service.record_run(binding, RunOutcome("Book the Berlin offsite", "Booked the Berlin offsite."))
    assert episode is not None and owner.episodes.exists(episode.episode_id)
    del owner.index.add  # the index works again
    later = await service.recall(MemoryQuery("Berlin offsite", MemoryBinding("acme", "alice", thread_id="t1")))
    assert [h.episode_id for h in later.hits] == [episode.episode_id]


async def test_recall_waits_for_runs_learnt_in_the_background_but_not_for_their_extraction(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`learn_later`: a recall started while the index update is held waits for it and finds the
    run; it does not wait for extraction (a model call), which `learned()` waits for."""
    held, release = threading.Event(), threading.Event()
    extracting, finish = asyncio.Event(), asyncio.Event()
    real_index = MemoryService._index_run

    def index_run(self: MemoryService, *args: Any) -> None:
        held.set()
        assert release.wait(30), "the test never released the index update"
        real_index(self, *args)

    async def extract(self: MemoryService, *args: Any) -> list[Any]:
        extracting.set()
        await finish.wait()
        return []

    service = MemoryService(root, MemoryConfig(extract=True), llm=object())  # type: ignore[arg-type]
    try:
        duty = MemoryBinding("acme", "alice", run_id="r1", duty_id="billing")
        later = MemoryQuery("ledger invoices", replace(duty, run_id="r2"))
        await service.write_run(replace(duty, run_id="r0"), RunOutcome("Plan the offsite", "Offsite planned."))
        assert (await service.recall(later)).hits == ()  # the index is synced with the files from here on
        monkeypatch.setattr(MemoryService, "_index_run", index_run)
        monkeypatch.setattr(MemoryService, "_extract", extract)
        outcome = RunOutcome("Reconcile the ledger", "Ledger reconciled, 3 invoices open.")
        episode = await service.write_run(duty, outcome)
        assert episode is not None
        service.learn_later(duty, outcome, episode)
        assert await asyncio.to_thread(held.wait, 30)
        recall = asyncio.create_task(service.recall(later))
        for _ in range(100):  # an index read that does not wait is done within a few loop passes
            await asyncio.sleep(0)
        assert not recall.done()
        release.set()
        assert [h.episode_id for h in (await recall).hits] == [episode.episode_id]
        await asyncio.wait_for(extracting.wait(), 30)  # recall returned while extraction runs
        learned = asyncio.create_task(service.learned())
        await asyncio.sleep(0)
        assert not learned.done()
        finish.set()
        await asyncio.wait_for(learned, 30)
    finally:
        service.close()


async def test_a_run_bound_to_one_scope_never_sees_another(service: MemoryService) -> None:
    a = MemoryBinding("acme", "alice", run_id="r1", duty_id="billing")
    b = MemoryBinding("acme", "alice", run_id="r2", thread_id="chat-7")
    await service.record_run(a, RunOutcome("Reconcile the ledger", "Ledger reconciled, 3 invoices open."))
    await service.record_run(b, RunOutcome("Ledger question", "The ledger looks fine to me."))
    same_duty = MemoryBinding("acme", "alice", run_id="r3", duty_id="billing")
    other = MemoryBinding("acme", "alice", run_id="r4", duty_id="hiring")
    seen = await service.recall(MemoryQuery("ledger invoices", same_duty))
    assert [h.scope for h in seen.hits] == [Scope(ScopeKind.DUTY, "billing")]
    assert (await service.recall(MemoryQuery("ledger invoices", other))).hits == ()
    in_chat = await service.recall(MemoryQuery("ledger", MemoryBinding("acme", "alice", thread_id="chat-7")))
    assert [h.scope for h in in_chat.hits] == [Scope(ScopeKind.CONVERSATION, "chat-7")]


async def test_a_run_writes_only_its_own_run_scope(service: MemoryService) -> None:
    binding = MemoryBinding("acme", "alice", run_id="r1")
    await service.write_episode(binding, Scope(ScopeKind.RUN, "r1"), "scratch", "Tried vendor A first.")
    for scope in (Scope(ScopeKind.WORKER, "alice"), Scope(ScopeKind.TENANT, "acme"), Scope(ScopeKind.RUN, "r2")):
        with pytest.raises(MemoryPolicyError, match="writes only to its own run scope"):
            await service.write_episode(binding, scope, "t", "x")
    assert (await service.recall(MemoryQuery("vendor", binding))).hits[0].scope == Scope(ScopeKind.RUN, "r1")
    assert (await service.recall(MemoryQuery("vendor", MemoryBinding("acme", "alice", run_id="r9")))).hits == ()


async def test_promotion_to_worker_and_tenant_needs_an_approval(service: MemoryService) -> None:
    binding = MemoryBinding("acme", "alice", run_id="r1")
    worker_fact = await service.propose(binding, "Finance wants invoices as PDF", title="invoice format")
    tenant_fact = await service.propose(binding, "ACME fiscal year starts in April", target="tenant")
    assert worker_fact is not None and tenant_fact is not None
    later = MemoryBinding("acme", "alice", run_id="r2")
    assert (await service.recall(MemoryQuery("invoices PDF fiscal year", later))).hits == ()
    await service.decide_candidate("acme", "alice", worker_fact.candidate_id, "approve", "owner")
    await service.decide_candidate("acme", "alice", tenant_fact.candidate_id, "approve", "owner")
    result = await service.recall(MemoryQuery("invoices PDF fiscal year", later))
    assert [str(h.scope) for h in result.hits] == ["worker:alice", "tenant:acme"]
    bobs = await service.recall(MemoryQuery("invoices PDF fiscal year", MemoryBinding("acme", "bob")))
    assert [str(h.scope) for h in bobs.hits] == ["tenant:acme"]  # same tenant, other worker


async def test_tenant_b_never_sees_tenant_a(root: Path, service: MemoryService) -> None:
    a = MemoryBinding("acme", "alice", run_id="r1")
    candidate = await service.propose(a, "The vault code rotates on Mondays", target="tenant")
    assert candidate is not None
    await service.decide_candidate("acme", "alice", candidate.candidate_id, "approve", "owner")
    await service.record_run(
        MemoryBinding("acme", "alice", thread_id="t1"), RunOutcome("vault code", "The vault code rotates weekly.")
    )
    for binding in (MemoryBinding("globex", "gina", thread_id="t1"), MemoryBinding("globex", "alice", thread_id="t1")):
        assert (await service.recall(MemoryQuery("vault code rotates Mondays", binding))).hits == ()
    assert not (root / "tenants" / "globex" / "memory").exists()


async def test_errors_and_failed_runs_are_never_stored(service: MemoryService) -> None:
    binding = MemoryBinding("acme", "alice", run_id="r1", thread_id="t1")
    for answer in ("Error: provider returned 502", "every model in the fallback chain failed: fast: timeout", "  "):
        assert await service.record_run(binding, RunOutcome("do it", answer)) is None
    with pytest.raises(MemoryPolicyError, match="error text never becomes memory"):
        await service.propose(binding, "Traceback (most recent call last):\n boom")
    assert not service.worker("acme", "alice").episodes.folder.exists()


async def test_secrets_and_reasoning_are_redacted_before_the_file_is_written(service: MemoryService) -> None:
    binding = MemoryBinding("acme", "alice", run_id="r1", thread_id="t1")
    episode = await service.record_run(
        binding,
        RunOutcome(
            "Rotate the key, the old one is sk-abcdefghijklmnopqrstuv",
            "<think>hidden plan</think>Rotated. New password: Tr0ub4dor&3 stored in the vault.",
            secrets=("vault-master-99",),
        ),
    )
    assert episode is not None
    on_disk = service.worker("acme", "alice").episodes.path_of(episode.episode_id).read_text(encoding="utf-8")
    for leaked in ("sk-abcdefghijklmnopqrstuv", "Tr0ub4dor&3", "hidden plan"):
        assert leaked not in on_disk
    assert "[REDACTED]" in on_disk


async def test_recalled_and_used_episodes_are_reinforced(service: MemoryService) -> None:
    first = MemoryBinding("acme", "alice", run_id="r1", duty_id="weekly")
    episode = await service.record_run(first, RunOutcome("weekly report", "Sent the weekly sales report."))
    assert episode is not None
    second = MemoryBinding("acme", "alice", run_id="r2", duty_id="weekly")
    recalled = await service.recall(MemoryQuery("weekly sales report", second))
    used = tuple(h.episode_id for h in recalled.hits)
    await service.record_run(second, RunOutcome("weekly report", "Sent it again.", recalled=used))
    assert service.worker("acme", "alice").episodes.read(episode.episode_id).recall_count == 1


async def test_recall_reads_the_index_on_the_loop_once_the_files_are_synced(
    service: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first recall syncs the index with the files in a worker thread; later ones (no
    embedding model) read SQLite on the event loop, where a thread hop would cost more."""
    import threading

    from genworker.memory.service import LocalIndexProvider

    threads: list[int] = []
    real = LocalIndexProvider._recall

    def recording(self: LocalIndexProvider, query: MemoryQuery) -> Any:
        threads.append(threading.get_ident())
        return real(self, query)

    monkeypatch.setattr(LocalIndexProvider, "_recall", recording)
    binding = MemoryBinding("acme", "alice", run_id="run_1", thread_id="t1")
    await service.record_run(
        binding, RunOutcome("what is the vendor audit about?", "The vendor audit covers payments.")
    )
    first = await service.recall_for_run(binding, "vendor audit")
    second = await service.recall_for_run(binding, "vendor audit")
    loop_thread = threading.get_ident()
    assert threads[0] != loop_thread and threads[1] == loop_thread
    assert [h.episode_id for h in first.hits] == [h.episode_id for h in second.hits] != []


async def test_recall_of_a_large_index_leaves_the_loop(service: MemoryService, monkeypatch: pytest.MonkeyPatch) -> None:
    """An FTS query's cost grows with the documents that match: past INLINE_RECALL_DOCS a synced
    index is read in a worker thread, so a long-lived worker's recall cannot stall the loop."""
    import threading

    from genworker.memory import service as service_module

    threads: list[int] = []
    real = service_module.LocalIndexProvider._recall

    def recording(self: service_module.LocalIndexProvider, query: MemoryQuery) -> Any:
        threads.append(threading.get_ident())
        return real(self, query)

    monkeypatch.setattr(service_module.LocalIndexProvider, "_recall", recording)
    binding = MemoryBinding("acme", "alice", run_id="run_1", thread_id="t1")
    for n in range(2):
        await service.record_run(replace(binding, run_id=f"run_{n}"), RunOutcome(f"vendor audit {n}", "Payments."))
    await service.recall_for_run(binding, "vendor audit")  # syncs the index (a thread)
    # the limit: the index as it is now (each run's episode, and its two messages for session search)
    monkeypatch.setattr(service_module, "INLINE_RECALL_DOCS", service.worker("acme", "alice").index.size_hint())
    small = await service.recall_for_run(binding, "vendor audit")
    await service.record_run(replace(binding, run_id="run_2"), RunOutcome("vendor audit 2", "Payments."))
    large = await service.recall_for_run(binding, "vendor audit")
    loop_thread = threading.get_ident()
    assert threads[1] == loop_thread and threads[2] != loop_thread
    assert len(large.hits) == len(small.hits) + 1


def test_the_index_size_hint_bounds_its_documents(tmp_path: Path) -> None:
    from genworker.memory.index import MemoryIndex

    index = MemoryIndex(tmp_path / "index.sqlite3", lambda: ())
    assert index.size_hint() == 0
    episodes = list(generated(3))
    index.add(episodes)
    index.remove([episodes[0].episode_id])
    assert index.size_hint() >= index.count() == 2
    index.close()
