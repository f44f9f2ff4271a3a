"""Handing a service conversation over (the `escalate_conversation` tool) and releasing it.

To a worker (`service.escalation.target_worker`, always of the same tenant): the target's session of
the same thread gets the conversation so far and a note of who handed it over and why; the source
thread is marked, so every later message in it is routed to the target (ServiceDesk.admit).

To a person (no target worker: `service.escalation.contact`, a contact or bound chat, by default the
owner `identity.reports_to` names): the conversation so far is sent to them once through the outbox
(key `handoff:{run_id}:{call_id}`), and the thread is marked, so the worker stops answering in it:
later messages are passed on to the person (ServiceDesk.relay) until someone releases the thread
(`POST /api/v1/workers/{worker_id}/service/threads/{thread_id}/release`).

Either way the run that handed over ends its answer with who took over.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime

from genworker.conversation import AssistantMessage, UserMessage
from genworker.conversation.models import ChatMessage, SystemMessage
from genworker.delivery.outbox import OutboxMessage, Recipient
from genworker.delivery.recipients import BoundChannel, bound_chat, contact_recipients, find_contact, owner_recipients
from genworker.tools.builtin.escalation import HandOffError
from genworker.tools.context import ToolContext
from genworker.worker.service import HANDOFF_KEY, HandOff, ServiceDesk, is_service
from genworker.worker.task import RunRef
from genworker.workspace.snapshot import Worker

__all__ = ["HandOffs", "NotHandedOver", "transcript"]

TRANSCRIPT_MESSAGES = 20
TRANSCRIPT_CHARS = 6_000
_MESSAGE_CHARS = 600


class NotHandedOver(LookupError):
    """A release of a thread that is not handed over (or does not exist)."""


def transcript(messages: Sequence[ChatMessage], current: str, worker_name: str) -> str:
    """The conversation as a person reads it: the last TRANSCRIPT_MESSAGES user and assistant turns,
    then the message being answered, at most TRANSCRIPT_CHARS (the oldest cut first)."""
    lines: list[str] = []
    for message in [*messages, UserMessage(current)][-TRANSCRIPT_MESSAGES:]:
        if isinstance(message, UserMessage | AssistantMessage) and message.content.strip():
            who = "User" if isinstance(message, UserMessage) else worker_name
            text = message.content.strip()
            lines.append(f"{who}: {text[:_MESSAGE_CHARS]}{' [cut]' if len(text) > _MESSAGE_CHARS else ''}")
    while len(lines) > 1 and sum(len(line) + 1 for line in lines) > TRANSCRIPT_CHARS:
        lines.pop(0)
    return "\n".join(lines)


class HandOffs:
    def __init__(self, desk: ServiceDesk) -> None:
        self.desk = desk

    async def hand_over(self, ctx: ToolContext, reason: str, summary: str) -> str:
        """The tool's work: the conversation of `ctx`'s run handed over; what the model is told."""
        desk, scope = self.desk, ctx.scope
        worker = desk.registry.worker(scope.tenant_id, scope.worker_id)
        if worker is None:
            raise HandOffError(f"worker {scope.tenant_id}/{scope.worker_id} is not loaded")
        escalation = worker.persona.service.escalation
        if not is_service(worker) or not escalation.enabled:
            raise HandOffError("this worker has no escalation: PERSONA.md needs mode: service and service.escalation")
        run = await desk.tasks.get_run(RunRef(scope.tenant_id, scope.worker_id, scope.run_id))
        if run.thread_id is None or not scope.conversational:
            raise HandOffError("only a conversation can be handed over, and this run is not one")
        manifest = await desk.tasks.get_manifest(scope.tenant_id, scope.worker_id, run.task_id)
        session = await desk.thread(scope.tenant_id, worker.worker_id, run.thread_id)
        earlier = session.messages if session is not None else ()
        name = worker.persona.identity.display_name
        text = transcript(earlier, manifest.text, name)
        if escalation.target_worker:
            target = self._target(worker, escalation.target_worker)
            handoff = await self._to_worker(worker, target, run.thread_id, earlier, manifest.text, reason, summary, ctx)
        else:
            handoff = await self._to_person(worker, escalation.contact, run.thread_id, text, reason, summary, ctx)
        if session is None:  # the thread's first turn: its session is stored now, with the mark
            ttl = worker.persona.service.session_ttl
            session = await desk.sessions.get_or_create_thread(
                scope.tenant_id, worker.worker_id, run.thread_id, ttl_s=ttl
            )
        await desk.sessions.set_metadata(session, {HANDOFF_KEY: handoff.as_json()})
        who = f"{handoff.name} (a person)" if handoff.kind == "person" else handoff.name
        desk.notify(scope.run_id, f"{handoff.name} has taken over this conversation.")
        return (
            f"Handed over to {who}, with the conversation so far. Tell the user in one sentence; you no longer "
            "answer in this conversation."
        )

    async def release(self, tenant_id: str, worker_id: str, thread_id: str) -> HandOff:
        """The thread is the worker's again; the hand-off it had."""
        session = await self.desk.thread(tenant_id, worker_id, thread_id)
        handoff = HandOff.of(session)
        if session is None or handoff is None:
            raise NotHandedOver(f"thread {thread_id!r} of worker {worker_id!r} is not handed over")
        await self.desk.sessions.set_metadata(session, {}, remove=(HANDOFF_KEY,))
        return handoff

    def _target(self, worker: Worker, target_id: str) -> Worker:
        target = self.desk.registry.worker(worker.tenant_id, target_id)  # the same tenant, always
        if target is None or target.worker_id == worker.worker_id:
            raise HandOffError(
                f"PERSONA.md service.escalation.target_worker {target_id!r} is not another worker of tenant "
                f"{worker.tenant_id}"
            )
        return target

    async def _to_worker(
        self, worker: Worker, target: Worker, thread_id: str, earlier: Sequence[ChatMessage], current: str,
        reason: str, summary: str, ctx: ToolContext,
    ) -> HandOff:  # fmt: skip
        """The target's session of the thread holds the conversation so far and a note about it."""
        sessions, name = self.desk.sessions, worker.persona.identity.display_name
        ttl = (target if is_service(target) else worker).persona.service.session_ttl
        session = await sessions.get_or_create_thread(worker.tenant_id, target.worker_id, thread_id, ttl_s=ttl)
        origin = {"worker_id": worker.worker_id, "run_id": ctx.scope.run_id, "call_id": ctx.call.id}
        if session.metadata.get("handed_over_from") != origin:  # the same call made again adds nothing
            turns: list[ChatMessage] = [
                type(m)(m.content, created_at=m.created_at)
                for m in earlier
                if isinstance(m, UserMessage | AssistantMessage) and m.content.strip() and not _calls_tools(m)
            ]
            note = f"{name} handed this conversation over to you. Reason: {reason}." + (
                f" {summary}" if summary else ""
            )
            session = await sessions.append(session, *turns, UserMessage(current), SystemMessage(note))
            await sessions.set_metadata(session, {"handed_over_from": origin})
        now = datetime.now(UTC).isoformat()
        display = target.persona.identity.display_name
        return HandOff("worker", target.worker_id, display, reason, now, ctx.scope.run_id)

    async def _to_person(
        self, worker: Worker, contact: str | None, thread_id: str, text: str, reason: str, summary: str,
        ctx: ToolContext,
    ) -> HandOff:  # fmt: skip
        outbox, bindings_of = self.desk.messaging.outbox, self.desk.messaging.bindings
        if outbox is None or bindings_of is None:
            raise HandOffError("sending messages is not available on this runtime: nobody can be told")
        who, name, recipients = _person(worker, contact, bindings_of(worker.tenant_id, worker.worker_id))
        release = f"POST /api/v1/workers/{worker.worker_id}/service/threads/{thread_id}/release"
        body = (
            f"{worker.persona.identity.display_name} hands a conversation over to you.\n"
            f"Reason: {reason}\n" + (f"Summary: {summary}\n" if summary else "") +
            f"\nThe conversation so far (thread {thread_id}):\n{text}\n\n"
            f"Its further messages come to you until the thread is released ({release})."
        )  # fmt: skip
        key = f"handoff:{ctx.scope.run_id}:{ctx.call.id}"
        origin = {"run_id": ctx.scope.run_id, "call_id": ctx.call.id, "tool": ctx.spec.name, "kind": "service_handoff"}
        entry = await outbox.send(
            key, worker.tenant_id, worker.worker_id, recipients, OutboxMessage(body), origin=origin
        )
        if entry.state in ("given_up", "failed", "outcome_unknown"):
            raise HandOffError(f"{name} could not be told ({entry.state}: {entry.last_error}); keep helping the user")
        now = datetime.now(UTC).isoformat()
        return HandOff("person", who, name, reason, now, ctx.scope.run_id, tuple(asdict(r) for r in recipients))


