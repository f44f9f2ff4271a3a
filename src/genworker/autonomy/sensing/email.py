"""The email sensor: new messages of IMAP folders, by UID, with stdlib imaplib.

For each folder the cursor keeps its UIDVALIDITY and the last reported UID; each poll looks for
UIDs above it (at most `max_messages` per folder and poll, the rest next poll) and reports
`email.received` facts keyed by folder + UIDVALIDITY + UID. Folders are opened read-only, so
nothing is marked seen. When UIDVALIDITY changes (the folder was rebuilt, its UIDs mean nothing
now), an `email.mailbox_reset` fact is written and the messages that are new by INTERNALDATE (not
older than the newest one seen, minus the Message-IDs already reported) are reported once.

Credentials come from the worker's CHANNEL_CREDENTIALS.json `email` section (worker_imap_host,
worker_imap_port, worker_username or worker_address, worker_password).
"""

from __future__ import annotations

import contextlib
import imaplib
import re
import ssl
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from email.message import EmailMessage
from email.parser import BytesParser
from email.policy import default as default_policy
from email.utils import parseaddr
from typing import Any, Literal

from pydantic import SecretStr

from genworker.autonomy.sensing.base import Clock, Observation, PullSensor, utc_now
from genworker.autonomy.sensing.cursors import Cursor, CursorStore
from genworker.autonomy.sensing.errors import SensorConfigError, SensorPollError
from genworker.autonomy.sensing.facts import Fact, FactEmitter
from genworker.autonomy.sensing.filters import EmailFilter
from genworker.workspace.models.credentials import ChannelCredentials
from genworker.workspace.models.persona import SensorConfig

__all__ = ["EmailSensor", "ImapAccount", "open_imap"]

IMAP_TIMEOUT_S = 30.0
RECENT_IDS = 200  # Message-IDs kept in the cursor to recognise old mail after a UIDVALIDITY change
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_INTERNALDATE = re.compile(rb'INTERNALDATE "\s?(\d{1,2})-(\w{3})-(\d{4}) (\d\d):(\d\d):(\d\d) ([+-])(\d\d)(\d\d)"')
_UID = re.compile(rb"\bUID (\d+)")
_SIZE = re.compile(rb"\bRFC822\.SIZE (\d+)")
_START = re.compile(rb"^\d+ \(")
_HEADERS = "(UID INTERNALDATE RFC822.SIZE BODY.PEEK[HEADER])"

Security = Literal["ssl", "starttls", "plain"]


@dataclass(frozen=True, slots=True)
class ImapAccount:
    host: str
    port: int
    username: str
    password: SecretStr = field(repr=False)
    security: Security

    @classmethod
    def from_credentials(cls, credentials: ChannelCredentials | None, security: Security | None) -> ImapAccount:
        email = credentials.email if credentials is not None else None
        if email is None or not email.worker_imap_host:
            raise SensorConfigError("CHANNEL_CREDENTIALS.json has no email.worker_imap_host for this worker")
        if email.worker_password is None:
            raise SensorConfigError("CHANNEL_CREDENTIALS.json has no email.worker_password for this worker")
        username = email.worker_username.get_secret_value() if email.worker_username else email.worker_address
        port = email.worker_imap_port
        chosen: Security = security or ("ssl" if port == 993 else "starttls")
        return cls(email.worker_imap_host, port, username, email.worker_password, chosen)


def open_imap(account: ImapAccount, timeout: float = IMAP_TIMEOUT_S) -> imaplib.IMAP4:
    """A logged-in connection (TLS unless the account says plain)."""
    context = ssl.create_default_context()
    if account.security == "ssl":
        imap: imaplib.IMAP4 = imaplib.IMAP4_SSL(account.host, account.port, ssl_context=context, timeout=timeout)
    else:
        imap = imaplib.IMAP4(account.host, account.port, timeout=timeout)
        if account.security == "starttls":
            imap.starttls(context)
    try:
        imap.login(account.username, account.password.get_secret_value())
    except BaseException:
        with contextlib.suppress(Exception):
            imap.shutdown()
        raise
    return imap


