"""build_managed_context: segment order and content, quotas, lending to history, thread isolation."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from genworker.memory.models import MemoryItem
from genworker.worker.context import (
    ContextWindowConfig,
    ManagedContext,
    SegmentName,
    SegmentQuotas,
    ThreadIsolationError,
    build_managed_context,
    count_tokens,
)
from genworker.worker.task import GovernanceVerdict, TaskProvenance
from genworker.workspace.models import Contact, PersonaSpec, Rule
from genworker.workspace.snapshot import Worker

pytestmark = pytest.mark.anyio


def make_worker(
    *,
    instructions: str = "Answer finance questions for the team.",
    constraints: Sequence[str] = (),
    rules: Sequence[Rule] = (),
    contacts: Sequence[Contact] = (),
    context_limit: int = 20,
) -> Worker:
    persona = PersonaSpec.model_validate(
        {
            "identity": {
                "name": "Ada",
                "worker_id": "ada",
                "role": "finance analyst",
                "department": "Finance",
                "reports_to": "Sam",
                "personality": {"traits": ["precise"], "communication_style": "brief"},
                "principles": ["Cite every number"],
            },
            "mode": "team_member",
            "constraints": list(constraints),
            "contact_settings": {"context_limit": context_limit},
        }
    )
    return Worker(
        "acme", "ada", persona, instructions, {}, {}, {}, tuple(rules), {c.person_id: c for c in contacts}, None, {}
    )


def rule(rule_id: str, kind: str, priority: int, status: str = "active") -> Rule:
    return Rule.model_validate(
        {"rule_id": rule_id, "kind": kind, "priority": priority, "status": status, "text": f"rule text {rule_id}"}
    )


def fixed_config(budget: int = 20_000, **fields: Any) -> ContextWindowConfig:
    quotas = SegmentQuotas(system_identity=300, constraints_rules=300, contacts=200, memory=200, task=300, history=0.1)
    return ContextWindowConfig(total_tokens=budget + 500, reserve_for_output=500, quotas=quotas, **fields)


def chat(n: int, thread: str | None = None) -> list[dict[str, Any]]:
    meta = {"metadata": {"thread_id": thread}} if thread else {}
    out: list[dict[str, Any]] = []
    for i in range(n):
        out.append({"role": "user", "content": f"question {i}", **meta})
        out.append({"role": "assistant", "content": f"answer {i}", **meta})
    return out


async def test_segments_in_order_then_history_then_task() -> None:
    worker = make_worker(
        constraints=["Never approve payments"],
        rules=[rule("r1", "directive", 1)],
        contacts=[Contact(person_id="sam", name="Sam Ortiz", role="CFO")],
    )
    history = chat(2)
    ctx = await build_managed_context(worker, "Prepare the Q3 report", history, memory=["Sam prefers PDF"])
    prompt = ctx.system_prompt
    order = [prompt.index(h) for h in ("## Identity", "## Constraints", "## Contacts", "## Relevant memory")]
    assert order == sorted(order)
    assert "You are Ada, finance analyst in Finance." in prompt
    assert "You report to Sam." in prompt
    assert "Personality: precise\nCommunication: brief\n" in prompt
    assert "Working mode: team member" in prompt
    assert "- Cite every number" in prompt
    assert prompt.index("Cite every number") < prompt.index("Answer finance questions")
    assert "- Sam Ortiz (CFO) [sam]" in prompt
    assert "- Sam prefers PDF" in prompt
    messages = ctx.messages()
    assert messages[0] == {"role": "system", "content": prompt}
    assert list(messages[1:-1]) == history
    assert messages[-1] == {"role": "user", "content": "Prepare the Q3 report"}
    assert [s.name for s in ctx.segments] == [
        SegmentName.SYSTEM_IDENTITY,
        SegmentName.CONSTRAINTS_RULES,
        SegmentName.CONTACTS,
        SegmentName.MEMORY,
        SegmentName.TASK,
    ]
    assert ctx.steps == () and ctx.summary is None and ctx.fits


async def test_a_worker_without_a_name_is_called_by_its_id() -> None:
    # upstream genworker makes identity.name optional
    persona = PersonaSpec.model_validate({"identity": {"worker_id": "ada", "role": "finance analyst"}})
    worker = Worker("acme", "ada", persona, "", {}, {}, {}, (), {}, None, {})
    ctx = await build_managed_context(worker, "hi", [])
    assert "You are ada, finance analyst." in ctx.system_prompt


async def test_empty_segments_leave_no_heading() -> None:
    ctx = await build_managed_context(make_worker(), "hi", [])
    assert "## Contacts" not in ctx.system_prompt
    assert "## Relevant memory" not in ctx.system_prompt
    assert "## Constraints" not in ctx.system_prompt


async def test_rules_directives_first_each_by_priority_inactive_left_out() -> None:
    rules = [
        rule("learned-low", "learned", 1),
        rule("directive-low", "directive", 1),
        rule("learned-high", "learned", 9),
        rule("directive-high", "directive", 5),
        rule("disabled", "directive", 99, status="disabled"),
        rule("superseded", "learned", 99, status="superseded"),
    ]
    worker = make_worker(constraints=["Constraint one"], rules=rules)
    ctx = await build_managed_context(worker, "t", [])
    lines = ctx.segment(SegmentName.CONSTRAINTS_RULES).text.splitlines()[1:]
    assert lines == [
        "- Constraint one",
        "- rule text directive-high",
        "- rule text directive-low",
        "- (learned) [preference/0.50] rule text learned-high",  # [category/confidence], as upstream
        "- (learned) [preference/0.50] rule text learned-low",
    ]


async def test_contacts_limited_by_context_limit() -> None:
    contacts = [Contact(person_id=f"p{i}", name=f"Person {i}") for i in range(5)]
    ctx = await build_managed_context(make_worker(contacts=contacts, context_limit=2), "t", [])
    segment = ctx.segment(SegmentName.CONTACTS)
    assert (segment.items, segment.omitted) == (2, 3)
    assert "Person 0" in segment.text and "Person 1" in segment.text and "Person 2" not in segment.text
    none = await build_managed_context(make_worker(contacts=contacts, context_limit=0), "t", [])
    assert none.segment(SegmentName.CONTACTS).text == ""


async def test_every_segment_stays_within_its_quota() -> None:
    worker = make_worker(
        instructions="Long standing instructions. " * 400,
        constraints=[f"Constraint number {i} about spending limits" for i in range(40)],
        rules=[rule(f"r{i}", "directive", i) for i in range(40)],
        contacts=[Contact(person_id=f"p{i}", name=f"Person {i}", role="buyer", notes="x " * 50) for i in range(40)],
    )
    memory = [MemoryItem(f"Remembered fact {i} " * 10, source=f"episode:{i}") for i in range(40)]
    task = "BEGIN " + "please reconcile the ledger " * 300 + " FINISH"
    config = fixed_config()
    ctx = await build_managed_context(worker, task, [], memory=memory, config=config)
    for segment in ctx.segments:
        assert segment.tokens <= config.quota(segment.name), segment.name
        assert ctx.stats[segment.name].tokens == segment.tokens
    assert ctx.segment(SegmentName.SYSTEM_IDENTITY).truncated
    assert "tokens of persona trimmed" in ctx.segment(SegmentName.SYSTEM_IDENTITY).text
    for name in (SegmentName.CONSTRAINTS_RULES, SegmentName.CONTACTS, SegmentName.MEMORY):
        assert ctx.segment(name).omitted > 0 and ctx.segment(name).items > 0
    task_segment = ctx.segment(SegmentName.TASK)
    assert task_segment.truncated
    assert ctx.task.startswith("BEGIN") and ctx.task.endswith("FINISH")
    assert "(episode:0)" in ctx.system_prompt
    assert ctx.fits


async def test_unused_quota_is_lent_to_history() -> None:
    config = fixed_config(budget=3_000)
    history_quota = config.quota(SegmentName.HISTORY)
    history = chat(60)
    assert count_tokens(history) > 2 * history_quota
    ctx = await build_managed_context(make_worker(), "t", history, config=config)
    assert ctx.steps == ()
    assert len(ctx.history) == len(history)
    usage = ctx.stats[SegmentName.HISTORY]
    assert usage.tokens > history_quota
    assert usage.tokens <= usage.quota == ctx.budget - (ctx.total_tokens - ctx.history_tokens)
    assert ctx.total_tokens <= ctx.budget


async def test_history_keeps_its_quota_when_other_segments_are_full() -> None:
    worker = make_worker(instructions="filler text " * 2_000, rules=[rule(f"r{i}", "directive", i) for i in range(99)])
    config = fixed_config(budget=3_000)
    ctx = await build_managed_context(worker, "t", chat(5), config=config)
    assert ctx.stats[SegmentName.HISTORY].quota >= config.quota(SegmentName.HISTORY)


async def test_provenance_goes_to_the_system_prompt_never_into_the_task() -> None:
    provenance = TaskProvenance(
        source_type="duty",
        source_id="weekly-review",
        duty_id="weekly-review",
        goal_id="q3-close",
        scheduled_for=datetime(2025, 1, 6, 9, tzinfo=UTC),
        idempotency_key="k-1",
        governance_decision=GovernanceVerdict(action="auto", posture="normal"),
    )
    ctx = await build_managed_context(make_worker(), "Review the week", [], provenance=provenance)
    assert ctx.task == "Review the week" and ctx.messages()[-1] == {"role": "user", "content": "Review the week"}
    assert ctx.system_prompt.endswith(
        "\n\n## This task\n- source_type: duty\n- goal_id: q3-close\n- duty_id: weekly-review\n"
        "- scheduled_for: 2025-01-06T09:00:00+00:00"
    )
    for audit_only in ("k-1", "governance", "posture", "source_id"):
        assert audit_only not in ctx.system_prompt
    assert ctx.provenance["duty_id"] == "weekly-review" and "source_id" not in ctx.provenance
    # who sent a message (an API key id, an IM sender) is not the model's business, and a person's
    # message needs no note that it is one
    for source_type in ("chat", "task", "openai"):
        chat = await build_managed_context(
            make_worker(), "hi", [], provenance=TaskProvenance(source_type=source_type, source_id="f1e23980d55a")
        )
        assert chat.provenance == {} and "This task" not in chat.system_prompt and chat.task == "hi"
        assert "f1e23980d55a" not in str(chat.messages())
    plain = {"source_type": "sensor", "source_id": "slack:C1", "empty": None}
    sensed = await build_managed_context(make_worker(), "x", [], provenance=plain)
    assert sensed.task == "x" and dict(sensed.provenance) == {"source_type": "sensor"}
    assert sensed.total_tokens > (await build_managed_context(make_worker(), "x", [])).total_tokens  # it is counted


# -- thread isolation ---------------------------------------------------------------


async def test_history_of_another_thread_is_refused() -> None:
    mixed = [*chat(2, "thread-a"), *chat(1, "thread-b")]
    with pytest.raises(ThreadIsolationError, match=r"history\[4\] belongs to thread 'thread-b'.*'thread-a'"):
        await build_managed_context(make_worker(), "t", mixed, thread_id="thread-a")
    with pytest.raises(ThreadIsolationError, match="the earlier messages is 'thread-a'"):
        await build_managed_context(make_worker(), "t", mixed)
    with pytest.raises(ThreadIsolationError, match="requested thread"):
        await build_managed_context(
            make_worker(), "t", [{"role": "user", "content": "x", "thread_id": "b"}], thread_id="a"
        )


async def test_one_threads_history_never_enters_anothers_context() -> None:
    def thread(name: str) -> list[dict[str, Any]]:
        return [{**m, "content": f"{name}-ONLY {m['content']}"} for m in chat(80, name)]

    store = {"thread-a": thread("thread-a"), "thread-b": thread("thread-b")}
    config = fixed_config(budget=1_500, keep_recent_turns=2)  # both compact at the same time
    ctx_a, ctx_b = await asyncio.gather(
        *(build_managed_context(make_worker(), "t", store[t], thread_id=t, config=config) for t in store)
    )
    assert (ctx_a.thread_id, ctx_b.thread_id) == ("thread-a", "thread-b")
    assert ctx_a.steps and ctx_b.steps
    assert "thread-b-ONLY" not in repr(ctx_a.messages()) and "thread-a-ONLY" in repr(ctx_a.messages())
    assert "thread-a-ONLY" not in repr(ctx_b.messages()) and "thread-b-ONLY" in repr(ctx_b.messages())
    with pytest.raises(ThreadIsolationError):
        await build_managed_context(
            make_worker(), "t", [*store["thread-a"], store["thread-b"][0]], thread_id="thread-a"
        )


async def test_runtime_keys_are_not_sent_to_the_model() -> None:
    history = chat(1, "thread-a")
    ctx: ManagedContext = await build_managed_context(make_worker(), "t", history, thread_id="thread-a")
    assert all("metadata" not in m and "thread_id" not in m for m in ctx.messages())
    assert ctx.history[0]["metadata"] == {"thread_id": "thread-a"}  # kept on the context for callers
    history[0]["content"] = "changed later"
    assert ctx.history[0]["content"] == "question 0"


async def test_total_tokens_count_what_the_model_receives() -> None:
    """total_tokens is counted without building messages(): it must still be their count."""
    history = [
        *chat(3, "thread-a"),
        {
            "role": "assistant",
            "content": None,
            "metadata": {"thread_id": "thread-a"},
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "file_read", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "name": "file_read", "content": "x" * 50, "thread_id": "thread-a"},
    ]
    ctx = await build_managed_context(make_worker(), "the task", history, thread_id="thread-a")
    assert ctx.system_prompt
    assert ctx.total_tokens == count_tokens(ctx.messages()) > ctx.history_tokens


async def test_history_tokens_are_counted_once_per_history(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counted once per context; a context `replace()` makes with another history counts its own."""
    from genworker.worker.context import models

    ctx = await build_managed_context(make_worker(), "t", chat(6, "thread-a"), thread_id="thread-a")
    counted: list[object] = []
    real = models.message_tokens

    def counting(message: Any) -> int:
        counted.append(message)
        return real(message)

    fresh = dataclasses.replace(ctx)
    monkeypatch.setattr(models, "message_tokens", counting)
    assert fresh.history_tokens == fresh.history_tokens and fresh.total_tokens > fresh.history_tokens
    assert len(counted) == len(fresh.history)  # one pass, however often it is asked
    monkeypatch.undo()
    full = ctx.history_tokens
    assert full == sum(count_tokens([m]) - 3 for m in ctx.history)  # less the reply priming, per message
    shorter = dataclasses.replace(ctx, history=ctx.history[-2:])
    assert shorter.history_tokens < full == ctx.history_tokens and shorter != ctx
    assert dataclasses.replace(ctx) == ctx  # the count is not part of a context's value


async def test_thread_id_taken_from_untagged_caller_or_messages() -> None:
    assert (await build_managed_context(make_worker(), "t", chat(1))).thread_id is None
    assert (await build_managed_context(make_worker(), "t", chat(1), thread_id="x")).thread_id == "x"
    assert (await build_managed_context(make_worker(), "t", chat(1, "y"))).thread_id == "y"