def _person(worker: Worker, contact: str | None, bindings: Sequence[BoundChannel]) -> tuple[str, str, list[Recipient]]:
    """(as the PERSONA names them, their name, their ways to be reached) of the person a hand-off goes to."""
    who = (contact or "owner").strip()
    field = "PERSONA.md service.escalation.contact"
    if who.casefold() == "owner":
        found = owner_recipients(worker, bindings)
        owner = find_contact(worker, worker.persona.identity.reports_to) if worker.persona.identity.reports_to else None
        name = owner.display_name if owner is not None else (worker.persona.identity.reports_to or "the team")
        if not found:
            raise HandOffError(f"{field} is not set and the owner (identity.reports_to) cannot be reached")
        return who, name, found
    person = find_contact(worker, who)
    if person is not None:
        found = contact_recipients(worker, bindings, person)
        if not found:
            raise HandOffError(f"{field} {who!r}: {person.display_name} has no identity this worker can send to")
        return who, person.display_name, found
    chat = bound_chat(bindings, who)
    if chat is None:
        raise HandOffError(f"{field} {who!r} is neither a contact nor a chat this worker's channels are bound to")
    return who, chat.describe(), [chat]


def _calls_tools(message: ChatMessage) -> bool:
    return isinstance(message, AssistantMessage) and bool(message.tool_calls)
