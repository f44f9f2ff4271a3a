"""build_managed_context(): a worker's identity, constraints and rules, contacts, memory, the
thread's history and the task, each within its quota, compacted to fit the window.

The caller loads the history of one thread; the assembler refuses messages that say they
belong to another.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

from genworker.llm.client import LLMClient
from genworker.memory.models import MemoryItem
from genworker.worker.context.compaction import compact
from genworker.worker.context.errors import ThreadIsolationError
from genworker.worker.context.models import ContextWindowConfig, ManagedContext, Message, SegmentName
from genworker.worker.context.segments import (
    contacts_segment,
    identity_segment,
    memory_segment,
    provenance_items,
    rules_segment,
    task_segment,
)
from genworker.worker.task import TaskProvenance
from genworker.workspace.snapshot import Worker

__all__ = ["build_managed_context", "check_thread", "thread_of"]


def thread_of(message: Message) -> str | None:
    """The thread a message says it belongs to: `metadata.thread_id`, else a top-level `thread_id`."""
    metadata = message.get("metadata")
    owner = metadata.get("thread_id") if isinstance(metadata, Mapping) else None
    owner = owner if owner is not None else message.get("thread_id")
    return None if owner is None else str(owner)


def check_thread(history: Sequence[Message], thread_id: str | None) -> str | None:
    """Refuse history from another thread (or, with no thread given, from more than one).

    Returns the thread the history belongs to, if any message or the caller says.
    """
    expected = thread_id
    for index, message in enumerate(history):
        owner = thread_of(message)
        if owner is None:
            continue
        if expected is not None and owner != expected:
            whose = "the requested thread" if thread_id is not None else "the earlier messages"
            raise ThreadIsolationError(
                f"history[{index}] belongs to thread {owner!r}, but {whose} is {expected!r}; "
                "a context only ever holds one thread's history"
            )
        expected = owner
    return expected


async def build_managed_context(
    worker: Worker,
    task_text: str,
    history: Sequence[Message],
    *,
    memory: Sequence[str | MemoryItem] = (),
    config: ContextWindowConfig | None = None,
    llm: LLMClient | None = None,
    provenance: TaskProvenance | Mapping[str, object] | None = None,
    thread_id: str | None = None,
    skill_id: str | None = None,
) -> ManagedContext:
    """Assemble the context; `llm` is only used (once, fast tier) if history must be summarised.

    `skill_id` (the run's skill) selects the learned rules whose scope names it."""
    config = config or ContextWindowConfig()
    owner = check_thread(history, thread_id)
    facts = provenance_items(provenance)
    segments = (
        identity_segment(worker, config.quota(SegmentName.SYSTEM_IDENTITY)),
        rules_segment(worker, config.quota(SegmentName.CONSTRAINTS_RULES), skill_id),
        contacts_segment(worker, config.quota(SegmentName.CONTACTS)),
        memory_segment(memory, config.quota(SegmentName.MEMORY)),
        task_segment(task_text, config.quota(SegmentName.TASK)),
    )
    context = ManagedContext(
        segments=segments,
        history=tuple(dict(m) for m in history),
        config=config,
        thread_id=owner,
        provenance=MappingProxyType(facts),
    )
    return await compact(context, llm)
