"""Accepted channel events: claimed once, journaled durably, then processed off the request path.

The webhook route calls `ChannelIngest.accept`: the event id is claimed in the dedupe store
(a repeat stops there), the message is written to the worker's journal
(`runtime/channels/journal/*.json`, atomic, schema_version 1), and the route acks. The
`ChannelProcessor` works the journal: on start it replays every entry a previous process
left behind, then takes new ones from an in-memory queue. An entry is deleted only when
it is handled; the answer is recorded in the entry before it is sent, so a replay after a
crash re-sends that answer instead of running the worker twice (and the run's idempotency
key `channel:{adapter}:{event}` stops a second run regardless).

Handling one message: drop group messages from chats not in `chat_ids`; in groups, a
message that does not mention the bot goes to the inbox as a sensed fact when
`features.group_monitoring` is on, to the worker when `features.mention_required` is
false, else nowhere; IM commands are answered by `commands`; anything else runs through
`WorkerRouter.route_stream` on a thread derived from platform + chat + thread, and the
final answer (or a neutral failure line, never provider error text) is sent with the
`ChannelReplier`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from genworker.autonomy.inbox import InboxWriter, new_item
from genworker.channels import commands
from genworker.channels.base import (
    Attachment,
    ChannelMessage,
    ChannelReplier,
    OutboundMessage,
    ReplayKey,
    StreamingReplier,
)
from genworker.channels.dedupe import DedupeStore, FileDedupeStore, RedisDedupeStore
from genworker.channels.errors import VerificationError
from genworker.channels.registry import ChannelBinding, ChannelRegistry
from genworker.channels.replay import FileReplayGuard, RedisReplayGuard, ReplayGuard
from genworker.engine.events import ApprovalRequired, TextDelta
from genworker.fsutil import move_file, write_atomic
from genworker.ids import safe_join
from genworker.worker.router import RouteDone, RouteRequest, WorkerRouter

__all__ = [
    "FAILURE_TEXT",
    "ChannelIngest",
    "ChannelProcessor",
    "Channels",
    "EventJournal",
    "JournalEntry",
    "Outcome",
    "approval_text",
    "build_channels",
    "create_channels",
    "decode_message",
    "encode_message",
    "session_thread_id",
    "stop_with",
]

log = logging.getLogger("genworker.channels")

SCHEMA_VERSION = 1
MAX_ATTEMPTS = 3
OUTCOMES_KEPT = 1000
FAILURE_TEXT = "Sorry, I could not finish that just now. Please try again in a moment."
Outcome = Literal["replied", "command", "sensed", "ignored", "failed"]


def session_thread_id(message: ChannelMessage) -> str:
    """A stable conversation thread per platform + adapter + chat (+ platform thread)."""
    basis = "\x1f".join((message.platform, message.adapter_id, message.chat_id, message.thread_id or ""))
    return "ch-" + hashlib.sha256(basis.encode("utf-8")).hexdigest()[:32]


def encode_message(message: ChannelMessage) -> dict[str, Any]:
    """`message` as JSON (the journal's form; `decode_message` reads it back)."""
    data = dataclasses.asdict(message)
    data["reply_context"] = dict(message.reply_context)
    return data


def decode_message(data: Mapping[str, Any]) -> ChannelMessage:
    fields = dict(data)
    fields["mentions"] = tuple(fields.get("mentions", ()))
    fields["attachments"] = tuple(Attachment(**a) for a in fields.get("attachments", ()))
    return ChannelMessage(**fields)


@dataclass(frozen=True, slots=True)
class JournalEntry:
    path: Path
    message: ChannelMessage
    attempts: int = 0
    answer: str | None = None  # recorded before sending, so a replay re-sends instead of re-running


class EventJournal:
    """One file per accepted event under `tenants/{t}/workers/{w}/runtime/channels/journal/`."""

    def __init__(self, workspace_root: Path) -> None:
        self.root = workspace_root

    def folder(self, tenant_id: str, worker_id: str) -> Path:
        return safe_join(self.root, "tenants", tenant_id, "workers", worker_id) / "runtime" / "channels" / "journal"

    def append(self, message: ChannelMessage) -> JournalEntry:
        name = f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.json"
        entry = JournalEntry(self.folder(message.tenant_id, message.worker_id) / name, message)
        self._write(entry)
        return entry

    def _write(self, entry: JournalEntry) -> None:
        record = {
            "schema_version": SCHEMA_VERSION,
            "attempts": entry.attempts,
            "answer": entry.answer,
            "message": encode_message(entry.message),
        }
        write_atomic(entry.path, json.dumps(record, ensure_ascii=False).encode("utf-8"))

    def update(self, entry: JournalEntry, **changes: Any) -> JournalEntry:
        updated = dataclasses.replace(entry, **changes)
        self._write(updated)
        return updated

    def read(self, path: Path) -> JournalEntry:
        data = json.loads(path.read_bytes())
        if data.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(
                f"{path}: unknown schema_version {data.get('schema_version')!r} (expected {SCHEMA_VERSION})"
            )
        return JournalEntry(path, decode_message(data["message"]), int(data.get("attempts", 0)), data.get("answer"))

    def pending(self) -> list[Path]:
        """Every worker's entries, oldest first."""
        paths = self.root.glob("tenants/*/workers/*/runtime/channels/journal/*.json")
        return sorted(paths, key=lambda p: p.name)

    def done(self, entry: JournalEntry) -> None:
        entry.path.unlink(missing_ok=True)

    def dead(self, path: Path, reason: str) -> None:
        """Set an entry aside under `journal/dead/` with the reason next to it."""
        target = path.parent / "dead" / path.name
        if move_file(path, target):
            write_atomic(target.with_suffix(".reason.txt"), reason.encode("utf-8"))


class ChannelIngest:
    """The route's side: claim, journal, hand to the processor. True when newly accepted."""

    def __init__(
        self,
        dedupe: DedupeStore,
        journal: EventJournal,
        processor: ChannelProcessor | None = None,
        replay: ReplayGuard | None = None,
    ) -> None:
        self.dedupe = dedupe
        self.journal = journal
        self.processor = processor
        self.replay = replay or FileReplayGuard(journal.root)

    async def accept(self, binding: ChannelBinding, message: ChannelMessage, replay: ReplayKey | None = None) -> bool:
        """VerificationError `replayed` when `replay` (a signature over no body) already came with
        another message."""
        tenant_id, worker_id, event_id = binding.tenant_id, binding.worker_id, message.event_id
        if replay is not None and not await self.replay.first_use(tenant_id, worker_id, replay, event_id):
            raise VerificationError(
                "replay", "this timestamp and sign were already used by another message", code="replayed"
            )
        key = f"{binding.platform}:{binding.key}:{event_id}"
        try:
            if not await self.dedupe.claim(tenant_id, worker_id, key):
                return False
            try:
                entry = await asyncio.to_thread(self.journal.append, message)
            except BaseException:
                await self.dedupe.release(tenant_id, worker_id, key)  # let the platform retry
                raise
        except BaseException:
            if replay is not None:
                await self.replay.forget(tenant_id, worker_id, replay, event_id)
            raise
        if self.processor is not None:
            self.processor.submit(entry)
        return True


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
    ) -> None:
        self.registry = registry
        self.journal = journal
        self.router = router
        self.replier = replier  # the composition root (or a test) may set it after construction
        self.inbox = inbox
        self.commands_backend = commands_backend
        self.concurrency = concurrency
        self.outcomes: dict[str, Outcome] = {}  # the last OUTCOMES_KEPT outcomes by event id, for status
        self.listeners: list[Callable[[ChannelMessage, Outcome], None]] = []  # told once an entry is handled
        self._queue: asyncio.Queue[JournalEntry | Path] = asyncio.Queue()
        self._workers: list[asyncio.Task[None]] = []
        self._warned_no_replier = False
        self._inflight: set[Path] = set()
        self._routing: dict[str, ChannelMessage] = {}  # by the run's idempotency key, while it runs

    async def start(self) -> int:
        """Queue what a previous process left in the journal, then start working; returns that count."""
        left = await asyncio.to_thread(self.journal.pending)
        for path in left:
            self._queue.put_nowait(path)
        if left:
            log.warning("[Channels] replaying %d accepted events left unprocessed by a previous process", len(left))
        self._workers = [
            asyncio.create_task(self._work(), name=f"channel-processor-{i}") for i in range(self.concurrency)
        ]
        return len(left)

    async def stop(self) -> None:
        """Stop taking work; unfinished entries stay in the journal for the next start."""
        for task in self._workers:
            task.cancel()
        for task in self._workers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._workers.clear()

    def origin(self, idempotency_key: str | None) -> ChannelMessage | None:
        """The message a run of this process is answering, while it runs (by the run's idempotency key)."""
        return self._routing.get(idempotency_key) if idempotency_key is not None else None

    def submit(self, entry: JournalEntry) -> None:
        self._queue.put_nowait(entry)

    async def drain(self) -> None:
        """Wait until every queued entry has been handled."""
        await self._queue.join()

    async def _work(self) -> None:
        while True:
            item = await self._queue.get()
            try:
                await self._handle(item)
            except Exception:
                log.exception("[Channels] processing a journal entry failed")
            finally:
                self._queue.task_done()

    async def _handle(self, item: JournalEntry | Path) -> None:
        if isinstance(item, Path):
            path = item
            try:
                entry = await asyncio.to_thread(self.journal.read, path)
            except FileNotFoundError:
                return
            except (ValueError, KeyError, TypeError) as exc:
                log.error("[Channels] unreadable journal entry %s set aside: %s", path, exc)
                await asyncio.to_thread(self.journal.dead, path, f"unreadable: {exc}")
                return
        else:
            entry = item
        if entry.path in self._inflight or not entry.path.exists():  # queued twice (replay + submit), or done
            return
        self._inflight.add(entry.path)
        try:
            await self._handle_entry(entry)
        finally:
            self._inflight.discard(entry.path)

    async def _handle_entry(self, entry: JournalEntry) -> None:
        if entry.attempts >= MAX_ATTEMPTS:
            log.error("[Channels] event %s failed %d times; set aside", entry.message.event_id, entry.attempts)
            await asyncio.to_thread(self.journal.dead, entry.path, f"gave up after {entry.attempts} attempts")
            self._record(entry.message, "failed")
            return
        outcome = await self.process(entry)
        await asyncio.to_thread(self.journal.done, entry)
        self._record(entry.message, outcome)

    def _record(self, message: ChannelMessage, outcome: Outcome) -> None:
        self.outcomes[message.event_id] = outcome
        if len(self.outcomes) > OUTCOMES_KEPT:
            del self.outcomes[next(iter(self.outcomes))]
        for listener in self.listeners:
            listener(message, outcome)

    # -- one message ----------------------------------------------------------------------

    async def process(self, entry: JournalEntry) -> Outcome:
        message = entry.message
        if entry.answer is not None:  # answered before a crash: send that answer, do not run again
            await self._reply(message, entry.answer)
            return "replied"
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
            await self._answer(entry, reply.text)
            return "command"
        if binding.channel.reply_mode != "complete" and isinstance(self.replier, StreamingReplier):
            return await self._run_streamed(entry, self.replier)
        answer = await self._run(message)
        if answer is None:
            return "ignored"
        await self._answer(entry, answer)
        return "failed" if answer == FAILURE_TEXT else "replied"

    async def _run_streamed(self, entry: JournalEntry, replier: StreamingReplier) -> Outcome:
        """`reply_mode` streaming / card_update: the model's text goes out while it is produced. The
        answer is journaled once complete; a crash mid-stream leaves the partial message, and the
        replay finds the run done under its idempotency key, so nothing is sent twice."""
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
            answer = await self._run(message, on_text=on_text)
        finally:
            pieces.put_nowait(None)
            result = await sending
        if not result.ok:
            where = f"{message.event_id} on {message.adapter_id}"
            log.warning("[Channels] streamed reply to %s failed: %s", where, result.error)
        if answer is None:
            return "ignored"
        shown = "".join(streamed)
        if answer.strip() == shown.strip():
            await asyncio.to_thread(self.journal.update, entry, answer=answer)
        else:  # nothing streamed (a workflow), or the run did not finish as streamed: say the rest
            await self._answer(entry, answer)
        return "failed" if answer == FAILURE_TEXT else "replied"

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
        item = new_item(
            message.tenant_id,
            message.worker_id,
            "channel",
            message.adapter_id,
            "channel.group_message",
            payload,
            dedupe_key=f"channel:{message.adapter_id}:{message.event_id}",
            metadata={"platform": message.platform},
        )
        await self.inbox.write(item)
        return "sensed"

    async def _run(self, message: ChannelMessage, *, on_text: Callable[[str], None] | None = None) -> str | None:
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
        approval: ApprovalRequired | None = None
        self._routing[key] = message
        try:
            async for event in self.router.route_stream(req):
                if isinstance(event, TextDelta) and on_text is not None:
                    on_text(event.text)
                elif isinstance(event, ApprovalRequired):
                    approval = event
                elif isinstance(event, RouteDone):
                    return _final_text(event, approval)
        except Exception:
            log.exception("[Channels] run for %s on %s failed", message.event_id, message.adapter_id)
            return FAILURE_TEXT
        finally:
            self._routing.pop(key, None)
        return FAILURE_TEXT

    async def _answer(self, entry: JournalEntry, text: str) -> None:
        await asyncio.to_thread(self.journal.update, entry, answer=text)
        await self._reply(entry.message, text)

    async def _reply(self, message: ChannelMessage, text: str) -> None:
        if self.replier is None:
            level = logging.DEBUG if self._warned_no_replier else logging.ERROR
            self._warned_no_replier = True  # once: a missing replier is a setup problem, not per message
            log.log(level, "[Channels] no replier configured: answers (e.g. to %s) are not sent", message.adapter_id)
            return
        result = await self.replier.reply(message, OutboundMessage(text))
        if not result.ok:
            log.warning("[Channels] reply to %s on %s failed: %s", message.event_id, message.adapter_id, result.error)


