"""IMAP with stdlib imaplib: the worker's account from CHANNEL_CREDENTIALS.json `email`
(worker_imap_host, worker_imap_port, worker_username or worker_address, worker_password), login
over SSL, STARTTLS or plain, folders opened read-only (nothing is marked seen), UID search and
fetch, and parsing of what was fetched.

The helpers are blocking: callers run them in a worker thread. A refused command raises
MailServerError naming it; connection failures stay `imaplib.IMAP4.error` / `OSError`.
"""

from __future__ import annotations

import contextlib
import imaplib
import re
import ssl
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from email.message import EmailMessage
from email.parser import BytesParser
from email.policy import default as default_policy
from typing import Any, Literal

from pydantic import SecretStr

from genworker.mail.errors import MailConfigError, MailServerError
from genworker.workspace.models.credentials import ChannelCredentials

__all__ = [
    "BODY_ITEMS",
    "HEADER_ITEMS",
    "IMAP_TIMEOUT_S",
    "FetchedMessage",
    "ImapAccount",
    "Security",
    "fetch_messages",
    "header_value",
    "imap_date",
    "open_imap",
    "parse_message",
    "search_uids",
    "select_folder",
]

IMAP_TIMEOUT_S = 30.0
HEADER_ITEMS = "(UID INTERNALDATE RFC822.SIZE BODY.PEEK[HEADER])"  # what a listing needs, without bodies
BODY_ITEMS = "(UID BODY.PEEK[])"  # the whole message
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_INTERNALDATE = re.compile(rb'INTERNALDATE "\s?(\d{1,2})-(\w{3})-(\d{4}) (\d\d):(\d\d):(\d\d) ([+-])(\d\d)(\d\d)"')
_UID = re.compile(rb"\bUID (\d+)")
_SIZE = re.compile(rb"\bRFC822\.SIZE (\d+)")
_START = re.compile(rb"^\d+ \(")

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
        """The worker's account; `security` None: SSL on port 993, STARTTLS elsewhere."""
        email = credentials.email if credentials is not None else None
        if email is None or not email.worker_imap_host:
            raise MailConfigError("CHANNEL_CREDENTIALS.json has no email.worker_imap_host for this worker")
        if email.worker_password is None:
            raise MailConfigError("CHANNEL_CREDENTIALS.json has no email.worker_password for this worker")
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
class FetchedMessage:
    uid: int
    internaldate: datetime | None
    size: int
    literal: bytes  # the one literal asked for: the header, or the whole message


def select_folder(imap: imaplib.IMAP4, folder: str) -> int:
    """Open `folder` read-only (nothing gets marked seen); its UIDVALIDITY."""
    typ, data = imap.select(f'"{folder}"', readonly=True)
    if typ != "OK":
        raise MailServerError(f"mailbox {folder!r} cannot be opened: {_text(data)}")
    _, values = imap.response("UIDVALIDITY")
    if values and values[0] is not None:
        return int(values[0])
    typ, data = imap.status(f'"{folder}"', "(UIDVALIDITY)")
    found = re.search(rb"UIDVALIDITY (\d+)", data[0] if data and isinstance(data[0], bytes) else b"")
    if typ != "OK" or found is None:
        raise MailServerError(f"the server reports no UIDVALIDITY for {folder!r}")
    return int(found.group(1))


def search_uids(imap: imaplib.IMAP4, *criteria: str) -> list[int]:
    typ, data = imap.uid("SEARCH", *criteria)
    if typ != "OK":
        raise MailServerError(f"UID SEARCH {' '.join(criteria)} failed: {_text(data)}")
    return [int(n) for chunk in data if isinstance(chunk, bytes) for n in chunk.split()]


def fetch_messages(imap: imaplib.IMAP4, uids: list[int], items: str) -> list[FetchedMessage]:
    """The fetched messages in UID order."""
    if not uids:
        return []
    typ, data = imap.uid("FETCH", ",".join(str(u) for u in uids), items)
    if typ != "OK":
        raise MailServerError(f"UID FETCH failed: {_text(data)}")
    found: dict[int, FetchedMessage] = {}
    for text, literal in _responses(data):
        uid = _UID.search(text)
        if uid is None:
            continue
        size = _SIZE.search(text)
        message = FetchedMessage(int(uid.group(1)), _internaldate(text), int(size.group(1)) if size else 0, literal)
        found[message.uid] = message
    wanted = set(uids)
    return [found[u] for u in sorted(found) if u in wanted]


def imap_date(day: date) -> str:
    """`day` as IMAP SEARCH dates are written (SINCE 4-Jul-2026), whatever the locale."""
    return f"{day.day}-{_MONTHS[day.month - 1]}-{day.year}"


def parse_message(raw: bytes, *, headers_only: bool = False) -> EmailMessage:
    message = BytesParser(policy=default_policy).parsebytes(raw, headersonly=headers_only)
    assert isinstance(message, EmailMessage)
    return message


def header_value(message: EmailMessage, name: str) -> str | None:
    """The header's value, stripped; None when absent or malformed."""
    try:
        value = message.get(name)
    except Exception:  # a malformed header must not lose the message
        return None
    return None if value is None else str(value).strip()


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


def _text(data: Any) -> str:
    parts = data if isinstance(data, list) else [data]
    return " ".join(p.decode("utf-8", "replace") if isinstance(p, bytes) else str(p) for p in parts)[:300]
