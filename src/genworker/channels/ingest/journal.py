"""The journal of accepted IM messages: one file per message until its answer has been delivered.

    tenants/{t}/workers/{w}/runtime/channels/journal/{ns}-{rand}.json        accepted, answering, or
                                                                            its answer being re-sent
    tenants/{t}/workers/{w}/runtime/channels/journal/dead/{name}.json         set aside, with
                                                   {name}.reason.txt        the reason next to it

An entry (`schema_version` 3; versions 1 and 2, written before delivery and owners were tracked,
are still read) holds the message, how many runs it started (`attempts`), the answer once it is
known (written before it is sent, so a restart re-sends it instead of running the worker again),
while the vendor will not take the answer, `delivery`: the failed attempts, when the next one is
due and the last error; `owner`, the runtime instance handling it; and `sending`, when a send of
the answer began (cleared when the vendor refused it; the entry is removed once it took it). An
answer that cannot be delivered within the retry horizon is set aside under `dead/` with its answer
kept, for a person to re-send (`resend`); so is one whose `sending` a replay or a takeover finds: its
process stopped mid-send, the vendor may have taken it, and it is not sent a second time.
(`sending` came after version 3 and is optional in it: a process that predates it re-sends.)

Several processes share the journal (docs/deploy.md). A journal made with an `owner` (this
process's instance id) writes it into the entries it appends, and changes an entry only while no
other instance owns it: `claim` takes over the entry of an instance that is no longer alive, and
`update`, `done` and `owned` check the owner under the entry's lock, so an instance whose entry
was taken over stops at its next step (`EntryTakenOver`) instead of answering it a second time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
import uuid
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from genworker.channels.base import Attachment, ChannelMessage
from genworker.fsutil import move_file, striped_lock, write_atomic
from genworker.ids import safe_join, validate_id

__all__ = ["Delivery", "EntryTakenOver", "EventJournal", "JournalEntry", "decode_message", "encode_message"]

SCHEMA_VERSION = 3
_READABLE = frozenset({1, 2, SCHEMA_VERSION})


class EntryTakenOver(Exception):
    """Another runtime instance has taken the entry over (this one was taken for dead), or finished it."""


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
class Delivery:
    """An answer the vendor has not taken yet: failed attempts, the next one's time (Unix s)."""

    attempts: int
    next_at: float
    first_failed_at: float
    last_error: str


@dataclass(frozen=True, slots=True)
class JournalEntry:
    path: Path
    message: ChannelMessage
    attempts: int = 0
    answer: str | None = None  # recorded before sending, so a replay re-sends instead of re-running
    delivery: Delivery | None = None  # set while the answer waits to be re-sent
    run_id: str | None = None  # an interrupted run the answer is a notice about
    owner: str | None = None  # the runtime instance handling it (None: written before owners, or one process)
    sending: float | None = None  # when a send began (Unix s) that no vendor answer settled yet

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def dead(self) -> bool:
        return self.path.parent.name == "dead"

    def describe(self) -> dict[str, Any]:
        """For the API and the dashboard: what was asked, what is owed, and how delivery is going."""
        message, delivery = self.message, self.delivery
        return {
            "id": self.path.stem,
            "state": ("outcome_unknown" if self.sending is not None else "given_up") if self.dead else "retrying",
            "adapter_id": message.adapter_id,
            "platform": message.platform,
            "event_id": message.event_id,
            "chat_id": message.chat_id,
            "sender_id": message.sender_id,
            "received_at": message.received_at,
            "text": message.text[:500],
            "answer": (self.answer or "")[:500],
            "delivery_attempts": delivery.attempts if delivery else 0,
            "next_attempt_at": _iso(delivery.next_at) if delivery and not self.dead else None,
            "first_failed_at": _iso(delivery.first_failed_at) if delivery else None,
            "last_error": delivery.last_error if delivery else None,
        }


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat()