def _final_text(done: RouteDone, approval: ApprovalRequired | None) -> str | None:
    result = done.result
    if result.error_code == "duplicate":  # this event already ran (a replay): do not answer twice
        return None
    match result.status:
        case "completed":
            return result.output or "Done."
        case "approval_required":
            return approval_text(approval.call_id if approval is not None else "?")
        case "max_turns_exceeded" | "condition_stopped" | "waiting":
            return result.output or FAILURE_TEXT
        case _:
            log.warning(
                "[Channels] run %s ended %s: %s %s", done.record.run_id, result.status, result.error_code, result.error
            )
            return FAILURE_TEXT


def approval_text(ref: str) -> str:
    """The answer to a conversation whose run waits for a person's confirmation `ref`."""
    return f"This needs a confirmation first. Reply /approve_confirmation {ref} or /reject_confirmation {ref}."


@dataclass
class Channels:
    """What the webhook routes use; built once by `build_channels`."""

    registry: ChannelRegistry
    ingest: ChannelIngest
    processor: ChannelProcessor
    replayed: int = 0  # journal entries a previous process left, replayed at start

    async def start(self) -> int:
        return await self.processor.start()

    def describe(self) -> dict[str, Any]:
        """For a status / debug view: bindings, backends, what was replayed."""
        return {
            "bindings": len(self.registry.all()),
            "dedupe": "redis" if not isinstance(self.ingest.dedupe, FileDedupeStore) else "files",
            "replayed": self.replayed,
            "replier": self.processor.replier is not None,
            "commands": self.processor.commands_backend is not None,
        }

    async def stop(self) -> None:
        await self.processor.stop()


