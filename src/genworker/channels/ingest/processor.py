"""The channel processor: works the journal of accepted IM messages until each is answered.

On start it queues the entries a previous process left, then takes new ones as the ingest submits
them. With several processes on one workspace (docs/deploy.md) each entry has an owner, the
instance that accepted it: a process takes over only the entries of instances that are no longer
alive — at start, and at each sweep for stopped instances (`take_over`) — and checks that an entry
is still its own before it sends its answer, so one message is answered by one process.

Handling one message: drop group messages from chats not in `chat_ids`; in groups, a message
that does not mention the bot goes to the inbox as a sensed fact when
`features.group_monitoring` is on, to the worker when `features.mention_required` is false, else
nowhere; IM commands are answered by `commands`; anything else runs through
`WorkerRouter.route_stream` on a thread derived from platform + chat + thread (idempotency key
`channel:{adapter}:{event}`), and the final answer (or a neutral failure line, never provider error
text) is recorded in the entry, then sent with the `ChannelReplier`.

An entry is deleted once its answer is delivered. A message whose run a crash cut short is run
again or answered with a notice (`channels/interrupted.py`); an answer the vendor will not take stays in the
journal and is re-sent on a backoff for days, then set aside for a person (`delivery/redelivery.py`). A new
conversation with a service worker that is full (`ServiceBusy`) ran nothing: the person gets the
service's "busy, try again" sentence (outcome `busy`) and the entry is done, not run again later.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from genworker.channels import commands
from genworker.channels.base import ChannelMessage, ChannelReplier, InboxWriter, StreamingReplier
from genworker.channels.ingest.journal import Delivery, EntryTakenOver, EventJournal, JournalEntry
from genworker.channels.interrupted import (
    NOTICE_TEXT,
    AttentionItem,
    AttentionStore,
    Notify,
    RunAgain,
    Settled,
    Wait,
    after_restart,
)
from genworker.channels.registry import ChannelRegistry
from genworker.delivery.messages import KEYED_PLATFORMS, PLATFORMS, OutboundMessage
from genworker.delivery.redelivery import DueTimes, RedeliveryPolicy
from genworker.engine.events import ApprovalRequired, TextDelta
from genworker.observability.metrics import CHANNEL_UNDELIVERED, GaugeSample, record_channel_redelivery
from genworker.worker.router import RouteDone, RouteRequest, RouterEvent, WorkerRouter, run_to_end
from genworker.worker.service import ServiceBusy

__all__ = ["FAILURE_TEXT", "ChannelProcessor", "Outcome", "approval_text", "session_thread_id"]

log = logging.getLogger("genworker.channels")

MAX_ATTEMPTS = 3  # runs started for one message before it is set aside
KEY_MARGIN_S = 300.0  # an answer in doubt is sent again under its key only this long before the vendor forgets it
OUTCOMES_KEPT = 1000
FAILURE_TEXT = "Sorry, I could not finish that just now. Please try again in a moment."
Outcome = Literal[
    "replied",
    "command",
    "sensed",
    "ignored",
    "failed",
    "notified",
    "undelivered",
    "given_up",
    "deferred",
    "busy",
    "outcome_unknown",
]
_KEPT: frozenset[Outcome] = frozenset({"undelivered", "deferred"})  # the entry stays in the journal


def session_thread_id(message: ChannelMessage) -> str:
    """A stable conversation thread per platform + adapter + chat (+ platform thread)."""
    basis = "\x1f".join((message.platform, message.adapter_id, message.chat_id, message.thread_id or ""))
    return "ch-" + hashlib.sha256(basis.encode("utf-8")).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class _Later:
    """The run under the message's key is still held by another process: look again later."""


@dataclass(frozen=True, slots=True)
class _Notice:
    """The run was cut short after it may have acted: the person gets this text, a human the case."""

    text: str
    run_id: str


@dataclass(frozen=True, slots=True)
class _Busy:
    """A full service refused the new conversation before any run was accepted: `text` asks the
    person to try again."""

    text: str


_Routed = str | None | _Later | _Notice | _Busy


