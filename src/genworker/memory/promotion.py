"""Learning through evaluation (GoodBuddy §2.4, §11.2; issue #33): a memory candidate a run proposed
climbs run -> duty -> worker -> tenant one level at a time. Each step is a promotion that passed the
evaluation gate (a replay run or an experiment that passed, and no open supervisor objection to the run
it came from) and records its provenance. A promoted fact that disagrees with the target scope's fact on
the same key supersedes it in time (`valid_to`, `supersedes` / `superseded_by`); nothing is overwritten.
Rolling a promotion back ends its fact and makes what it superseded valid again.

Files (JSONL, schema_version 1): `memory/facts.jsonl` of the worker (duty and worker scope) and of the
tenant (tenant scope). A fact is its own promotion record: `fact_id` names both.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from genworker.memory.candidates import Candidate, CandidateStore
from genworker.memory.episodes import tenant_memory_dir, worker_memory_dir
from genworker.memory.errors import MemoryPolicyError
from genworker.memory.jsonl import JsonlFile
from genworker.memory.models import MemoryBinding, MemoryHit, MemoryQuery, Provenance, Scope, ScopeKind
from genworker.memory.preferences import normalise_key
from genworker.memory.redaction import looks_like_error, redact_for_memory

__all__ = [
    "LEVELS",
    "Evaluation",
    "Fact",
    "FactStore",
    "FactsProvider",
    "Level",
    "PromotionNotFound",
    "PromotionRefused",
    "Promotions",
    "SupervisorVerdict",
    "gate",
    "propose_from_run",
]

Level = Literal["run", "duty", "worker", "tenant"]
LEVELS: tuple[Level, ...] = ("run", "duty", "worker", "tenant")
# supervisor states of the source run that keep its candidates where they are (docs/supervisor.md)
_OBJECTING = frozenset({"attention_required", "paused"})


class PromotionRefused(Exception):
    """The gate or the fact history refuses this promotion or rollback; `code` says which rule."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class PromotionNotFound(LookupError):
    pass


