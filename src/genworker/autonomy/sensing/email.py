"""The email sensor: new messages of IMAP folders, by UID, with stdlib imaplib.

For each folder the cursor keeps its UIDVALIDITY and the last reported UID; each poll looks for
UIDs above it (at most `max_messages` per folder and poll, the rest next poll) and reports
`email.received` facts keyed by folder + UIDVALIDITY + UID. Folders are opened read-only, so
nothing is marked seen. When UIDVALIDITY changes (the folder was rebuilt, its UIDs mean nothing
now), an `email.mailbox_reset` fact is written and the messages that are new by INTERNALDATE (not
older than the newest one seen, minus the Message-IDs already reported) are reported once.

Credentials come from the worker's CHANNEL_CREDENTIALS.json `email` section (worker_imap_host,
worker_imap_port, worker_username or worker_address, worker_password); the IMAP helpers are
`genworker.mail.imap`, shared with the email channel and the mailbox tools.
"""

from __future__ import annotations

import contextlib
import imaplib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from email.utils import parseaddr
from typing import Any

from genworker.autonomy.sensing.base import Clock, Observation, PullSensor, utc_now
from genworker.autonomy.sensing.cursors import Cursor, CursorStore
from genworker.autonomy.sensing.errors import SensorPollError
from genworker.autonomy.sensing.facts import Fact, FactEmitter
from genworker.autonomy.sensing.filters import EmailFilter
from genworker.mail.errors import MailServerError
from genworker.mail.imap import (
    BODY_ITEMS,
    HEADER_ITEMS,
    FetchedMessage,
    ImapAccount,
    fetch_messages,
    header_value,
    imap_date,
    open_imap,
    parse_message,
    search_uids,
    select_folder,
)
from genworker.workspace.models.persona import SensorConfig

__all__ = ["EmailSensor"]

RECENT_IDS = 200  # Message-IDs kept in the cursor to recognise old mail after a UIDVALIDITY change


class EmailSensor(PullSensor):
    def __init__(
        self,
        config: SensorConfig,
        emitter: FactEmitter,
        cursors: CursorStore,
        clock: Clock = utc_now,
        *,
        sensor_filter: EmailFilter,
        account: ImapAccount,
        connect: Callable[[ImapAccount], imaplib.IMAP4] = open_imap,
    ) -> None:
        super().__init__(config, emitter, cursors, clock)
        self.filter = sensor_filter
        self.account = account
        self.connect = connect

    def scope(self) -> str:
        return f"imap={self.account.host}/{self.account.username}"

    def observe(self, previous: Cursor | None, seq: int) -> Observation:
        stored = previous.state.get("folders", {}) if previous is not None else {}
        facts: list[Fact] = []
        folders: dict[str, Any] = {}
        with self._session() as imap:
            for folder in self.filter.folders:
                old = stored.get(folder) if isinstance(stored, Mapping) else None
                found, folders[folder] = self._folder(imap, folder, old, seq)
                facts.extend(found)
        return Observation(tuple(facts), {"folders": folders})

    def _folder(
        self, imap: imaplib.IMAP4, folder: str, stored: Mapping[str, Any] | None, seq: int
    ) -> tuple[list[Fact], dict[str, Any]]:
        """The facts of one folder since its state (None: never polled) and its next state."""
        uidvalidity = select_folder(imap, folder)
        all_uids = search_uids(imap, "ALL")
        if stored is None and self.filter.on_first_poll == "baseline":
            last = max(all_uids, default=0)
            newest = fetch_messages(imap, [last], "(UID INTERNALDATE)") if last else []
            return [], _state(uidvalidity, last, newest[0].internaldate if newest else None, [])
        old = _State.of(stored) if stored is not None else _State(uidvalidity, 0, None, ())
        if old.uidvalidity != uidvalidity:
            return self._after_reset(imap, folder, old, uidvalidity, all_uids, seq)
        uids = sorted(u for u in all_uids if u > old.last_uid)[: self.filter.max_messages]
        messages = fetch_messages(imap, uids, HEADER_ITEMS)
        facts = self._facts(imap, folder, uidvalidity, messages)
        return facts, _next_state(old, uidvalidity, max(uids, default=old.last_uid), messages, facts)

    def _after_reset(
        self, imap: imaplib.IMAP4, folder: str, old: _State, uidvalidity: int, uids: list[int], seq: int
    ) -> tuple[list[Fact], dict[str, Any]]:
        reset = Fact(
            "email.mailbox_reset",
            {"mailbox": folder, "old_uidvalidity": old.uidvalidity, "new_uidvalidity": uidvalidity},
            f"{seq}:reset:{folder}:{old.uidvalidity}:{uidvalidity}",
        )
        candidates = uids
        if old.last_internaldate is not None:
            since = (old.last_internaldate - timedelta(days=1)).date()
            candidates = search_uids(imap, "SINCE", imap_date(since))
        seen = set(old.recent_ids)
        fresh = [
            m for m in fetch_messages(imap, sorted(candidates), HEADER_ITEMS) if _unseen(m, old.last_internaldate, seen)
        ]
        shown = fresh[-self.filter.max_messages :]
        facts = [reset]
        if len(shown) < len(fresh):
            payload = {"mailbox": folder, "total": len(fresh), "reported": len(shown)}
            facts.append(Fact("email.messages_truncated", payload, f"{seq}:truncated:{folder}:{uidvalidity}"))
        facts.extend(self._facts(imap, folder, uidvalidity, shown))
        return facts, _next_state(old, uidvalidity, max(uids, default=0), shown, facts)

    def _facts(self, imap: imaplib.IMAP4, folder: str, uidvalidity: int, messages: list[FetchedMessage]) -> list[Fact]:
        small = [m.uid for m in messages if m.size <= self.filter.max_body_bytes] if self.filter.body_chars else []
        bodies = {m.uid: m.literal for m in fetch_messages(imap, small, BODY_ITEMS)} if small else {}
        return [self._fact(folder, uidvalidity, m, bodies.get(m.uid)) for m in messages]

    def _fact(self, folder: str, uidvalidity: int, message: FetchedMessage, raw: bytes | None) -> Fact:
        header = parse_message(message.literal, headers_only=True)
        sender = header_value(header, "from")
        payload: dict[str, Any] = {
            "mailbox": folder,
            "uid": message.uid,
            "uidvalidity": uidvalidity,
            "message_id": header_value(header, "message-id"),
            "from": sender,
            "sender": parseaddr(sender)[1].lower() if sender else None,
            "to": header_value(header, "to"),
            "cc": header_value(header, "cc"),
            "subject": header_value(header, "subject"),
            "date": header_value(header, "date"),
            "internaldate": message.internaldate.isoformat() if message.internaldate else None,
            "size": message.size,
        }
        payload.update(_body(raw, self.filter.body_chars))
        return Fact("email.received", payload, f"uid:{folder}:{uidvalidity}:{message.uid}")

    @contextlib.contextmanager
    def _session(self) -> Iterator[imaplib.IMAP4]:
        try:
            imap = self.connect(self.account)
        except (imaplib.IMAP4.error, OSError) as exc:
            raise SensorPollError(f"IMAP {self.account.host}:{self.account.port}: {_reason(exc)}") from None
        try:
            yield imap
        except MailServerError as exc:
            raise SensorPollError(str(exc)) from None
        except (imaplib.IMAP4.error, OSError) as exc:
            raise SensorPollError(f"IMAP {self.account.host}:{self.account.port}: {_reason(exc)}") from None
        finally:
            with contextlib.suppress(Exception):
                imap.logout()