@dataclass(frozen=True, slots=True)
class _Message:
    uid: int
    internaldate: datetime | None
    size: int
    literal: bytes  # the one literal asked for: the header, or the whole message


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
        uidvalidity = _select(imap, folder)
        all_uids = _search(imap, "ALL")
        if stored is None and self.filter.on_first_poll == "baseline":
            last = max(all_uids, default=0)
            newest = _fetch(imap, [last], "(UID INTERNALDATE)") if last else []
            return [], _state(uidvalidity, last, newest[0].internaldate if newest else None, [])
        old = _State.of(stored) if stored is not None else _State(uidvalidity, 0, None, ())
        if old.uidvalidity != uidvalidity:
            return self._after_reset(imap, folder, old, uidvalidity, all_uids, seq)
        uids = sorted(u for u in all_uids if u > old.last_uid)[: self.filter.max_messages]
        messages = _fetch(imap, uids, _HEADERS)
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
            candidates = _search(imap, "SINCE", f"{since.day}-{_MONTHS[since.month - 1]}-{since.year}")
        seen = set(old.recent_ids)
        fresh = [m for m in _fetch(imap, sorted(candidates), _HEADERS) if _unseen(m, old.last_internaldate, seen)]
        shown = fresh[-self.filter.max_messages :]
        facts = [reset]
        if len(shown) < len(fresh):
            payload = {"mailbox": folder, "total": len(fresh), "reported": len(shown)}
            facts.append(Fact("email.messages_truncated", payload, f"{seq}:truncated:{folder}:{uidvalidity}"))
        facts.extend(self._facts(imap, folder, uidvalidity, shown))
        return facts, _next_state(old, uidvalidity, max(uids, default=0), shown, facts)

    def _facts(self, imap: imaplib.IMAP4, folder: str, uidvalidity: int, messages: list[_Message]) -> list[Fact]:
        small = [m.uid for m in messages if m.size <= self.filter.max_body_bytes] if self.filter.body_chars else []
        bodies = {m.uid: m.literal for m in _fetch(imap, small, "(UID BODY.PEEK[])")} if small else {}
        return [self._fact(folder, uidvalidity, m, bodies.get(m.uid)) for m in messages]

    def _fact(self, folder: str, uidvalidity: int, message: _Message, raw: bytes | None) -> Fact:
        header = _parse(message.literal, headers_only=True)
        sender = _header(header, "from")
        payload: dict[str, Any] = {
            "mailbox": folder,
            "uid": message.uid,
            "uidvalidity": uidvalidity,
            "message_id": _header(header, "message-id"),
            "from": sender,
            "sender": parseaddr(sender)[1].lower() if sender else None,
            "to": _header(header, "to"),
            "cc": _header(header, "cc"),
            "subject": _header(header, "subject"),
            "date": _header(header, "date"),
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


def _select(imap: imaplib.IMAP4, folder: str) -> int:
    """Open `folder` read-only (nothing gets marked seen); its UIDVALIDITY."""
    typ, data = imap.select(f'"{folder}"', readonly=True)
    if typ != "OK":
        raise SensorPollError(f"mailbox {folder!r} cannot be opened: {_text(data)}")
    _, values = imap.response("UIDVALIDITY")
    if values and values[0] is not None:
        return int(values[0])
    typ, data = imap.status(f'"{folder}"', "(UIDVALIDITY)")
    found = re.search(rb"UIDVALIDITY (\d+)", data[0] if data and isinstance(data[0], bytes) else b"")
    if typ != "OK" or found is None:
        raise SensorPollError(f"the server reports no UIDVALIDITY for {folder!r}")
    return int(found.group(1))


def _next_state(
    old: _State, uidvalidity: int, last_uid: int, messages: list[_Message], facts: list[Fact]
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


def _unseen(message: _Message, last: datetime | None, seen: set[str]) -> bool:
    if last is None:
        return True
    if message.internaldate is None or message.internaldate < last:
        return False
    message_id = _header(_parse(message.literal, headers_only=True), "message-id")
    return not message_id or message_id not in seen


def _search(imap: imaplib.IMAP4, *criteria: str) -> list[int]:
    typ, data = imap.uid("SEARCH", *criteria)
    if typ != "OK":
        raise SensorPollError(f"UID SEARCH {' '.join(criteria)} failed: {_text(data)}")
    return [int(n) for chunk in data if isinstance(chunk, bytes) for n in chunk.split()]


def _fetch(imap: imaplib.IMAP4, uids: list[int], items: str) -> list[_Message]:
    """The fetched messages in UID order."""
    if not uids:
        return []
    typ, data = imap.uid("FETCH", ",".join(str(u) for u in uids), items)
    if typ != "OK":
        raise SensorPollError(f"UID FETCH failed: {_text(data)}")
    found: dict[int, _Message] = {}
    for text, literal in _responses(data):
        uid = _UID.search(text)
        if uid is None:
            continue
        size = _SIZE.search(text)
        message = _Message(int(uid.group(1)), _internaldate(text), int(size.group(1)) if size else 0, literal)
        found[message.uid] = message
    wanted = set(uids)
    return [found[u] for u in sorted(found) if u in wanted]


def _responses(data: list[Any]) -> Iterator[tuple[bytes, bytes]]:
    """(attribute text, literal) per FETCH response from imaplib's flat list of parts."""
    text, literal = b"", b""
    started = False
    for part in data:
        head = part[0] if isinstance(part, tuple) else part
        if not isinstance(head, bytes):
            continue
        if _START.match(head):
            if started:
                yield text, literal
            text, literal, started = b"", b"", True
        text += head
        if isinstance(part, tuple) and isinstance(part[1], bytes):
            literal = part[1]
    if started:
        yield text, literal


def _internaldate(text: bytes) -> datetime | None:
    found = _INTERNALDATE.search(text)
    if found is None:
        return None
    day, month, year, hh, mm, ss, sign, oh, om = (g.decode("ascii") for g in found.groups())
    if month not in _MONTHS:
        return None
    offset = timedelta(hours=int(oh), minutes=int(om)) * (-1 if sign == "-" else 1)
    return datetime(int(year), _MONTHS.index(month) + 1, int(day), int(hh), int(mm), int(ss), tzinfo=timezone(offset))


def _parse(raw: bytes, *, headers_only: bool = False) -> EmailMessage:
    message = BytesParser(policy=default_policy).parsebytes(raw, headersonly=headers_only)
    assert isinstance(message, EmailMessage)
    return message


def _header(message: EmailMessage, name: str) -> str | None:
    try:
        value = message.get(name)
    except Exception:  # a malformed header must not lose the message
        return None
    return None if value is None else str(value).strip()


def _body(raw: bytes | None, limit: int) -> dict[str, Any]:
    if raw is None or limit == 0:
        return {"body": None, "body_type": None, "body_truncated": raw is None and limit > 0}
    try:
        part = _parse(raw).get_body(preferencelist=("plain", "html"))
        text = str(part.get_content()).replace("\r\n", "\n") if part is not None else ""
    except Exception:  # an undecodable body: the headers are still worth reporting
        return {"body": None, "body_type": None, "body_truncated": True}
    kind = part.get_content_subtype() if part is not None else None
    return {"body": text[:limit], "body_type": kind, "body_truncated": len(text) > limit}


def _reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text[:300]


def _text(data: Any) -> str:
    parts = data if isinstance(data, list) else [data]
    return " ".join(p.decode("utf-8", "replace") if isinstance(p, bytes) else str(p) for p in parts)[:300]
