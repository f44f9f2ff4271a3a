"""The outbox: proactive messages sent exactly once per idempotency key, and re-sent until delivered.

Tools (`send_message`, `send_email`: key `tool:{run_id}:{call_id}`) and the heartbeat's notices to
a worker's owner (`heartbeat:{run_id}`) go out through it.

    tenants/{t}/workers/{w}/runtime/outbox/{entry_id}.json    one entry per key (schema_version 2; 1 is read)
    tenants/{t}/workers/{w}/runtime/outbox/.lock              flock around every change of that worker's entries

    sending -> sent
            -> retrying -> sending ...       retried on the channels' re-send schedule (30 s doubling
            -> given_up                      to 1 h, for 3 days); past it: given up, for a person to re-send
            -> failed                        an entry that asked for no retries (the heartbeat's notice
                                             then goes into the brief instead)
            -> outcome_unknown               its sender died mid-send: it may have left; never re-sent
                                             by itself

An entry is written (state `sending`) before anything is sent, under the worker's lock, so a second
send under the same key, in this process or another sharing the workspace, finds it and sends
nothing. A retry is claimed `retrying -> sending` under the same lock, so two processes never
both send it. Each attempt tries the entry's recipients in order (a person's channels in their
preferred order): the first that takes it wins. A person's re-send (`resend`) is claimed the same
way and recorded on the entry (`resent_by`, `resent_at`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal, get_args

from genworker.bus import EventBus, new_event
from genworker.delivery.messages import ChatType, DeliveryResult, OutboundFormat, OutboundMessage, Target
from genworker.delivery.redelivery import DueTimes, RedeliveryPolicy
from genworker.fsutil import file_lock, write_atomic
from genworker.ids import safe_join, validate_id
from genworker.observability.logging import log_decision, redact_text

__all__ = [
    "RESENDABLE",
    "SCHEMA_VERSION",
    "UNDELIVERED",
    "Outbox",
    "OutboxEntry",
    "OutboxError",
    "OutboxMessage",
    "OutboxNotFound",
    "OutboxState",
    "Recipient",
    "Transport",
    "outbox_events",
]

log = logging.getLogger("genworker.channels")

SCHEMA_VERSION: Final = 2
READABLE_VERSIONS: Final = (1, 2)  # 1: before resent_by / resent_at
OutboxState = Literal["sending", "sent", "retrying", "given_up", "failed", "outcome_unknown"]
UNDELIVERED: Final[frozenset[OutboxState]] = frozenset({"sending", "retrying", "given_up", "outcome_unknown"})
RESENDABLE: Final[tuple[OutboxState, ...]] = ("given_up", "outcome_unknown")  # what a person may re-send
RETENTION_S: Final = 30 * 86_400.0  # sent and failed entries are kept this long: a later send under the key is a no-op

Transport = Callable[[str, str, str, Target, OutboundMessage, str | None], Awaitable[DeliveryResult]]
"""(tenant_id, worker_id, platform, target, message, adapter key) -> the delivery's result."""
Announce = Callable[["OutboxEntry"], Awaitable[None]]


class OutboxError(Exception):
    """An entry cannot be read or does not exist; the message names the file or id."""


class OutboxNotFound(OutboxError):
    """No entry has this id (for this worker)."""


@dataclass(frozen=True, slots=True)
class Recipient:
    """One way to reach someone: a chat (or person) on one of the worker's channels."""

    platform: str
    chat_id: str  # a chat, a user id, or (email) the addresses, comma-separated
    chat_type: ChatType = "p2p"
    adapter_key: str | None = None  # the binding's key; None: the worker's first channel of `platform`
    thread_id: str | None = None
    label: str = ""  # who, for people and logs: "Dana (slack)"

    def target(self, message: OutboxMessage) -> Target:
        context: dict[str, str] = {}
        if message.subject:
            context["subject"] = message.subject
        if message.cc:
            context["cc"] = ", ".join(message.cc)
        return Target(self.chat_id, self.chat_type, self.thread_id, user_id=self.chat_id, context=context)

    def describe(self) -> str:
        return self.label or f"{self.platform}:{self.chat_id}"


