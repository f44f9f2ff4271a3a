"""Learning through evaluation (memory/promotion.py): a run's candidate climbs run -> duty -> worker ->
tenant one level at a time, only through the evaluation gate, with its provenance; a conflicting later
fact supersedes the earlier one in time; a rollback brings the earlier one back."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from genworker.memory.candidates import Candidate, CandidateStore
from genworker.memory.episodes import worker_memory_dir
from genworker.memory.models import MemoryBinding, MemoryQuery, Provenance
from genworker.memory.orchestrator import MemoryOrchestrator
from genworker.memory.promotion import (
    Evaluation,
    FactsProvider,
    PromotionNotFound,
    PromotionRefused,
    Promotions,
    SupervisorVerdict,
)

pytestmark = pytest.mark.anyio

PASSED = Evaluation(kind="replay", ref="run_replay", passed=True)
CALM = SupervisorVerdict(state="resolved", decisions=1, policies=("strict",))


def _clock() -> Iterator[datetime]:
    t = datetime(2026, 5, 1, 12, tzinfo=UTC)
    while True:
        yield t
        t += timedelta(hours=1)


@pytest.fixture
def promotions(tmp_path: Path) -> Promotions:
    ticks = _clock()
    return Promotions(tmp_path, clock=lambda: next(ticks))


def propose(root: Path, text: str, *, title: str = "invoice cc", duty: str | None = "billing") -> Candidate:
    store = CandidateStore(worker_memory_dir(root, "acme", "alice"))
    made = store.propose(text, title=title, provenance=Provenance(run_id="run_1", task_id="task_1", duty_id=duty))
    assert made is not None
    return made


def test_the_gate_refuses_without_a_passing_evaluation_or_with_an_open_objection(
    tmp_path: Path, promotions: Promotions
) -> None:
    c = propose(tmp_path, "CC finance on invoices over 10k")
    failed = Evaluation(kind="experiment", ref="exp1", passed=False, detail="2 of 3 checks failed")
    for evaluation, supervisor, code in [
        (None, CALM, "evaluation_required"),
        (failed, CALM, "evaluation_failed"),
        (PASSED, SupervisorVerdict(state="attention_required"), "supervisor_objected"),
        (PASSED, SupervisorVerdict(state="paused"), "supervisor_objected"),
    ]:
        with pytest.raises(PromotionRefused) as refused:
            promotions.promote("acme", "alice", c.candidate_id, "duty", evaluation, supervisor, "key:k1")
        assert refused.value.code == code
    assert promotions.facts("acme", "alice") == []  # nothing written by a refusal


def test_one_level_at_a_time_with_provenance_up_to_the_tenant(tmp_path: Path, promotions: Promotions) -> None:
    c = propose(tmp_path, "CC finance on invoices over 10k")
    with pytest.raises(PromotionRefused) as skipped:
        promotions.promote("acme", "alice", c.candidate_id, "worker", PASSED, CALM, "key:k1")
    assert skipped.value.code == "not_next_level" and "goes to duty next" in str(skipped.value)
    duty = promotions.promote("acme", "alice", c.candidate_id, "duty", PASSED, CALM, "key:k1")
    experiment = Evaluation(kind="experiment", ref="exp1", passed=True)
    worker = promotions.promote("acme", "alice", c.candidate_id, "worker", experiment, CALM, "key:k1")
    tenant = promotions.promote("acme", "alice", c.candidate_id, "tenant", PASSED, CALM, "key:k1")
    assert [f.scope for f in (duty, worker, tenant)] == ["duty:billing", "worker:alice", "tenant:acme"]
    p = worker.provenance
    assert (p.run_id, p.task_id, p.candidate_id, p.from_scope, p.from_fact) == (
        "run_1", "task_1", c.candidate_id, "duty:billing", duty.fact_id,
    )  # fmt: skip
    assert p.experiment_id == "exp1" and p.supervisor == CALM and p.promoted_by == "key:k1"
    assert duty.provenance.from_scope == "run:run_1"
    assert (tmp_path / "tenants/acme/memory/facts.jsonl").is_file()  # the tenant's own file
    with pytest.raises(PromotionRefused, match="at the top"):
        promotions.promote("acme", "alice", c.candidate_id, "tenant", PASSED, CALM, "key:k1")


def test_a_run_without_a_duty_goes_straight_to_the_worker(tmp_path: Path, promotions: Promotions) -> None:
    c = propose(tmp_path, "The office closes at 6", title="office hours", duty=None)
    fact = promotions.promote("acme", "alice", c.candidate_id, "worker", PASSED, CALM, "key:k1")
    assert fact.scope == "worker:alice" and fact.provenance.from_scope == "run:run_1"


def test_a_conflicting_fact_supersedes_in_time_and_a_rollback_restores_the_earlier(
    tmp_path: Path, promotions: Promotions
) -> None:
    first = propose(tmp_path, "CC finance on invoices over 10k")
    second = propose(tmp_path, "CC finance on invoices over 5k")
    old = promotions.promote("acme", "alice", first.candidate_id, "duty", PASSED, CALM, "key:k1")
    new = promotions.promote("acme", "alice", second.candidate_id, "duty", PASSED, CALM, "key:k1")
    facts = {f.fact_id: f for f in promotions.facts("acme", "alice")}
    kept = facts[old.fact_id]
    assert (kept.status, kept.valid_to, kept.superseded_by) == ("superseded", new.valid_from, new.fact_id)
    assert facts[new.fact_id].supersedes == (old.fact_id,)
    assert kept.valid_at(old.valid_from) and not kept.valid_at(new.valid_from)  # both kept, each in its time
    with pytest.raises(PromotionRefused) as again:
        promotions.promote("acme", "alice", second.candidate_id, "duty", PASSED, CALM, "key:k1")
    assert again.value.code == "not_next_level"
    with pytest.raises(PromotionRefused) as superseded:
        promotions.rollback("acme", "alice", old.fact_id, "key:k1")
    assert superseded.value.code == "not_active"

    rolled = promotions.rollback("acme", "alice", new.fact_id, "key:k2")
    facts = {f.fact_id: f for f in promotions.facts("acme", "alice")}
    assert (rolled.status, rolled.rolled_back_by) == ("rolled_back", "key:k2")
    assert (facts[old.fact_id].status, facts[old.fact_id].valid_to, facts[old.fact_id].superseded_by) == (
        "active", None, None,
    )  # fmt: skip
    # the rolled-back candidate is back at the run level: it may be evaluated and promoted again
    assert promotions.next_level(second, promotions.facts("acme", "alice")) == "duty"


def test_a_rollback_under_a_further_promotion_is_refused(tmp_path: Path, promotions: Promotions) -> None:
    c = propose(tmp_path, "CC finance on invoices over 10k")
    duty = promotions.promote("acme", "alice", c.candidate_id, "duty", PASSED, CALM, "key:k1")
    promotions.promote("acme", "alice", c.candidate_id, "worker", PASSED, CALM, "key:k1")
    with pytest.raises(PromotionRefused) as refused:
        promotions.rollback("acme", "alice", duty.fact_id, "key:k1")
    assert refused.value.code == "promoted_further"
    with pytest.raises(PromotionNotFound):
        promotions.rollback("acme", "alice", "fact_nope", "key:k1")
    with pytest.raises(PromotionNotFound):
        promotions.promote("acme", "alice", "cand_nope", "duty", PASSED, CALM, "key:k1")


async def test_active_facts_are_recalled_only_in_their_bound_scopes(tmp_path: Path, promotions: Promotions) -> None:
    c = propose(tmp_path, "CC finance on invoices over 10k")
    duty = promotions.promote("acme", "alice", c.candidate_id, "duty", PASSED, CALM, "key:k1")
    provider = FactsProvider(lambda b: [promotions.worker_facts(b.tenant_id, b.worker_id)])
    bound = MemoryQuery("invoices", MemoryBinding("acme", "alice", run_id="r2", duty_id="billing"))
    other = MemoryQuery("invoices", MemoryBinding("acme", "alice", run_id="r3", duty_id="support"))
    assert [h.episode_id for h in await provider.recall(bound)] == [duty.fact_id]
    assert await provider.recall(other) == []
    promotions.rollback("acme", "alice", duty.fact_id, "key:k1")
    assert await provider.recall(bound) == []


async def test_one_key_with_other_values_in_two_layers_is_flagged_conflicting(
    tmp_path: Path, promotions: Promotions
) -> None:
    duty = propose(tmp_path, "CC finance on invoices over 10k")
    worker = propose(tmp_path, "CC finance on invoices over 5k", duty=None)
    promotions.promote("acme", "alice", duty.candidate_id, "duty", PASSED, CALM, "key:k1")
    promotions.promote("acme", "alice", worker.candidate_id, "worker", PASSED, CALM, "key:k1")
    provider = FactsProvider(lambda b: [promotions.worker_facts(b.tenant_id, b.worker_id)])
    binding = MemoryBinding("acme", "alice", run_id="r2", duty_id="billing")
    recalled = await MemoryOrchestrator([provider]).query(MemoryQuery("invoices", binding))
    assert sorted((h.scope.kind.value, h.conflict) for h in recalled.hits) == [("duty", True), ("worker", True)]