class _Value(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Evaluation(_Value):
    """What the gate was shown: a replay run, or an experiment, and whether it passed."""

    kind: Literal["replay", "experiment"]
    ref: str  # the replay's run id, or the experiment id
    passed: bool
    detail: str = ""


class SupervisorVerdict(_Value):
    """The supervisor's state for the run the candidate came from ("unsupervised" without a record)."""

    state: str = "unsupervised"
    decisions: int = 0
    policies: tuple[str, ...] = ()


class FactProvenance(_Value):
    candidate_id: str
    worker_id: str  # whose candidate it was
    run_id: str | None = None
    task_id: str | None = None
    thread_id: str | None = None
    duty_id: str | None = None
    from_scope: str  # the partition it was promoted from: run:<id>, duty:<id>, worker:<id>
    from_fact: str | None = None  # the lower level's fact it was promoted from
    supervisor: SupervisorVerdict
    evaluation: Evaluation
    experiment_id: str | None = None
    promoted_by: str
    promoted_at: datetime


class Fact(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    fact_id: str
    key: str
    value: str
    scope: str  # duty:<id> | worker:<id> | tenant:<id>
    kind: str = "fact"
    status: Literal["active", "superseded", "rolled_back"] = "active"
    valid_from: datetime
    valid_to: datetime | None = None
    supersedes: tuple[str, ...] = ()  # the facts this promotion ended (brought back by its rollback)
    superseded_by: str | None = None
    rolled_back_by: str | None = None
    provenance: FactProvenance

    @property
    def level(self) -> Level:
        kind = Scope.parse(self.scope).kind.value
        assert kind in ("duty", "worker", "tenant")
        return kind  # type: ignore[return-value]

    def valid_at(self, when: datetime) -> bool:
        ended = self.valid_to is not None and when >= self.valid_to
        return self.status != "rolled_back" and self.valid_from <= when and not ended


def propose_from_run(
    root: Path, tenant_id: str, worker_id: str, text: str, key: str,
    kind: Literal["fact", "rule", "preference", "summary"], provenance: Provenance,
) -> Candidate:  # fmt: skip
    """A candidate in the run's partition (`provenance` names the run): secrets masked, error text
    refused (MemoryPolicyError), the same text proposed or rejected before refused (`candidate_exists`)."""
    if looks_like_error(text):
        raise MemoryPolicyError("error text never becomes memory")
    store = CandidateStore(worker_memory_dir(root, tenant_id, worker_id))
    made = store.propose(redact_for_memory(text, ()), kind=kind, title=key.strip(), provenance=provenance)
    if made is None:
        raise PromotionRefused("candidate_exists", "this text was already proposed (or rejected) as a memory candidate")
    return made


def gate(evaluation: Evaluation | None, supervisor: SupervisorVerdict) -> None:
    """Raise PromotionRefused unless the candidate may go up a level: an evaluation that passed, and no
    open supervisor objection (attention required, paused) to its run."""
    if evaluation is None:
        raise PromotionRefused(
            "evaluation_required", "a promotion needs an evaluation: a replay run or an experiment that passed"
        )
    if not evaluation.passed:
        why = f": {evaluation.detail}" if evaluation.detail else ""
        raise PromotionRefused("evaluation_failed", f"{evaluation.kind} {evaluation.ref!r} did not pass{why}")
    if supervisor.state in _OBJECTING:
        raise PromotionRefused(
            "supervisor_objected",
            f"the supervisor's state for the candidate's run is {supervisor.state}; resolve it first",
        )


class FactStore:
    def __init__(self, memory_dir: Path) -> None:
        self.file: JsonlFile[Fact] = JsonlFile(memory_dir / "facts.jsonl", Fact)

    def all(self) -> list[Fact]:
        return self.file.load()


class Promotions:
    """Promotions of one tenant's workers' candidates (blocking file work: callers use a thread)."""

    def __init__(self, root: Path, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.root, self.clock = root, clock

    def worker_facts(self, tenant_id: str, worker_id: str) -> FactStore:
        return FactStore(worker_memory_dir(self.root, tenant_id, worker_id))

    def tenant_facts(self, tenant_id: str) -> FactStore:
        return FactStore(tenant_memory_dir(self.root, tenant_id))

    def _store(self, tenant_id: str, worker_id: str, level: Level) -> FactStore:
        return self.tenant_facts(tenant_id) if level == "tenant" else self.worker_facts(tenant_id, worker_id)

    def facts(self, tenant_id: str, worker_id: str) -> list[Fact]:
        """The worker's facts (duty, worker scope) and the tenant facts promoted from its candidates."""
        own = self.worker_facts(tenant_id, worker_id).all()
        return own + [f for f in self.tenant_facts(tenant_id).all() if f.provenance.worker_id == worker_id]

    def next_level(self, candidate: Candidate, facts: Iterable[Fact]) -> Level | None:
        """Where `candidate` goes next: one level above the highest it holds now (duty is skipped for a
        run without a duty); None at the top."""
        held = [
            LEVELS.index(f.level)
            for f in facts
            if f.provenance.candidate_id == candidate.candidate_id and f.status != "rolled_back"
        ]
        at = max(held, default=0)
        for level in LEVELS[at + 1 :]:
            if level != "duty" or candidate.provenance.duty_id:
                return level
        return None

    def promote(
        self, tenant_id: str, worker_id: str, candidate_id: str, to: Level, evaluation: Evaluation | None,
        supervisor: SupervisorVerdict, by: str,
    ) -> Fact:  # fmt: skip
        """Promote the candidate one level, to `to`. PromotionNotFound without the candidate;
        PromotionRefused by the gate, for a level out of order, or for a fact the scope already holds."""
        candidate = _candidate(CandidateStore(worker_memory_dir(self.root, tenant_id, worker_id)), candidate_id)
        if candidate.status == "rejected":
            raise PromotionRefused("candidate_rejected", f"memory candidate {candidate_id!r} was rejected")
        held = [f for f in self.facts(tenant_id, worker_id) if f.provenance.candidate_id == candidate_id]
        live = [f for f in held if f.status != "rolled_back"]
        expected = self.next_level(candidate, live)
        if to != expected:
            where = max((f.level for f in live), key=LEVELS.index, default="run")
            raise PromotionRefused(
                "not_next_level",
                f"memory candidate {candidate_id!r} is at {where} level; "
                + (f"it goes to {expected} next" if expected else "it is at the top"),
            )
        gate(evaluation, supervisor)
        assert evaluation is not None
        now = self.clock()
        below = next((f for f in live if f.level == _below(to, candidate)), None)
        p = candidate.provenance
        fact = Fact(
            fact_id=f"fact_{now:%Y%m%d%H%M%S}_{secrets.token_hex(4)}",
            key=normalise_key(candidate.title) or candidate.fingerprint,
            value=candidate.text,
            scope=str(_scope(to, tenant_id, worker_id, candidate)),
            kind=candidate.kind,
            valid_from=now,
            provenance=FactProvenance(
                candidate_id=candidate_id, worker_id=worker_id, run_id=p.run_id, task_id=p.task_id,
                thread_id=p.thread_id, duty_id=p.duty_id,
                from_scope=below.scope if below else f"run:{p.run_id or 'unknown'}",
                from_fact=below.fact_id if below else None, supervisor=supervisor, evaluation=evaluation,
                experiment_id=evaluation.ref if evaluation.kind == "experiment" else None,
                promoted_by=by, promoted_at=now,
            ),
        )  # fmt: skip
        stored: list[Fact] = []

        def change(records: list[Fact]) -> None:
            current = [r for r in records if r.status == "active" and r.scope == fact.scope and r.key == fact.key]
            if any(r.value.casefold() == fact.value.casefold() for r in current):
                raise PromotionRefused("already_known", f"{fact.scope} already holds this fact on {fact.key!r}")
            for old in current:  # kept, ended in time: the new fact supersedes it
                old.status, old.valid_to, old.superseded_by = "superseded", now, fact.fact_id
            stored.append(fact.model_copy(update={"supersedes": tuple(r.fact_id for r in current)}))
            records.append(stored[0])

        self._store(tenant_id, worker_id, to).file.update(change)
        return stored[0]

    def rollback(self, tenant_id: str, worker_id: str, fact_id: str, by: str) -> Fact:
        """Withdraw the promotion that made `fact_id`: it ends (rolled_back) and the facts it superseded
        are valid again. Refused while a later promotion stands on it (roll that back first)."""
        facts = self.facts(tenant_id, worker_id)
        fact = next((f for f in facts if f.fact_id == fact_id), None)
        if fact is None:
            raise PromotionNotFound(f"no promoted fact {fact_id!r} of worker {worker_id!r}")
        above = [f.fact_id for f in facts if f.provenance.from_fact == fact_id and f.status != "rolled_back"]
        if above:
            message = f"{fact_id} was promoted further as {above[0]}; roll that back first"
            raise PromotionRefused("promoted_further", message)
        if fact.status != "active":
            later = f" by {fact.superseded_by}" if fact.superseded_by else ""
            message = f"{fact_id} is {fact.status}{later}; only an active fact is rolled back"
            raise PromotionRefused("not_active", message)
        now = self.clock()
        done: list[Fact] = []

        def change(records: list[Fact]) -> None:
            for r in records:
                if r.fact_id == fact_id:
                    if r.status != "active":
                        raise PromotionRefused("not_active", f"{fact_id} is {r.status}")
                    r.status, r.valid_to, r.rolled_back_by = "rolled_back", now, by
                    done.append(r.model_copy())
                elif r.fact_id in fact.supersedes and r.superseded_by == fact_id:
                    r.status, r.valid_to, r.superseded_by = "active", None, None

        self._store(tenant_id, worker_id, fact.level).file.update(change)
        return done[0]


def _candidate(store: CandidateStore, candidate_id: str) -> Candidate:
    try:
        return store.get(candidate_id)
    except LookupError as exc:
        raise PromotionNotFound(str(exc)) from None


def _below(level: Level, candidate: Candidate) -> Level:
    lower = LEVELS[LEVELS.index(level) - 1]
    return "run" if lower == "duty" and not candidate.provenance.duty_id else lower


def _scope(level: Level, tenant_id: str, worker_id: str, candidate: Candidate) -> Scope:
    if level == "duty":
        return Scope(ScopeKind.DUTY, candidate.provenance.duty_id or "")
    return Scope(ScopeKind.TENANT, tenant_id) if level == "tenant" else Scope(ScopeKind.WORKER, worker_id)


class FactsProvider:
    """Active promoted facts of the run's bound scopes, as memory hits (the worker's and the tenant's)."""

    name = "facts"

    def __init__(self, stores_for: Callable[[MemoryBinding], Sequence[FactStore]]) -> None:
        self.stores_for = stores_for

    async def recall(self, query: MemoryQuery) -> Sequence[MemoryHit]:
        return self._recall(query)  # two small JSONL files: cheaper read here than a thread hop

    def _recall(self, query: MemoryQuery) -> list[MemoryHit]:
        bound = {str(s) for s in query.binding.scopes()}
        words = set(query.text.lower().split())
        hits = []
        for store in self.stores_for(query.binding):
            for f in store.all():
                if f.status != "active" or f.scope not in bound:
                    continue
                overlap = len(words & set(f"{f.key} {f.value}".lower().split()))
                hits.append(
                    MemoryHit(
                        episode_id=f.fact_id, scope=Scope.parse(f.scope), kind="fact", title=f"fact on {f.key}",
                        text=f.value, score=1.0 + overlap, created_at=f.valid_from, provider=self.name,
                        metadata={"key": f.key},
                    )
                )  # fmt: skip
        return hits