def create_channels(
    registry: ChannelRegistry,
    *,
    dedupe: DedupeStore,
    router: WorkerRouter | None = None,
    replier: ChannelReplier | None = None,
    inbox: InboxWriter | None = None,
    commands_backend: commands.CommandBackend | None = None,
    replay: ReplayGuard | None = None,
) -> Channels:
    journal = EventJournal(registry.workspace.root)
    processor = ChannelProcessor(
        registry, journal, router=router, replier=replier, inbox=inbox, commands_backend=commands_backend
    )
    return Channels(registry, ChannelIngest(dedupe, journal, processor, replay), processor)


async def build_channels(runtime: Any) -> Channels:
    """Build, start and attach (`runtime.channels`) the channel ingress; after the router and inbox.

    Dedupe claims and seen DingTalk signs go to Redis when the runtime has a shared Redis, else to
    files. The replier
    is `runtime.channel_replier` when the composition root provides one (the outbound
    `ChannelDelivery`); it can also be set later on `runtime.channels.processor.replier`.
    """
    registry = ChannelRegistry(runtime.registry)
    aredis = getattr(runtime, "aredis", None)
    root = registry.workspace.root
    dedupe: DedupeStore = RedisDedupeStore(aredis) if aredis is not None else FileDedupeStore(root)
    replay: ReplayGuard = RedisReplayGuard(aredis) if aredis is not None else FileReplayGuard(root)
    channels = create_channels(
        registry,
        dedupe=dedupe,
        replay=replay,
        router=runtime.router,
        replier=getattr(runtime, "channel_replier", None),
        inbox=runtime.inbox,
        commands_backend=getattr(runtime, "command_backend", None),
    )
    channels.replayed = await channels.start()
    runtime.channels = channels
    return channels


async def stop_with(stop: asyncio.Event, channels: Channels) -> None:
    """Stop `channels` once `stop` is set (the runtime awaits this task at shutdown)."""
    await stop.wait()
    await channels.stop()
