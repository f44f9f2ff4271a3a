"""Growth control and cross-channel recall over real files and the real index."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from genworker.api.app import create_app
from genworker.memory import MemoryBinding, MemoryQuery, MemoryService, RunOutcome, consolidate
from genworker.memory.consolidation import consolidate_workspace
from genworker.memory.index import SearchFilters
from genworker.memory.models import Episode, Provenance, Scope, ScopeKind
from genworker.settings import load_settings

pytestmark = pytest.mark.anyio

NOW = datetime(2026, 6, 1, tzinfo=UTC)


@pytest.fixture
def service(tmp_path: Path) -> Iterator[MemoryService]:
    (tmp_path / "tenants" / "acme" / "workers" / "alice").mkdir(parents=True)
    svc = MemoryService(tmp_path)
    yield svc
    svc.close()


def old_episode(n: int, at: datetime, goal: str = "g1") -> Episode:
    return Episode(
        episode_id=f"ep_{at:%Y%m%d%H%M%S}_{n:08x}",
        tenant_id="acme",
        worker_id="alice",
        scope="worker:alice",
        title=f"Stand-up {n}",
        created_at=at,
        provenance=Provenance(goal_id=goal),
        body=f"Stand-up number {n}: shipped feature {n}, blocked on review {n}.",
    )


def test_old_episodes_are_folded_into_summaries_and_archived(service: MemoryService) -> None:
    owner = service.worker("acme", "alice")
    january = [old_episode(n, datetime(2026, 1, 2 + n, tzinfo=UTC)) for n in range(6)]
    few = [old_episode(10 + n, datetime(2026, 2, 2 + n, tzinfo=UTC)) for n in range(2)]  # too few to fold
    recent = [old_episode(20 + n, NOW - timedelta(days=n + 1)) for n in range(3)]
    for e in (*january, *few, *recent):
        owner.write(e)
    report = consolidate(owner, older_than=timedelta(days=90), min_group=5, now=NOW)
    assert (report.summaries, report.archived, report.active) == (1, 6, 6)
    active = list(owner.episodes.scan())
    summary = next(e for e in active if e.kind == "summary")
    assert summary.consolidated_from == tuple(e.episode_id for e in january)
    assert "shipped feature 3" in summary.body
    assert all((owner.episodes.archive / f"{e.episode_id}.md").is_file() for e in january)  # originals kept
    scopes = (Scope(ScopeKind.WORKER, "alice"),)
    hits = owner.index.search("shipped feature 3", SearchFilters(scopes), 20)
    assert summary.episode_id in {h.episode_id for h in hits}
    assert not {e.episode_id for e in january} & {h.episode_id for h in hits}
    assert owner.reindex() == 6  # the rebuilt index holds only the active set


def test_max_active_bounds_the_active_index(service: MemoryService) -> None:
    owner = service.worker("acme", "alice")
    for n in range(30):
        owner.write(old_episode(n, NOW - timedelta(days=30 - n, hours=1)))
    report = consolidate(owner, older_than=timedelta(days=365), min_group=2, max_active=10, now=NOW)
    assert report.active <= 10 + report.summaries
    assert owner.index.count() == report.active


async def test_a_continuation_from_another_channel_is_offered_before_it_is_used(service: MemoryService) -> None:
    slack = MemoryBinding("acme", "alice", run_id="r1", thread_id="slack-c42")
    await service.record_run(
        slack,
        RunOutcome(
            "The Hamburg warehouse lease renewal is due in May, please track it.",
            "Noted: Hamburg warehouse lease renewal due in May; I will track it.",
            channel="slack",
        ),
    )
    email = MemoryBinding("acme", "alice", run_id="r2", thread_id="mail-7")
    assert await service.check_continuation(email, "Hamburg warehouse lease: what was the date?", "email") is None
    offer = await service.check_continuation(email, "Any update on the Hamburg warehouse lease?", "email")
    assert offer is not None
    assert (offer.other_thread_id, offer.other_channel) == ("slack-c42", "slack")
    assert "Shall I bring" in offer.question and "Hamburg" in offer.summary
    before = await service.recall(MemoryQuery("Hamburg warehouse lease", email))
    assert before.hits == ()  # nothing is injected before the person says yes
    episode = await service.decide_offer(email, offer.offer_id, "accept")
    assert episode is not None
    after = await service.recall(MemoryQuery("Hamburg warehouse lease", email))
    assert [str(h.scope) for h in after.hits] == ["conversation:mail-7"]
    with pytest.raises(ValueError, match="already accepted"):
        await service.decide_offer(email, offer.offer_id, "decline")
    same_channel = MemoryBinding("acme", "alice", run_id="r3", thread_id="slack-c43")
    assert await service.check_continuation(same_channel, "Any update on the Hamburg lease?", "slack") is None


def test_the_workspace_sweep_consolidates_every_worker(service: MemoryService, tmp_path: Path) -> None:
    owner = service.worker("acme", "alice")
    for n in range(6):
        owner.write(old_episode(n, datetime(2026, 1, 2 + n, tzinfo=UTC)))
    service.close()
    (tmp_path / "tenants" / "acme" / "workers" / "empty").mkdir()
    reports = consolidate_workspace(tmp_path, now=NOW)
    assert list(reports) == [("acme", "alice")]
    assert (reports[("acme", "alice")].summaries, reports[("acme", "alice")].archived) == (1, 6)


def test_the_workspace_sweep_leaves_workers_another_process_owns(service: MemoryService, tmp_path: Path) -> None:
    for worker in ("alice", "bob"):
        owner = service.worker("acme", worker)
        for n in range(6):
            owner.write(old_episode(n, datetime(2026, 1, 2 + n, tzinfo=UTC)))
    service.close()
    reports = consolidate_workspace(tmp_path, now=NOW, only=lambda tenant, worker: worker == "bob")
    assert list(reports) == [("acme", "bob")]
    assert not (tmp_path / "tenants/acme/workers/alice/memory/archive").exists()


def test_the_runtime_consolidates_on_its_schedule(small_workspace: Callable[..., Path], tmp_path: Path) -> None:
    workspace = small_workspace({"acme": ["alice"]})
    seeded = MemoryService(workspace)
    january = [old_episode(n, datetime(2026, 1, 2 + n, tzinfo=UTC)) for n in range(6)]
    for e in january:
        seeded.worker("acme", "alice").write(e)
    seeded.close()
    (tmp_path / "configs").mkdir()
    env = {"GENWORKER_HOT_RELOAD": "false", "GENWORKER_MEMORY_CONSOLIDATE_S": "0.05"}
    with TestClient(create_app(load_settings(tmp_path / "configs", env, workspace=workspace))) as client:
        runtime = client.app.state.runtime  # type: ignore[attr-defined]
        deadline = time.monotonic() + 60
        while runtime.memory_consolidations < 1:
            assert time.monotonic() < deadline, "the consolidation job never ran"
            time.sleep(0.05)  # waiting for the runtime's own scheduled pass
    archive = workspace / "tenants/acme/workers/alice/memory/archive/episodes"
    assert sorted(p.stem for p in archive.glob("*.md")) == sorted(e.episode_id for e in january)
