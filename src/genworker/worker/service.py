"""Service mode (PERSONA `mode: service` and its `service:` block): a worker many people talk to.

The router calls the ServiceDesk at four points; for any other worker each call is a no-op:

- `admit`, before a conversational request is accepted: a thread handed over to another worker goes
  to that worker; a new conversation is refused while the worker already has
  `max_concurrent_sessions` live ones (`ServiceBusy`: HTTP 429 with Retry-After and a polite sentence,
  `service.busy_message` when set; an IM message gets the same sentence as its answer).
- `session_ttl`: a service thread's session expires after `session_ttl` idle seconds (a sliding
  expiry); a later message starts the thread over, without its history or hand-off.
- `relay`, inside the thread's turn: a thread handed over to a person is not answered by the worker.
  Each message goes to that person once (outbox key `handoff:{run_id}`) and the user gets a fixed
  line, until someone releases the thread (genworker.worker.handoff).
- `context`: the knowledge sources searched for the message (genworker.worker.knowledge) and a
  paragraph for the system prompt with the service's limits and escalation triggers.

Anonymous access and its rate limit are the HTTP route's (genworker.api.routes.service).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from typing import Any, Literal

from genworker.conversation import AssistantMessage, SessionManager, UserMessage
from genworker.conversation.models import ConversationSession, session_id_for
from genworker.delivery.outbox import OutboxMessage, Recipient
from genworker.engine.base import RunResult
from genworker.engine.events import RunError, RunFinished, RunStarted, TextDelta
from genworker.memory.models import MemoryItem
from genworker.tools.builtin.messaging import MessagingSlot
from genworker.worker.knowledge import KnowledgeSearch
from genworker.worker.lifecycle import TaskLifecycle
from genworker.worker.routing import RouteDone, RouteError, RouteRequest, RouterEvent
from genworker.worker.task import GovernanceVerdict, RunRef, TaskManifest, TaskProvenance
from genworker.workspace.models.persona import WorkerMode
from genworker.workspace.registry import WorkspaceRegistry
from genworker.workspace.snapshot import Worker

__all__ = ["HANDOFF_KEY", "HandOff", "ServiceBusy", "ServiceContext", "ServiceDesk", "is_service"]

log = logging.getLogger("genworker.worker.service")

HANDOFF_KEY = "service_handoff"  # thread session metadata: who has the conversation now
MAX_FORWARDS = 3  # hand-offs followed for one message (A -> B -> C ...)
_NOTICES_KEPT = 1_000


def is_service(worker: Worker) -> bool:
    return worker.persona.mode is WorkerMode.SERVICE


class ServiceBusy(RouteError):
    """A new conversation while the service has `max_concurrent_sessions` live ones."""

    def __init__(self, worker: Worker, retry_after_s: int) -> None:
        name = worker.persona.identity.display_name
        text = worker.persona.service.busy_message or (
            f"{name} is helping as many people as it can right now. Please try again in a few minutes "
            f"(in about {retry_after_s} seconds a place should be free)."
        )
        super().__init__("service_busy", text, retry_after_s=retry_after_s)


@dataclass(frozen=True, slots=True)
class HandOff:
    """Who has a handed-over conversation (the thread session's `service_handoff` metadata)."""

    kind: Literal["person", "worker"]
    target: str  # the worker id, or the person's contact / chat as the PERSONA names it
    name: str  # who, as the user is told
    reason: str
    at: str  # ISO time
    run_id: str  # the run that handed it over
    recipients: tuple[Mapping[str, Any], ...] = ()  # a person's ways to be reached (outbox recipients)

    @classmethod
    def of(cls, session: ConversationSession | None) -> HandOff | None:
        raw = session.metadata.get(HANDOFF_KEY) if session is not None else None
        if not isinstance(raw, Mapping):
            return None
        try:
            kind = raw["kind"]
            if kind not in ("person", "worker"):
                raise ValueError(f"kind {kind!r}")
            return cls(
                kind, str(raw["target"]), str(raw["name"]), str(raw.get("reason", "")), str(raw["at"]),
                str(raw["run_id"]), tuple(dict(r) for r in raw.get("recipients", ())),
            )  # fmt: skip
        except (KeyError, TypeError, ValueError) as exc:
            assert session is not None
            log.warning("session %s: unreadable %s metadata (%s): ignored", session.session_id, HANDOFF_KEY, exc)
            return None

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["recipients"] = [dict(r) for r in self.recipients]
        return data

    def reach(self) -> list[Recipient]:
        return [Recipient(**r) for r in self.recipients]


@dataclass(frozen=True, slots=True)
class ServiceContext:
    knowledge: tuple[MemoryItem, ...] = ()
    guidance: str = ""  # joins the system prompt


NO_CONTEXT = ServiceContext()


class ServiceDesk:
    def __init__(
        self,
        registry: WorkspaceRegistry,
        sessions: SessionManager,
        tasks: TaskLifecycle,
        messaging: MessagingSlot,
    ) -> None:
        self.registry = registry
        self.sessions = sessions
        self.tasks = tasks
        self.messaging = messaging  # the outbox and channel bindings, once the runtime has started them
        self.knowledge = KnowledgeSearch(registry.root)
        self._notices: OrderedDict[str, str] = OrderedDict()

    # -- admission ------------------------------------------------------------------------------

    async def admit(self, req: RouteRequest, worker: Worker) -> tuple[RouteRequest, Worker]:
        """The request as it is to be routed: to the worker a handed-over thread went to; a new
        conversation with a full service raises ServiceBusy."""
        seen = {worker.worker_id}
        while req.conversational and is_service(worker):
            session = await self.thread(req.tenant_id, worker.worker_id, req.thread_id)
            handoff = HandOff.of(session)
            if handoff is not None and handoff.kind == "worker":
                target = self.registry.worker(req.tenant_id, handoff.target)
                if target is None or target.worker_id in seen or len(seen) > MAX_FORWARDS:
                    log.warning("thread %s: handed over to %r, who cannot take it: %s answers", req.thread_id,
                                handoff.target, worker.worker_id)  # fmt: skip
                    return req, worker
                seen.add(target.worker_id)
                req, worker = replace(req, worker_id=target.worker_id), target
                continue
            if session is None:
                await self._check_capacity(req.tenant_id, worker)
            break
        return req, worker

    async def thread(self, tenant_id: str, worker_id: str, thread_id: str | None) -> ConversationSession | None:
        """The live session of a thread, None when there is none (or the id is invalid: the router says so)."""
        if thread_id is None:
            return None
        try:
            session_id = session_id_for("thread", worker_id, thread_id)
        except ValueError:
            return None
        return await self.sessions.get(tenant_id, session_id)

    async def _check_capacity(self, tenant_id: str, worker: Worker) -> None:
        config = worker.persona.service
        live = [s for s in await self.sessions.list(tenant_id, worker.worker_id) if s.kind == "thread" and s.ttl_s]
        if len(live) < config.max_concurrent_sessions:
            return
        now = datetime.now(UTC)
        frees = min((s.updated_at - now).total_seconds() + (s.ttl_s or 0) for s in live)
        retry = max(1, min(config.session_ttl, math.ceil(frees)))
        log.info("%s/%s: %d live conversations (max %d): a new one is refused", tenant_id, worker.worker_id,
                 len(live), config.max_concurrent_sessions)  # fmt: skip
        raise ServiceBusy(worker, retry)

    def session_ttl(self, req: RouteRequest) -> int | None:
        worker = self.registry.worker(req.tenant_id, req.worker_id)
        return worker.persona.service.session_ttl if worker is not None and is_service(worker) else None

    # -- context ----------------------------------------------------------------------------------

    async def context(self, worker: Worker, text: str) -> ServiceContext:
        if not is_service(worker):
            return NO_CONTEXT
        config = worker.persona.service
        knowledge: tuple[MemoryItem, ...] = ()
        if config.knowledge_sources:
            knowledge = tuple(await asyncio.to_thread(self.knowledge.search, worker, text))
        lines = [
            "## Service",
            "You serve many people, each in a short conversation of their own. Keep answers consistent "
            f"with your instructions and rules. A conversation idle for {config.session_ttl} seconds is closed.",
        ]
        if config.knowledge_sources:
            lines.append(
                "Answer from the [knowledge] passages under 'Relevant memory' where they apply; when they do "
                "not cover a question, say so rather than guess."
            )
        escalation = config.escalation
        if escalation.enabled:
            to = f"your colleague {escalation.target_worker}" if escalation.target_worker else "a person"
            when = "; ".join(escalation.triggers) or "you cannot help"
            lines.append(f"Hand the conversation over to {to} with `escalate_conversation` when: {when}.")
        return ServiceContext(knowledge, "\n".join(lines))

    # -- hand-off notices ---------------------------------------------------------------------------

    def notify(self, run_id: str, notice: str) -> None:
        """What the run's answer ends with (the router appends it when the run finishes)."""
        self._notices[run_id] = notice
        while len(self._notices) > _NOTICES_KEPT:
            self._notices.popitem(last=False)

    def take_notice(self, run_id: str) -> str | None:
        return self._notices.pop(run_id, None)

    # -- a thread with a person -----------------------------------------------------------------------

    async def relay(
        self, req: RouteRequest, worker: Worker, run_id: str, task_id: str
    ) -> AsyncIterator[RouterEvent] | None:
        """The turn of a message in a thread a person has taken over; None for any other message."""
        if not req.conversational or req.thread_id is None or not is_service(worker):
            return None
        session = await self.thread(req.tenant_id, worker.worker_id, req.thread_id)
        handoff = HandOff.of(session)
        if session is None or handoff is None or handoff.kind != "person":
            return None
        return self._relay(req, session, handoff, run_id, task_id)

    async def _relay(
        self, req: RouteRequest, session: ConversationSession, handoff: HandOff, run_id: str, task_id: str
    ) -> AsyncIterator[RouterEvent]:
        ref = RunRef(req.tenant_id, req.worker_id, run_id)
        verdict = GovernanceVerdict("auto", reasons=(f"service_handoff: the conversation is with {handoff.name}",))
        provenance = TaskProvenance(
            source_type=req.source_type,
            source_id=req.source_id,
            governance_decision=verdict,
            idempotency_key=req.idempotency_key,
        )
        manifest = TaskManifest(
            task_id, run_id, req.tenant_id, req.worker_id, req.text, datetime.now(UTC), session.thread_id,
            provenance=provenance,
        )  # fmt: skip
        persisted = await self.tasks.persist_initial(manifest, start=True)
        if persisted.run_id != run_id:  # the idempotency key already made a run: never relay twice
            replay = RunResult("completed" if persisted.state == "completed" else "failed", error_code="duplicate",
                               error=f"already run as {persisted.run_id}")  # fmt: skip
            yield RouteDone(replay, persisted)
            return
        yield RunStarted(run_id, "handoff", "")
        problem = await self._forward(req, session, handoff, run_id)
        if problem is not None:
            record = await self.tasks.fail(ref, "handoff_undelivered", problem)
            yield RunError(run_id, "handoff_undelivered", problem)
            yield RouteDone(RunResult("failed", error_code="handoff_undelivered", error=problem), record)
            return
        notice = f"{handoff.name} has this conversation now; your message was passed on to them."
        result = RunResult("completed", output=notice, engine="handoff")
        record = await self.tasks.complete(ref, result)
        await self.sessions.append(
            session, UserMessage(req.text, run_id=run_id), AssistantMessage(notice, run_id=run_id)
        )
        yield TextDelta(notice)
        yield RunFinished(run_id, "completed", notice)
        yield RouteDone(result, record)

    async def _forward(
        self, req: RouteRequest, session: ConversationSession, handoff: HandOff, run_id: str
    ) -> str | None:
        """The message sent on to the person (once per run); why it could not be, or None."""
        outbox = self.messaging.outbox
        recipients = handoff.reach()
        if outbox is None or not recipients:
            return f"the message could not be passed on to {handoff.name}: no outbound delivery"
        worker = self.registry.worker(req.tenant_id, req.worker_id)
        name = worker.persona.identity.display_name if worker is not None else req.worker_id
        text = (
            f"New message from {req.source_id or 'the user'} in the conversation {name} handed over to you "
            f"(thread {session.thread_id}):\n\n{req.text}"
        )
        origin = {"run_id": run_id, "kind": "service_handoff", "thread_id": session.thread_id}
        entry = await outbox.send(f"handoff:{run_id}", req.tenant_id, req.worker_id, recipients, OutboxMessage(text),
                                  origin=origin)  # fmt: skip
        if entry.state in ("given_up", "failed", "outcome_unknown"):
            return f"the message could not be passed on to {handoff.name}: {entry.last_error or entry.state}"
        return None  # sent, or kept and re-sent by the outbox