@dataclass(frozen=True, slots=True)
class _State:
    uidvalidity: int
    last_uid: int
    last_internaldate: datetime | None
    recent_ids: tuple[str, ...]

    @classmethod
    def of(cls, state: Mapping[str, Any]) -> _State:
        date = state.get("last_internaldate")
        return cls(
            int(state.get("uidvalidity", 0)),
            int(state.get("last_uid", 0)),
            datetime.fromisoformat(date) if isinstance(date, str) else None,
            tuple(str(i) for i in state.get("recent_ids", ())),
        )


def _next_state(
    old: _State, uidvalidity: int, last_uid: int, messages: list[FetchedMessage], facts: list[Fact]
) -> dict[str, Any]:
    dates = [m.internaldate for m in messages if m.internaldate is not None]
    newest = max([*dates, *([old.last_internaldate] if old.last_internaldate else [])], default=None)
    ids = [str(f.payload["message_id"]) for f in facts if f.payload.get("message_id")]
    return _state(uidvalidity, last_uid, newest, [*old.recent_ids, *ids][-RECENT_IDS:])


def _state(uidvalidity: int, last_uid: int, newest: datetime | None, recent_ids: list[str]) -> dict[str, Any]:
    return {
        "uidvalidity": uidvalidity,
        "last_uid": last_uid,
        "last_internaldate": newest.isoformat() if newest else None,
        "recent_ids": recent_ids,
    }


def _unseen(message: FetchedMessage, last: datetime | None, seen: set[str]) -> bool:
    if last is None:
        return True
    if message.internaldate is None or message.internaldate < last:
        return False
    message_id = header_value(parse_message(message.literal, headers_only=True), "message-id")
    return not message_id or message_id not in seen


def _body(raw: bytes | None, limit: int) -> dict[str, Any]:
    if raw is None or limit == 0:
        return {"body": None, "body_type": None, "body_truncated": raw is None and limit > 0}
    try:
        part = parse_message(raw).get_body(preferencelist=("plain", "html"))
        text = str(part.get_content()).replace("\r\n", "\n") if part is not None else ""
    except Exception:  # an undecodable body: the headers are still worth reporting
        return {"body": None, "body_type": None, "body_truncated": True}
    kind = part.get_content_subtype() if part is not None else None
    return {"body": text[:limit], "body_type": kind, "body_truncated": len(text) > limit}


def _reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text[:300]