@dataclass(frozen=True, slots=True)
class OutboxMessage:
    text: str
    format: OutboundFormat = "markdown"
    subject: str | None = None  # email
    cc: tuple[str, ...] = ()  # email
    cards: Mapping[str, Any] = field(default_factory=dict)  # platform -> its card (format "card"); others: markdown
    files: tuple[tuple[str, str], ...] = ()  # email: (file name, text) attachments

    def outbound(self, platform: str) -> OutboundMessage:
        """The message as `platform` gets it: its own card, if any, and attachments only by email."""
        card = self.cards.get(platform)
        fmt: OutboundFormat = "markdown" if self.format == "card" and card is None else self.format
        return OutboundMessage(self.text, fmt, card, files=self.files if platform == "email" else ())


@dataclass(frozen=True, slots=True)
class OutboxEntry:
    entry_id: str
    key: str
    tenant_id: str
    worker_id: str
    recipients: tuple[Recipient, ...]
    message: OutboxMessage
    origin: Mapping[str, str]  # run_id, call_id, tool / kind: where the send came from
    retry: bool = True
    state: OutboxState = "sending"
    created_at: float = 0.0  # Unix seconds, like every time here
    attempts: int = 0  # failed attempts so far
    next_at: float | None = None
    first_failed_at: float | None = None
    last_error: str | None = None
    delivered_to: str | None = None  # the recipient that took it
    platform: str | None = None
    message_id: str | None = None
    sent_at: float | None = None
    owner: str | None = None  # the process sending it (while `sending`)
    resent_by: str | None = None  # who last asked to send it again (`key:{key_id}`)
    resent_at: float | None = None
    schema_version: int = SCHEMA_VERSION

    def as_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["origin"] = dict(self.origin)
        return data

    @classmethod
    def from_json(cls, raw: bytes, where: str) -> OutboxEntry:
        try:
            data = json.loads(raw)
            if not isinstance(data, dict) or data.get("schema_version") not in READABLE_VERSIONS:
                version = data.get("schema_version") if isinstance(data, dict) else None
                raise ValueError(f"schema_version {version!r} is unknown; this build reads {READABLE_VERSIONS}")
            if data.get("state") not in get_args(OutboxState):
                raise ValueError(f"state {data.get('state')!r} is not one of {get_args(OutboxState)}")
            data["recipients"] = tuple(Recipient(**r) for r in data["recipients"])
            message = dict(data["message"])
            message["cc"] = tuple(message.get("cc", ()))
            message["files"] = tuple((str(n), str(t)) for n, t in message.get("files", ()))
            data["message"] = OutboxMessage(**message)
            data["schema_version"] = SCHEMA_VERSION  # written back as the current version
            return cls(**data)
        except (ValueError, TypeError, KeyError) as exc:
            raise OutboxError(f"{where}: {exc}") from None

    def describe(self) -> dict[str, Any]:
        """For APIs and the dashboard: who, what, and how delivery went (token-shaped text masked, as in logs)."""
        return {
            "id": self.entry_id,
            "key": self.key,
            "state": self.state,
            "to": [r.describe() for r in self.recipients],
            "text": redact_text(self.message.text[:500]),
            "subject": self.message.subject,
            "origin": dict(self.origin),
            "created_at": _iso(self.created_at),
            "attempts": self.attempts,
            "next_attempt_at": _iso(self.next_at) if self.state == "retrying" and self.next_at else None,
            "first_failed_at": _iso(self.first_failed_at) if self.first_failed_at else None,
            "last_error": redact_text(self.last_error) if self.last_error else None,
            "delivered_to": self.delivered_to,
            "platform": self.platform,
            "message_id": self.message_id,
            "sent_at": _iso(self.sent_at) if self.sent_at else None,
            "resent_by": self.resent_by,
            "resent_at": _iso(self.resent_at) if self.resent_at else None,
        }


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat()


def entry_id_for(key: str) -> str:
    return "ob_" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:24]