class EventJournal:
    """One file per accepted event under `tenants/{t}/workers/{w}/runtime/channels/journal/`; with
    `owner`, the entries this runtime instance handles (the others' are left alone while they live)."""

    def __init__(self, workspace_root: Path, owner: str | None = None) -> None:
        self.root = workspace_root
        self.owner = owner

    def folder(self, tenant_id: str, worker_id: str) -> Path:
        return safe_join(self.root, "tenants", tenant_id, "workers", worker_id) / "runtime" / "channels" / "journal"

    def append(self, message: ChannelMessage) -> JournalEntry:
        name = f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.json"
        entry = JournalEntry(self.folder(message.tenant_id, message.worker_id) / name, message, owner=self.owner)
        self._write(entry)
        return entry

    def claim(self, path: Path, alive: Callable[[str], bool], *, unowned: bool = False) -> JournalEntry | None:
        """Take the entry at `path` over when the instance that owns it is no longer `alive` (and,
        with `unowned`, when no instance owns it); the entry, now this instance's, or None (a live
        instance's, this instance's already, or gone)."""
        with self._lock(path):
            try:
                entry = self.read(path)
            except FileNotFoundError:
                return None
            if entry.owner == self.owner or (entry.owner is None and not unowned):
                return None
            if entry.owner is not None and alive(entry.owner):
                return None
            taken = dataclasses.replace(entry, owner=self.owner)
            self._write(taken)
            return taken

    def owned(self, entry: JournalEntry) -> bool:
        """The entry is still there and no other instance has taken it over."""
        with self._lock(entry.path):
            try:
                return self._mine(self.read(entry.path))
            except FileNotFoundError:
                return False

    def _mine(self, current: JournalEntry) -> bool:
        return self.owner is None or current.owner in (None, self.owner)

    def _lock(self, path: Path) -> AbstractContextManager[None]:
        return striped_lock(path.parent, path.name)

    def _write(self, entry: JournalEntry) -> None:
        record: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "attempts": entry.attempts,
            "answer": entry.answer,
            "message": encode_message(entry.message),
            "delivery": dataclasses.asdict(entry.delivery) if entry.delivery is not None else None,
            "run_id": entry.run_id,
            "owner": entry.owner,
            "sending": entry.sending,
        }
        write_atomic(entry.path, json.dumps(record, ensure_ascii=False).encode("utf-8"))

    def update(self, entry: JournalEntry, **changes: Any) -> JournalEntry:
        """The entry with `changes`, written; EntryTakenOver when another instance owns it now."""
        updated = dataclasses.replace(entry, **changes)
        if self.owner is None:
            self._write(updated)
            return updated
        with self._lock(entry.path):
            try:
                current = self.read(entry.path)
            except FileNotFoundError:
                raise EntryTakenOver(f"{entry.path.name} is gone: another instance finished it") from None
            if not self._mine(current):
                raise EntryTakenOver(f"{entry.path.name} was taken over by {current.owner}")
            updated = dataclasses.replace(updated, owner=self.owner)
            self._write(updated)
        return updated

    def read(self, path: Path) -> JournalEntry:
        data = json.loads(path.read_bytes())
        if data.get("schema_version") not in _READABLE:
            raise ValueError(
                f"{path}: unknown schema_version {data.get('schema_version')!r} (expected {SCHEMA_VERSION})"
            )
        delivery = data.get("delivery")
        return JournalEntry(
            path,
            decode_message(data["message"]),
            int(data.get("attempts", 0)),
            data.get("answer"),
            Delivery(**delivery) if delivery is not None else None,
            data.get("run_id"),
            data.get("owner"),
            data.get("sending"),
        )

    def pending(self) -> list[Path]:
        """Every worker's entries, oldest first."""
        paths = self.root.glob("tenants/*/workers/*/runtime/channels/journal/*.json")
        return sorted(paths, key=lambda p: p.name)

    def done(self, entry: JournalEntry) -> None:
        """Remove the entry (its answer is delivered), unless another instance has taken it over."""
        if self.owner is None:
            entry.path.unlink(missing_ok=True)
            return
        with self._lock(entry.path), contextlib.suppress(FileNotFoundError):
            if self._mine(self.read(entry.path)):
                entry.path.unlink()

    def dead(self, path: Path, reason: str) -> Path:
        """Set an entry aside under `journal/dead/` with the reason next to it; its new path."""
        target = path.parent / "dead" / path.name
        if move_file(path, target):
            write_atomic(target.with_suffix(".reason.txt"), reason.encode("utf-8"))
        return target

    def undelivered(self, tenant_id: str, worker_id: str) -> list[JournalEntry]:
        """Answers still owed to someone: being re-sent, or given up on (set aside with their answer)."""
        folder = self.folder(tenant_id, worker_id)
        found: list[JournalEntry] = []
        for path in sorted([*folder.glob("*.json"), *folder.glob("dead/*.json")], key=lambda p: p.name):
            try:
                entry = self.read(path)
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if entry.answer is not None and (entry.delivery is not None or entry.dead):
                found.append(entry)
        return found

    def locate(self, tenant_id: str, worker_id: str, entry_id: str) -> Path | None:
        """The entry `entry_id` (a file stem) of that worker, pending or set aside; None if unknown."""
        validate_id(entry_id, "entry id")
        folder = self.folder(tenant_id, worker_id)
        for path in (folder / f"{entry_id}.json", folder / "dead" / f"{entry_id}.json"):
            if path.is_file():
                return path
        return None

    def revive(self, path: Path) -> Path:
        """Move a set-aside entry back into the journal (a person asked to re-send it); its new path."""
        if path.parent.name != "dead":
            return path
        target = path.parent.parent / path.name
        move_file(path, target)
        path.with_suffix(".reason.txt").unlink(missing_ok=True)
        return target