class ChannelProcessor:
    def __init__(
        self,
        registry: ChannelRegistry,
        journal: EventJournal,
        *,
        router: WorkerRouter | None = None,
        replier: ChannelReplier | None = None,
        inbox: InboxWriter | None = None,
        commands_backend: commands.CommandBackend | None = None,
        concurrency: int = 4,
        policy: RedeliveryPolicy | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.registry = registry
        self.journal = journal
        self.router = router
        self.replier = replier  # the composition root (or a test) may set it after construction
        self.inbox = inbox
        self.commands_backend = commands_backend
        self.concurrency = concurrency
        self.policy = policy or RedeliveryPolicy()
        self.attention = AttentionStore(journal.root)
        self.due = DueTimes(clock) if clock is not None else DueTimes()
        self.outcomes: dict[str, Outcome] = {}  # the last OUTCOMES_KEPT outcomes by event id, for status
        self.listeners: list[Callable[[ChannelMessage, Outcome], None]] = []  # told each time an entry is handled
        self._queue: asyncio.Queue[JournalEntry | Path] = asyncio.Queue()
        self._workers: list[asyncio.Task[None]] = []
        self._warned_no_replier = False
        self._inflight: set[Path] = set()
        self._routing: dict[str, ChannelMessage] = {}  # by the run's idempotency key, while it runs
        self._retrying: dict[Path, str] = {}  # answers waiting for a re-send, with their platform
        self._given_up: dict[str, int] = {}  # answers set aside, by platform

    @property
    def clock(self) -> Callable[[], float]:
        return self.due.clock

    @clock.setter
    def clock(self, clock: Callable[[], float]) -> None:
        self.due.clock = clock
        self.due.wake()

    async def start(self, alive: Callable[[str], bool] | None = None) -> int:
        """Queue what a previous process left in the journal, then start working; returns that count.
        With `alive` (the instance leases), only entries of instances that are not alive, and those
        no instance owns, are taken; the others are their live owners' to answer."""
        self._given_up = await asyncio.to_thread(self._count_given_up)
        if alive is None or self.journal.owner is None:
            left: list[JournalEntry | Path] = list(await asyncio.to_thread(self.journal.pending))
        else:
            left = list(await asyncio.to_thread(self._claim_all, alive, True))
        for item in left:
            self._queue.put_nowait(item)
        if left:
            log.warning("[Channels] replaying %d accepted events left unprocessed by a previous process", len(left))
        self._workers = [
            asyncio.create_task(self._work(), name=f"channel-processor-{i}") for i in range(self.concurrency)
        ]
        self._workers.append(asyncio.create_task(self._wake_due(), name="channel-redelivery"))
        return len(left)

    async def stop(self) -> None:
        """Stop taking work; unfinished entries stay in the journal for the next start."""
        for task in self._workers:
            task.cancel()
        for task in self._workers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._workers.clear()

    async def take_over(self, alive: Callable[[str], bool]) -> int:
        """Queue the entries of instances that are no longer `alive` (a process died with messages
        it had accepted); the number taken over."""
        taken = await asyncio.to_thread(self._claim_all, alive, False)
        for entry in taken:
            self._queue.put_nowait(entry)
        if taken:
            log.warning("[Channels] took over %d accepted events of a stopped process", len(taken))
        return len(taken)

    def _claim_all(self, alive: Callable[[str], bool], unowned: bool) -> list[JournalEntry | Path]:
        """The entries this instance takes over; an unreadable one by its path (handling sets it aside)."""
        taken: list[JournalEntry | Path] = []
        for path in self.journal.pending():
            try:
                entry = self.journal.claim(path, alive, unowned=unowned)
            except (ValueError, KeyError, TypeError):
                taken.append(path)
                continue
            if entry is not None:
                taken.append(entry)
        return taken

    def origin(self, idempotency_key: str | None) -> ChannelMessage | None:
        """The message a run of this process is answering, while it runs (by the run's idempotency key)."""
        return self._routing.get(idempotency_key) if idempotency_key is not None else None

    def submit(self, entry: JournalEntry) -> None:
        self._queue.put_nowait(entry)

    async def drain(self) -> None:
        """Wait until every queued entry has been handled (entries waiting for a later attempt excepted)."""
        await self._queue.join()

    # -- what is owed, and a person's re-send ------------------------------------------------

    def undelivered_counts(self) -> list[GaugeSample]:
        """The `genworker_channel_replies_undelivered` gauge: retrying and given-up answers, by platform."""
        help_text = "IM answers not delivered yet: being re-sent (retrying) or set aside for a person (given_up)."
        retrying: dict[str, int] = {}
        for platform in self._retrying.values():
            self._count(retrying, platform, 1)
        return [
            (CHANNEL_UNDELIVERED, help_text, (("state", state), ("platform", platform)), float(counts.get(platform, 0)))
            for state, counts in (("retrying", retrying), ("given_up", self._given_up))
            for platform in sorted({*PLATFORMS, *counts})
        ]

    async def undelivered(self, tenant_id: str, worker_id: str) -> list[dict[str, Any]]:
        entries = await asyncio.to_thread(self.journal.undelivered, tenant_id, worker_id)
        return [entry.describe() for entry in entries]

    async def needs_attention(self, tenant_id: str, worker_id: str) -> list[dict[str, Any]]:
        items = await asyncio.to_thread(self.attention.list, tenant_id, worker_id)
        return [item.describe() for item in items]

    async def dismiss(self, tenant_id: str, worker_id: str, item_id: str) -> bool:
        """A human has checked a message listed by `needs_attention`; False when there is no such item."""
        return await asyncio.to_thread(self.attention.dismiss, tenant_id, worker_id, item_id)

    async def resend(self, tenant_id: str, worker_id: str, entry_id: str) -> Outcome | None:
        """Try an undelivered answer again now (one set aside goes back into the journal with a fresh
        retry horizon); the outcome, or None when there is no such entry. ValueError when the entry
        has no answer yet (its run has not finished)."""
        path = await asyncio.to_thread(self.journal.locate, tenant_id, worker_id, entry_id)
        if path is None:
            return None
        entry = await asyncio.to_thread(self.journal.read, path)
        if entry.answer is None:
            raise ValueError(f"journal entry {entry_id} has no answer yet: its message is still being handled")
        if entry.owner not in (None, self.journal.owner):  # a person asked this process: it takes the entry
            taken = await asyncio.to_thread(self.journal.claim, path, lambda _owner: False)
            entry = taken if taken is not None else entry
        if entry.dead:
            path = await asyncio.to_thread(self.journal.revive, path)
            self._count(self._given_up, entry.message.platform, -1)
            entry = dataclasses.replace(entry, path=path)
        if entry.delivery is not None or entry.sending is not None:  # a person decided: send it (again)
            fresh = entry.delivery and dataclasses.replace(entry.delivery, next_at=0.0, first_failed_at=self.clock())
            entry = await asyncio.to_thread(self.journal.update, entry, delivery=fresh, sending=None)
        self.due.discard(path)
        record_channel_redelivery(entry.message.platform, "resent")
        log.info("[Channels] re-sending the answer to %s on %s on request", entry.message.event_id, entry.name)
        outcome = await self._handle(path)
        return outcome if outcome is not None else "deferred"  # None: it was being handled already

    # -- the journal ----------------------------------------------------------------------

    async def _work(self) -> None:
        while True:
            item = await self._queue.get()
            try:
                await self._handle(item)
            except Exception:
                log.exception("[Channels] processing a journal entry failed")
            finally:
                self._queue.task_done()

    async def _wake_due(self) -> None:
        while True:
            for path in await self.due.wait_due():
                self._queue.put_nowait(path)

    async def _handle(self, item: JournalEntry | Path) -> Outcome | None:
        entry = await self._entry(item)
        if entry is None or entry.path in self._inflight or not entry.path.exists():  # queued twice, or done
            return None
        if entry.delivery is not None and entry.delivery.next_at > self.clock():  # replayed before it is due
            self._retrying[entry.path] = entry.message.platform
            self.due.put(entry.path, entry.delivery.next_at)
            return None
        self._inflight.add(entry.path)
        try:
            return await self._handle_entry(entry)
        except EntryTakenOver as taken:  # this process was taken for dead: the new owner answers it
            log.warning("[Channels] event %s left to another process: %s", entry.message.event_id, taken)
            self._retrying.pop(entry.path, None)
            return None
        finally:
            self._inflight.discard(entry.path)

    async def _entry(self, item: JournalEntry | Path) -> JournalEntry | None:
        if not isinstance(item, Path):
            return item
        try:
            return await asyncio.to_thread(self.journal.read, item)
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as exc:
            log.error("[Channels] unreadable journal entry %s set aside: %s", item, exc)
            await asyncio.to_thread(self.journal.dead, item, f"unreadable: {exc}")
            return None

    async def _handle_entry(self, entry: JournalEntry) -> Outcome:
        if entry.answer is None and entry.attempts >= MAX_ATTEMPTS:  # each run died with its process
            outcome = await self._stop_trying(entry)
        else:
            outcome = await self.process(entry)
        if outcome not in _KEPT:
            self._retrying.pop(entry.path, None)
            await asyncio.to_thread(self.journal.done, entry)
        self._record(entry.message, outcome)
        return outcome

    async def _stop_trying(self, entry: JournalEntry) -> Outcome:
        """A message whose runs kept dying: not run again; the person gets the failure line, a human the case."""
        message = entry.message
        log.error("[Channels] event %s was started %d times; not run again", message.event_id, entry.attempts)
        reason = f"its run was started {entry.attempts} times and never finished; not run again"
        item = AttentionItem.of(message, "", reason)
        await asyncio.to_thread(self.attention.add, message.tenant_id, message.worker_id, item)
        return await self._answer(entry, FAILURE_TEXT, "failed")

    def _record(self, message: ChannelMessage, outcome: Outcome) -> None:
        self.outcomes[message.event_id] = outcome
        if len(self.outcomes) > OUTCOMES_KEPT:
            del self.outcomes[next(iter(self.outcomes))]
        for listener in self.listeners:
            listener(message, outcome)

    def _count_given_up(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for path in self.journal.root.glob("tenants/*/workers/*/runtime/channels/journal/dead/*.json"):
            try:
                entry = self.journal.read(path)
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if entry.answer is not None:
                self._count(counts, entry.message.platform, 1)
        return counts

    @staticmethod
    def _count(counts: dict[str, int], platform: str, change: int) -> None:
        counts[platform] = max(0, counts.get(platform, 0) + change)

    # -- one message ----------------------------------------------------------------------

    async def process(self, entry: JournalEntry) -> Outcome:
        message = entry.message
        if entry.answer is not None and entry.sending is not None:  # its process stopped mid-send
            return await self._outcome_unknown(entry)
        if entry.answer is not None:  # answered before a crash, or the vendor would not take it: send it
            return await self._deliver(entry, "notified" if entry.run_id else "replied")
        binding = self.registry.resolve(message.adapter_id)
        worker = self.registry.workspace.worker(message.tenant_id, message.worker_id)
        if binding is None or worker is None:
            log.warning(
                "[Channels] event %s for %s dropped: channel no longer bound", message.event_id, message.adapter_id
            )
            return "ignored"
        features = dict(binding.channel.features)
        if message.chat_type == "group":
            if binding.channel.chat_ids and message.chat_id not in binding.channel.chat_ids:
                log.info("[Channels] %s: group %s is not in chat_ids; ignored", message.adapter_id, message.chat_id)
                return "ignored"
            if not message.mentioned_bot:
                if features.get("group_monitoring"):
                    return await self._sense(message)
                if features.get("mention_required", True):
                    return "ignored"
        # from here on the work can fail or crash: count the attempt first (ignored / sensed never get here)
        entry = await asyncio.to_thread(self.journal.update, entry, attempts=entry.attempts + 1)
        command = commands.parse(message.text)
        if command is not None:
            allowed = commands.approvers(worker, message.platform, features)
            reply = await commands.handle_command(command, message, allowed, self.commands_backend)
            return await self._answer(entry, reply.text, "command")
        if binding.channel.reply_mode != "complete" and isinstance(self.replier, StreamingReplier):
            return await self._run_streamed(entry, self.replier)
        return await self._settle(entry, await self._run(message))

    async def _settle(self, entry: JournalEntry, routed: _Routed) -> Outcome:
        match routed:
            case None:
                return "ignored"
            case _Later():
                return await self._later(entry)
            case _Notice(text=text, run_id=run_id):
                entry = await asyncio.to_thread(self.journal.update, entry, run_id=run_id)
                return await self._answer(entry, text, "notified")
            case _Busy(text=text):
                return await self._answer(entry, text, "busy")
            case str():
                return await self._answer(entry, routed, "failed" if routed == FAILURE_TEXT else "replied")

    async def _run_streamed(self, entry: JournalEntry, replier: StreamingReplier) -> Outcome:
        """`reply_mode` streaming / card_update: the model's text goes out while it is produced. The
        answer is journaled once complete; a crash mid-stream leaves the partial message, and the
        replay finds the run done under its idempotency key, so nothing is sent twice. When the
        stream could not be delivered, the whole answer is sent (and re-sent) like any other."""
        message = entry.message
        pieces: asyncio.Queue[str | None] = asyncio.Queue()
        streamed: list[str] = []

        async def feed() -> AsyncIterator[str]:
            while (piece := await pieces.get()) is not None:
                streamed.append(piece)
                yield piece

        def on_text(text: str) -> None:
            pieces.put_nowait(text)

        sending = asyncio.create_task(replier.stream(message, feed()), name=f"stream:{message.event_id}")
        try:
            routed = await self._run(message, on_text=on_text)
        finally:
            pieces.put_nowait(None)
            result = await sending
        if not result.ok:
            where = f"{message.event_id} on {message.adapter_id}"
            log.warning("[Channels] streamed reply to %s failed: %s", where, result.error)
        if isinstance(routed, str) and result.ok and streamed and routed.strip() == "".join(streamed).strip():
            await asyncio.to_thread(self.journal.update, entry, answer=routed)
            return "failed" if routed == FAILURE_TEXT else "replied"
        return await self._settle(entry, routed)  # nothing streamed (a workflow), or not as streamed: say it all

    async def _sense(self, message: ChannelMessage) -> Outcome:
        if self.inbox is None:
            log.warning("[Channels] group_monitoring on %s but no inbox is configured", message.adapter_id)
            return "ignored"
        payload = {
            "platform": message.platform,
            "chat_id": message.chat_id,
            "thread_id": message.thread_id,
            "sender_id": message.sender_id,
            "sender_name": message.sender_name,
            "text": message.text,
            "received_at": message.received_at,
            "attachments": [dataclasses.asdict(a) for a in message.attachments],
        }
        await self.inbox.write_fact(
            message.tenant_id,
            message.worker_id,
            "channel",
            message.adapter_id,
            "channel.group_message",
            payload,
            dedupe_key=f"channel:{message.adapter_id}:{message.event_id}",
            metadata={"platform": message.platform},
        )
        return "sensed"

    # -- the run --------------------------------------------------------------------------

    async def _run(self, message: ChannelMessage, *, on_text: Callable[[str], None] | None = None) -> _Routed:
        if self.router is None:
            log.error("[Channels] no router: cannot answer %s on %s", message.event_id, message.adapter_id)
            return FAILURE_TEXT
        key = f"channel:{message.adapter_id}:{message.event_id}"
        req = RouteRequest(
            tenant_id=message.tenant_id,
            worker_id=message.worker_id,
            text=message.text,
            source_type="chat",
            source_id=f"{message.platform}:{message.sender_id}",
            thread_id=session_thread_id(message),
            idempotency_key=key,
        )
        for _ in range(2):  # a second pass only after the key was freed from an interrupted run
            routed = await self._route(req, message, on_text)
            if routed is None or isinstance(routed, _Busy):
                return routed or FAILURE_TEXT
            done, approval = routed
            if done.result.error_code != "duplicate":
                return _final_text(done, approval)
            decision = await self._after_restart(message, done)
            if decision is not None:
                return decision
        return _Later()

    async def _route(
        self, req: RouteRequest, message: ChannelMessage, on_text: Callable[[str], None] | None
    ) -> tuple[RouteDone, ApprovalRequired | None] | _Busy | None:
        assert self.router is not None and req.idempotency_key is not None
        approval: list[ApprovalRequired] = []

        def seen(event: RouterEvent) -> None:
            if isinstance(event, TextDelta) and on_text is not None:
                on_text(event.text)
            elif isinstance(event, ApprovalRequired):
                approval.append(event)

        self._routing[req.idempotency_key] = message
        try:
            done = await run_to_end(self.router.route_stream(req), on_event=seen)
            if done is not None:
                return done, approval[-1] if approval else None
        except ServiceBusy as busy:  # refused before a run was accepted: nothing to retry
            log.info("[Channels] %s on %s: %s is full; asked to try again", message.event_id, message.adapter_id,
                     message.worker_id)  # fmt: skip
            return _Busy(str(busy))
        except Exception:
            log.exception("[Channels] run for %s on %s failed", message.event_id, message.adapter_id)
        finally:
            self._routing.pop(req.idempotency_key, None)
        return None

    async def _after_restart(self, message: ChannelMessage, done: RouteDone) -> _Routed | None:
        """The message's key already made a run (this is a replay): None to route it again."""
        assert self.router is not None
        where = f"{message.event_id} on {message.adapter_id}"
        match after_restart(done.record):
            case RunAgain(run=run):
                key = f"channel:{message.adapter_id}:{message.event_id}"
                if await self.router.tasks.release_interrupted(message.tenant_id, message.worker_id, key, run.run_id):
                    log.warning(
                        "[Channels] %s: run %s was interrupted before it acted; running it again", where, run.run_id
                    )
                return None
            case Notify(run=run, reason=reason):
                item = AttentionItem.of(message, run.run_id, reason)
                await asyncio.to_thread(self.attention.add, message.tenant_id, message.worker_id, item)
                log.warning(
                    "[Channels] %s: run %s %s; the person is told, a human should check", where, run.run_id, reason
                )
                return _Notice(NOTICE_TEXT, run.run_id)
            case Wait(run=run):
                log.info(
                    "[Channels] %s: run %s is still held by instance %s; looking again later",
                    where,
                    run.run_id,
                    run.owner,
                )
                return _Later()
            case Settled(run=run):
                log.info("[Channels] %s: already handled by run %s (%s)", where, run.run_id, run.state.value)
                return None if run.state.value == "completed" else _settled_text(run.state.value)

    # -- the answer -----------------------------------------------------------------------

    async def _later(self, entry: JournalEntry) -> Outcome:
        """Leave the entry for a later look; the attempt just counted did not run anything."""
        await asyncio.to_thread(self.journal.update, entry, attempts=max(0, entry.attempts - 1))
        self.due.put(entry.path, self.clock() + self.policy.base_s)
        return "deferred"

    async def _answer(self, entry: JournalEntry, text: str, outcome: Outcome) -> Outcome:
        return await self._deliver(entry, outcome, answer=text)

    async def _deliver(self, entry: JournalEntry, outcome: Outcome, *, answer: str | None = None) -> Outcome:
        """Send the entry's answer (or `answer`, recorded with the send); when the vendor will not take
        it, schedule the next attempt (or, past the retry horizon, set the entry aside for a person)."""
        message = entry.message
        # one write under the entry's lock before the send: the answer, and that a send began. It
        # stops an instance the entry was taken from (EntryTakenOver); and whoever finds the mark
        # after this process died does not send it again (the vendor may have taken it)
        began = entry.sending or self.clock()  # an answer in doubt sent again under its key keeps its first try
        entry = await asyncio.to_thread(self.journal.update, entry, answer=answer or entry.answer, sending=began)
        assert entry.answer is not None
        error = await self._send(message, entry.answer, entry.path.stem)
        if error is None:
            if entry.delivery is not None:
                log.info(
                    "[Channels] answer to %s on %s delivered after %d failed attempts",
                    message.event_id, message.adapter_id, entry.delivery.attempts,
                )  # fmt: skip
                record_channel_redelivery(message.platform, "delivered")
            return outcome
        now = self.clock()
        previous = entry.delivery
        failures = (previous.attempts if previous else 0) + 1
        first = previous.first_failed_at if previous else now
        if self.policy.gives_up(first, now):
            delivery = Delivery(failures, now, first, error)
            entry = await asyncio.to_thread(self.journal.update, entry, delivery=delivery, sending=None)
            since = datetime.fromtimestamp(first, UTC).isoformat()
            reason = f"undelivered since {since} after {failures} attempts: {error}"
            await asyncio.to_thread(self.journal.dead, entry.path, reason)
            self._retrying.pop(entry.path, None)
            self._count(self._given_up, message.platform, 1)
            record_channel_redelivery(message.platform, "given_up")
            log.error("[Channels] answer to %s on %s set aside: %s", message.event_id, message.adapter_id, reason)
            return "given_up"
        delay = self.policy.delay(failures)
        entry = await asyncio.to_thread(
            self.journal.update, entry, delivery=Delivery(failures, now + delay, first, error), sending=None
        )
        self._retrying[entry.path] = message.platform
        self.due.put(entry.path, now + delay)
        record_channel_redelivery(message.platform, "scheduled")
        log.warning(
            "[Channels] answer to %s on %s not delivered (%s); attempt %d in %.0f s",
            message.event_id, message.adapter_id, error, failures + 1, delay,
        )  # fmt: skip
        return "undelivered"

    async def _outcome_unknown(self, entry: JournalEntry) -> Outcome:
        """The process sending this answer stopped before the vendor said whether it took it. A
        vendor that sends one message per key (Feishu, for an hour) gets it again under the same key;
        otherwise the entry is set aside (listed as undelivered, `outcome_unknown`) rather than risk a
        second message, and a person re-sends it if it never arrived."""
        message = entry.message
        window = KEYED_PLATFORMS.get(message.platform)
        if window is not None and self.clock() - (entry.sending or 0.0) < window - KEY_MARGIN_S:
            where = f"{message.event_id} on {message.adapter_id}"
            log.warning("[Channels] answer to %s was cut off mid-send: sent again under its key", where)
            return await self._deliver(entry, "notified" if entry.run_id else "replied")
        since = datetime.fromtimestamp(entry.sending or 0.0, UTC).isoformat()
        reason = f"its process stopped while sending the answer ({since}); it may have arrived: not sent again"
        await asyncio.to_thread(self.journal.dead, entry.path, reason)
        self._retrying.pop(entry.path, None)
        self._count(self._given_up, message.platform, 1)
        log.error("[Channels] answer to %s on %s set aside: %s", message.event_id, message.adapter_id, reason)
        return "outcome_unknown"

    async def _send(self, message: ChannelMessage, text: str, key: str) -> str | None:
        """None once delivered; else why not."""
        if self.replier is None:
            level = logging.DEBUG if self._warned_no_replier else logging.ERROR
            self._warned_no_replier = True  # once: a missing replier is a setup problem, not per message
            log.log(level, "[Channels] no replier configured: answers (e.g. to %s) are not sent", message.adapter_id)
            return None
        try:
            result = await self.replier.reply(message, OutboundMessage(text, key=key))
        except Exception as exc:  # a replier bug must not lose the answer
            log.exception("[Channels] reply to %s on %s raised", message.event_id, message.adapter_id)
            return f"{type(exc).__name__}: {exc}"
        return None if result.ok else (result.error or "delivery failed")


def _settled_text(state: str) -> str | None:
    """The answer owed for a run that ended before its answer was recorded (a crash in between)."""
    return FAILURE_TEXT if state in ("failed", "budget_exceeded", "cancelled") else None


def _final_text(done: RouteDone, approval: ApprovalRequired | None) -> str | None:
    result = done.result
    match result.status:
        case "completed":
            return result.output or "Done."
        case "approval_required":
            return approval_text(approval.call_id if approval is not None else "?")
        case (
            "max_turns_exceeded" | "budget_exceeded" | "condition_stopped" | "supervisor_paused"
            | "supervisor_stopped" | "waiting"
        ):  # fmt: skip
            return result.output or FAILURE_TEXT
        case _:
            log.warning(
                "[Channels] run %s ended %s: %s %s", done.record.run_id, result.status, result.error_code, result.error
            )
            return FAILURE_TEXT


def approval_text(ref: str) -> str:
    """The answer to a conversation whose run waits for a person's confirmation `ref`."""
    return f"This needs a confirmation first. Reply /approve_confirmation {ref} or /reject_confirmation {ref}."