@dataclass
class Outbox:
    workspace_root: Path
    transport: Transport
    policy: RedeliveryPolicy = field(default_factory=RedeliveryPolicy)
    owner: str = "outbox"  # the runtime sets its instance id
    announce: Announce | None = None  # an event per settled attempt (composition root)
    retention_s: float = RETENTION_S
    due: DueTimes = field(default_factory=DueTimes)
    _task: asyncio.Task[None] | None = None
    _inflight: set[Path] = field(default_factory=set)

    @property
    def clock(self) -> Callable[[], float]:
        return self.due.clock

    # -- sending --------------------------------------------------------------------------------

    async def send(
        self,
        key: str,
        tenant_id: str,
        worker_id: str,
        recipients: Iterable[Recipient],
        message: OutboxMessage,
        *,
        origin: Mapping[str, str] | None = None,
        retry: bool = True,
    ) -> OutboxEntry:
        """Send `message` once under `key`: the first call sends (one attempt now, then the re-send
        schedule when it fails and `retry`); a later call returns the entry as it is, sending nothing."""
        listed = tuple(recipients)
        if not listed:
            raise ValueError("a message needs at least one recipient")
        entry = OutboxEntry(
            entry_id_for(key),
            key,
            tenant_id,
            worker_id,
            listed,
            message,
            dict(origin or {}),
            retry,
            created_at=self.clock(),
            owner=self.owner,
        )
        created, current = await asyncio.to_thread(self._create, entry)
        if not created:
            log.info("[Outbox] %s already %s (%s): not sent again", key, current.state, current.entry_id)
            return current
        return await self._attempt(current)

    async def _attempt(self, entry: OutboxEntry) -> OutboxEntry:
        path = self._path(entry.tenant_id, entry.worker_id, entry.entry_id)
        self._inflight.add(path)
        try:
            errors: list[str] = []
            for recipient in entry.recipients:
                outbound = entry.message.outbound(recipient.platform)
                try:
                    result = await self.transport(
                        entry.tenant_id,
                        entry.worker_id,
                        recipient.platform,
                        recipient.target(entry.message),
                        outbound,
                        recipient.adapter_key,
                    )
                except Exception as exc:  # a transport bug must not lose the message
                    log.exception("[Outbox] sending %s to %s raised", entry.entry_id, recipient.describe())
                    result = DeliveryResult(False, recipient.platform, error=f"{type(exc).__name__}: {exc}")
                if result.ok:
                    return await self._settle(entry, _sent(entry, recipient, result, self.clock()))
                errors.append(f"{recipient.describe()}: {result.error or 'delivery failed'}")
            return await self._settle(entry, self._failed(entry, "; ".join(errors)[:1000]))
        finally:
            self._inflight.discard(path)

    def _failed(self, entry: OutboxEntry, error: str) -> OutboxEntry:
        now = self.clock()
        attempts, first = entry.attempts + 1, entry.first_failed_at or now
        changed = dataclasses.replace(entry, attempts=attempts, first_failed_at=first, last_error=error, owner=None)
        if not entry.retry:
            return dataclasses.replace(changed, state="failed", next_at=None)
        if self.policy.gives_up(first, now):
            return dataclasses.replace(changed, state="given_up", next_at=None)
        return dataclasses.replace(changed, state="retrying", next_at=now + self.policy.delay(attempts))

    async def _settle(self, entry: OutboxEntry, settled: OutboxEntry) -> OutboxEntry:
        await asyncio.to_thread(self._write_locked, settled)
        path = self._path(entry.tenant_id, entry.worker_id, entry.entry_id)
        where = f"{settled.entry_id} ({settled.key})"
        if settled.state == "sent":
            later = f" after {entry.attempts} failed attempts" if entry.attempts else ""
            log.info("[Outbox] %s delivered to %s%s", where, settled.delivered_to, later)
        elif settled.state == "retrying" and settled.next_at is not None:
            self.due.put(path, settled.next_at)
            wait = settled.next_at - self.clock()
            log.warning("[Outbox] %s not delivered (%s); attempt %d in %.0f s", where, settled.last_error,
                        settled.attempts + 1, wait)  # fmt: skip
        else:
            log.error("[Outbox] %s %s after %d attempts: %s", where, settled.state, settled.attempts,
                      settled.last_error)  # fmt: skip
        await self._announce(settled)
        return settled

    async def _announce(self, entry: OutboxEntry) -> None:
        if self.announce is None:
            return
        try:
            await self.announce(entry)
        except Exception:  # the entry is the truth; the event is best effort
            log.warning("[Outbox] event for %s not published", entry.entry_id, exc_info=True)

    # -- re-sending -----------------------------------------------------------------------------

    async def start(self, alive: Callable[[str], bool] | None = None) -> int:
        """Pick up what a previous process left (`recover`), then re-send on schedule; the number of
        entries waiting for a re-send."""
        await self.recover(alive)
        if self._task is None:
            self._task = asyncio.create_task(self._wake_due(), name="outbox")
        return len(self.due)

    async def stop(self) -> None:
        """Stop re-sending; entries waiting stay on disk for the next start."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def recover(self, alive: Callable[[str], bool] | None = None) -> list[OutboxEntry]:
        """Every worker's entries: `retrying` ones get their due time; `sending` ones whose sender is
        not `alive` (None: every other process is gone) become outcome_unknown; sent and failed
        entries past the retention are removed. Returns the entries it changed."""
        changed: list[OutboxEntry] = []
        for path in await asyncio.to_thread(self._all_paths):
            if path in self._inflight:
                continue
            try:
                entry = await asyncio.to_thread(self._read, path)
            except OutboxError as exc:  # one unreadable file must not stop the others
                log.error("[Outbox] skipped %s", exc)
                continue
            if entry.state == "retrying":
                self.due.put(path, entry.next_at or 0.0)
            elif entry.state == "sending" and not _is_alive(entry.owner, self.owner, alive):
                unknown = await asyncio.to_thread(self._transition, entry, ("sending",), "outcome_unknown")
                if unknown is not None:
                    log.error("[Outbox] %s (%s): its sender stopped mid-send; it may or may not have left",
                              unknown.entry_id, unknown.key)  # fmt: skip
                    await self._announce(unknown)
                    changed.append(unknown)
            elif entry.state in ("sent", "failed") and self.clock() - (entry.sent_at or entry.created_at) > (
                self.retention_s
            ):
                await asyncio.to_thread(self._remove, entry)
        return changed

    async def _wake_due(self) -> None:
        while True:
            for path in await self.due.wait_due():
                try:
                    await self.retry(path)
                except Exception:
                    log.exception("[Outbox] re-sending %s failed", path.name)

    async def retry(self, path: Path) -> OutboxEntry | None:
        """Claim a due `retrying` entry and attempt it; None when another process or attempt has it."""
        try:
            entry = await asyncio.to_thread(self._read, path)
        except OutboxError as exc:
            log.error("[Outbox] skipped %s", exc)
            return None
        if entry.state == "retrying" and entry.next_at is not None and entry.next_at > self.clock():
            self.due.put(path, entry.next_at)  # not due yet (re-read after another process's attempt)
            return None
        claimed = await asyncio.to_thread(self._transition, entry, ("retrying",), "sending")
        return await self._attempt(claimed) if claimed is not None else None

    async def resend(self, tenant_id: str, worker_id: str, entry_id: str, *, by: str | None = None) -> OutboxEntry:
        """A person (`by`) asks to send a given-up (or outcome-unknown) entry again now, with a fresh
        retry horizon; the claim is recorded on the entry and announced (`outbox.sending`) before the
        attempt. OutboxError when there is no such entry; ValueError when it is not in such a state
        (another caller's re-send, in this process or another, claimed it first)."""
        path = self._path(tenant_id, worker_id, validate_id(entry_id, "outbox id"))
        entry = await asyncio.to_thread(self._read, path)
        was = entry.state
        marks = {"resent_by": by, "resent_at": self.clock(), "first_failed_at": None, "attempts": 0}
        claimed = await asyncio.to_thread(self._transition, entry, RESENDABLE, "sending", marks)
        if claimed is None:
            now = (await asyncio.to_thread(self._read, path)).state
            raise ValueError(f"outbox entry {entry_id} is {now}: only given_up or outcome_unknown is re-sent")
        log_decision(log, "outbox_resend", was, outbox_id=entry_id, key=claimed.key, by=by,
                     tenant_id=tenant_id, worker_id=worker_id)  # fmt: skip
        await self._announce(claimed)
        return await self._attempt(claimed)

    # -- reading --------------------------------------------------------------------------------

    async def get(self, tenant_id: str, worker_id: str, entry_id: str) -> OutboxEntry:
        return await asyncio.to_thread(self._read, self._path(tenant_id, worker_id, validate_id(entry_id, "outbox id")))

    async def find(self, tenant_id: str, worker_id: str, key: str) -> OutboxEntry | None:
        """The entry sent under `key`, if any."""
        try:
            return await self.get(tenant_id, worker_id, entry_id_for(key))
        except OutboxError:
            return None

    async def entries(
        self, tenant_id: str, worker_id: str, states: Iterable[OutboxState] | None = None
    ) -> list[OutboxEntry]:
        """A worker's entries, oldest first; only those in `states` when given."""
        wanted = frozenset(states) if states is not None else None
        found = await asyncio.to_thread(self._worker_entries, tenant_id, worker_id)
        return [e for e in found if wanted is None or e.state in wanted]

    async def undelivered(self, tenant_id: str, worker_id: str) -> list[OutboxEntry]:
        """Messages still owed: being sent or re-sent, given up, or of unknown outcome."""
        return await self.entries(tenant_id, worker_id, UNDELIVERED)

    # -- files (blocking) -----------------------------------------------------------------------

    def _folder(self, tenant_id: str, worker_id: str) -> Path:
        return safe_join(self.workspace_root, "tenants", tenant_id, "workers", worker_id) / "runtime" / "outbox"

    def _path(self, tenant_id: str, worker_id: str, entry_id: str) -> Path:
        return self._folder(tenant_id, worker_id) / f"{entry_id}.json"

    def _read(self, path: Path) -> OutboxEntry:
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raise OutboxNotFound(f"no outbox entry {path.stem!r}") from None
        return OutboxEntry.from_json(raw, path.as_posix())

    def _write(self, entry: OutboxEntry) -> None:
        data = json.dumps(entry.as_json(), indent=2, ensure_ascii=False).encode("utf-8")
        write_atomic(self._path(entry.tenant_id, entry.worker_id, entry.entry_id), data, mode=0o600)

    def _lock(self, tenant_id: str, worker_id: str) -> contextlib.AbstractContextManager[None]:
        return file_lock(self._folder(tenant_id, worker_id) / ".lock")

    def _create(self, entry: OutboxEntry) -> tuple[bool, OutboxEntry]:
        path = self._path(entry.tenant_id, entry.worker_id, entry.entry_id)
        with self._lock(entry.tenant_id, entry.worker_id):
            if path.exists():
                return False, self._read(path)
            self._write(entry)
            return True, entry

    def _write_locked(self, entry: OutboxEntry) -> None:
        with self._lock(entry.tenant_id, entry.worker_id):
            self._write(entry)

    def _transition(
        self,
        entry: OutboxEntry,
        expected: tuple[OutboxState, ...],
        state: OutboxState,
        changes: Mapping[str, Any] | None = None,
    ) -> OutboxEntry | None:
        """`expected` -> `state` (with `changes`) under the lock; None when the entry is no longer in `expected`."""
        path = self._path(entry.tenant_id, entry.worker_id, entry.entry_id)
        with self._lock(entry.tenant_id, entry.worker_id):
            current = self._read(path)
            if current.state not in expected:
                return None
            owner = self.owner if state == "sending" else None
            changed = dataclasses.replace(current, **(changes or {}), state=state, owner=owner)
            self._write(changed)
            return changed

    def _remove(self, entry: OutboxEntry) -> None:
        with self._lock(entry.tenant_id, entry.worker_id):
            self._path(entry.tenant_id, entry.worker_id, entry.entry_id).unlink(missing_ok=True)

    def _all_paths(self) -> list[Path]:
        return sorted(self.workspace_root.glob("tenants/*/workers/*/runtime/outbox/ob_*.json"))

    def _worker_entries(self, tenant_id: str, worker_id: str) -> list[OutboxEntry]:
        found = []
        for path in self._folder(tenant_id, worker_id).glob("ob_*.json"):
            try:
                found.append(self._read(path))
            except OutboxError as exc:
                log.error("[Outbox] skipped %s", exc)
        return sorted(found, key=lambda e: (e.created_at, e.entry_id))


def _sent(entry: OutboxEntry, recipient: Recipient, result: DeliveryResult, now: float) -> OutboxEntry:
    return dataclasses.replace(
        entry,
        state="sent",
        delivered_to=recipient.describe(),
        platform=result.fell_back_to or result.platform,
        message_id=result.message_id,
        sent_at=now,
        next_at=None,
        owner=None,
    )


def _is_alive(sender: str | None, me: str, alive: Callable[[str], bool] | None) -> bool:
    if sender is None:
        return False
    if sender == me:
        return True  # this process is sending it right now
    return alive is not None and alive(sender)  # None: at start-up, every other process is gone


def outbox_events(bus: EventBus) -> Announce:
    """The outbox's announcer: `outbox.{state}` (sent, retrying, given_up, failed, outcome_unknown, and
    sending when a person re-sends an entry: `resent_by` says who)."""

    async def announce(entry: OutboxEntry) -> None:
        payload = {
            "outbox_id": entry.entry_id,
            "key": entry.key,
            "state": entry.state,
            "run_id": entry.origin.get("run_id"),
            "to": [r.describe() for r in entry.recipients],
            "delivered_to": entry.delivered_to,
            "attempts": entry.attempts,
            "last_error": entry.last_error,
            "resent_by": entry.resent_by,
        }
        event = new_event(
            f"outbox.{entry.state}",
            source="outbox",
            tenant_id=entry.tenant_id,
            worker_id=entry.worker_id,
            payload=payload,
        )
        await bus.publish(event)

    return announce
