"""The email channel: conversation over IMAP (polled by UID) and SMTP, threaded by Message-ID.

`EmailPoller` reads new mail of the folders in the binding's `features.folders` (default
INBOX), opened read-only, and hands each message to the caller as a `ChannelMessage`; the
cursor (UIDVALIDITY + last handled UID per folder) is persisted under the worker's
`runtime/channels/` after every handled message, so a restart neither loses nor repeats
mail (a message whose handler failed is offered again next poll). The first poll of a
folder, and one whose UIDVALIDITY changed, starts from the current newest message: old mail
is not answered. Mail the worker sent itself and auto-replies (RFC 3834) are skipped; when
the channel lists `chat_ids`, only mail addressed to one of them is conversation.

`EmailClient` sends over SMTP. A reply keeps the thread: `In-Reply-To` is the received
Message-ID and `References` its References plus that id. The IMAP code (login, select, UID
search/fetch, parsing) is `genworker.mail.imap`, shared with the email sensor and the mailbox tools.
"""

from __future__ import annotations

import asyncio
import contextlib
import imaplib
import json
import logging
import smtplib
import ssl
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import getaddresses, make_msgid, parseaddr, parsedate_to_datetime
from functools import partial
from pathlib import Path
from typing import Any, Literal

from genworker.channels.base import Attachment, ChannelMessage
from genworker.channels.outbound.http import DeliveryError, RetryPolicy
from genworker.channels.outbound.platform import Sent
from genworker.channels.outbound.text import chars
from genworker.channels.registry import ChannelBinding, ChannelRegistry
from genworker.delivery.messages import OutboundMessage, Target
from genworker.fsutil import file_lock, write_atomic
from genworker.mail.errors import MailConfigError, MailServerError
from genworker.mail.imap import (
    BODY_ITEMS,
    ImapAccount,
    fetch_messages,
    header_value,
    open_imap,
    parse_message,
    search_uids,
    select_folder,
)
from genworker.workspace.models.credentials import ChannelCredentials, EmailCredentials

__all__ = ["CURSOR_SCHEMA_VERSION", "EmailClient", "EmailError", "EmailPoller", "EmailPolling", "Security"]

log = logging.getLogger("genworker.channels")

CURSOR_SCHEMA_VERSION = 1
MAX_MESSAGES = 50  # per folder and poll; the rest come next poll
MAX_TEXT = 20_000
POLL_INTERVAL_S = 60.0  # features.poll_interval (seconds) overrides it per channel
SMTP_TIMEOUT_S = 30.0
Security = Literal["ssl", "starttls", "plain"]
Handler = Callable[[ChannelMessage], Awaitable[object]]
Accept = Callable[[ChannelBinding, ChannelMessage], Awaitable[bool]]


class EmailError(Exception):
    """The mailbox cannot be read (configuration or server); the message says which."""


# -- sending ------------------------------------------------------------------------


class EmailClient:
    platform = "email"
    limit = 1_000_000
    measure = staticmethod(chars)
    can_update = False

    def __init__(
        self, credentials: EmailCredentials, features: Mapping[str, Any], policy: RetryPolicy | None = None
    ) -> None:
        if not credentials.worker_smtp_host:
            raise DeliveryError("CHANNEL_CREDENTIALS.json has no email.worker_smtp_host for this worker")
        self._credentials = credentials
        port = credentials.worker_smtp_port
        wanted = features.get("smtp_security")
        self.security: Security = (
            wanted if wanted in ("ssl", "starttls", "plain") else ("ssl" if port == 465 else "starttls")
        )
        self._policy = policy or RetryPolicy(max_attempts=3)

    def compose(self, target: Target, outbound: OutboundMessage) -> EmailMessage:
        creds = self._credentials
        context = target.context
        message = EmailMessage()
        message["From"] = creds.worker_address
        message["To"] = target.chat_id
        if context.get("cc"):
            message["Cc"] = context["cc"]
        subject = context.get("subject") or _first_line(outbound.text)
        message["Subject"] = (
            subject if subject.lower().startswith("re:") or "message_id" not in context else f"Re: {subject}"
        )
        domain = creds.worker_address.rpartition("@")[2] or None
        message["Message-ID"] = make_msgid(domain=domain)
        parent = context.get("message_id")
        if parent:
            message["In-Reply-To"] = parent
            message["References"] = " ".join([*context.get("references", "").split(), parent])
        message["Auto-Submitted"] = "auto-generated" if "message_id" not in context else "auto-replied"
        message.set_content(outbound.text)
        for name, text in outbound.files:
            message.add_attachment(text, subtype="markdown" if name.endswith(".md") else "plain", filename=name)
        return message

    async def send(self, target: Target, outbound: OutboundMessage) -> Sent:
        message = self.compose(target, outbound)
        for attempt in range(1, self._policy.max_attempts + 1):
            try:
                await asyncio.to_thread(self._submit, message)
                return Sent(str(message["Message-ID"]), attempt)
            except smtplib.SMTPResponseException as exc:
                transient = 400 <= exc.smtp_code < 500
                if not transient or attempt == self._policy.max_attempts:
                    raise DeliveryError(f"smtp: {exc.smtp_code} {_text(exc.smtp_error)}", attempts=attempt) from None
            except (smtplib.SMTPException, OSError) as exc:
                if attempt == self._policy.max_attempts:
                    raise DeliveryError(f"smtp: {type(exc).__name__}: {exc}"[:300], attempts=attempt) from None
            await asyncio.sleep(self._policy.backoff(attempt))
        raise AssertionError("unreachable")

    async def update(self, target: Target, message_id: str, outbound: OutboundMessage) -> Sent:
        raise DeliveryError("email cannot edit a sent message")

    async def check(self, imap_security: Security | None = None) -> dict[str, str]:
        """Log in as a send does (SMTP) and as the poller does (IMAP, when the credentials name a
        server; the inbox opened read-only), sending nothing: the console's "Test connection". Who
        answered, or DeliveryError whose `status` says how it failed: None unreachable, 503 a
        transient (4xx) answer, 401 credentials refused, 400 another refusal."""
        return await asyncio.to_thread(self._check, imap_security)

    def _check(self, imap_security: Security | None) -> dict[str, str]:
        creds = self._credentials
        identity = {"address": creds.worker_address}
        try:
            with self._session():
                identity["smtp"] = f"{creds.worker_smtp_host}:{creds.worker_smtp_port} ({self.security})"
            if creds.worker_imap_host:
                account = ImapAccount.from_credentials(ChannelCredentials(email=creds), imap_security)
                imap = open_imap(account, timeout=SMTP_TIMEOUT_S)
                try:
                    select_folder(imap, "INBOX")
                finally:
                    with contextlib.suppress(Exception):
                        imap.logout()
                identity["imap"] = f"{account.host}:{account.port} ({account.security})"
        except smtplib.SMTPAuthenticationError as exc:
            raise DeliveryError(f"smtp: {exc.smtp_code} {_text(exc.smtp_error)}", status=401) from None
        except smtplib.SMTPResponseException as exc:
            status = 503 if 400 <= exc.smtp_code < 500 else 400
            raise DeliveryError(f"smtp: {exc.smtp_code} {_text(exc.smtp_error)}", status=status) from None
        except imaplib.IMAP4.error as exc:  # the login (or the inbox) refused
            raise DeliveryError(f"imap: {_text(exc.args[0] if exc.args else str(exc))}", status=401) from None
        except (MailConfigError, MailServerError) as exc:
            raise DeliveryError(str(exc), status=400) from None
        except (smtplib.SMTPException, OSError) as exc:
            raise DeliveryError(f"{type(exc).__name__}: {exc}"[:300]) from None
        return identity

    def _submit(self, message: EmailMessage) -> None:
        with self._session() as smtp:
            smtp.send_message(message)

    @contextlib.contextmanager
    def _session(self) -> Iterator[smtplib.SMTP]:
        """A connection to the worker's SMTP server, logged in when it offers AUTH."""
        creds = self._credentials
        host, port = str(creds.worker_smtp_host), creds.worker_smtp_port
        context = ssl.create_default_context()
        smtp: smtplib.SMTP
        if self.security == "ssl":
            smtp = smtplib.SMTP_SSL(host, port, timeout=SMTP_TIMEOUT_S, context=context)
        else:
            smtp = smtplib.SMTP(host, port, timeout=SMTP_TIMEOUT_S)
        with smtp:
            if self.security == "starttls":
                smtp.starttls(context=context)
            smtp.ehlo_or_helo_if_needed()
            if creds.worker_password is not None and smtp.has_extn("auth"):
                user = creds.worker_username.get_secret_value() if creds.worker_username else creds.worker_address
                smtp.login(user, creds.worker_password.get_secret_value())
            yield smtp


# -- receiving ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Raw:
    folder: str
    uidvalidity: int
    uid: int
    raw: bytes


class EmailPoller:
    def __init__(
        self,
        workspace_root: Path,
        binding: ChannelBinding,
        *,
        connect: Callable[[ImapAccount], imaplib.IMAP4] = open_imap,
        max_messages: int = MAX_MESSAGES,
    ) -> None:
        if binding.platform != "email" or not isinstance(binding.credentials, EmailCredentials):
            raise EmailError(f"{binding.adapter_id}: CHANNEL_CREDENTIALS.json has no email section")
        self.binding = binding
        self.credentials: EmailCredentials = binding.credentials
        features = binding.channel.features
        security = features.get("imap_security")
        try:
            self.account = ImapAccount.from_credentials(
                ChannelCredentials(email=binding.credentials),
                security if security in ("ssl", "starttls", "plain") else None,
            )
        except MailConfigError as exc:
            raise EmailError(f"{binding.adapter_id}: {exc}") from None
        folders = features.get("folders") or ["INBOX"]
        if not isinstance(folders, (list, tuple)) or not all(isinstance(f, str) and f for f in folders):
            raise EmailError(f"{binding.adapter_id}: features.folders must be a list of folder names")
        self.folders: tuple[str, ...] = tuple(folders)
        self.connect = connect
        self.max_messages = max_messages
        worker = workspace_root / "tenants" / binding.tenant_id / "workers" / binding.worker_id
        self.cursor_path = worker / "runtime" / "channels" / f"{binding.key}.email-cursor.json"

    async def poll(self, handle: Handler) -> int:
        """Hand new mail to `handle`, oldest first; the number of messages handled."""
        cursor = await asyncio.to_thread(self._read_cursor)
        try:
            found, baselines = await asyncio.to_thread(self._collect, cursor)
        except (MailServerError, imaplib.IMAP4.error, OSError) as exc:
            raise EmailError(
                f"{self.binding.adapter_id}: IMAP {self.account.host}:{self.account.port}: {exc}"
            ) from None
        if baselines:
            await asyncio.to_thread(self._advance, baselines)
        handled = 0
        for raw in found:
            message = self._message(raw)
            if message is not None:
                await handle(message)
                handled += 1
            await asyncio.to_thread(self._advance, {raw.folder: (raw.uidvalidity, raw.uid)})
        return handled

    # cursor: {"schema_version": 1, "folders": {name: {"uidvalidity": int, "last_uid": int}}}

    def _read_cursor(self) -> dict[str, tuple[int, int]]:
        if not self.cursor_path.is_file():
            return {}
        try:
            data = json.loads(self.cursor_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise EmailError(f"{self.cursor_path}: unreadable cursor: {exc}") from None
        if not isinstance(data, dict) or data.get("schema_version") != CURSOR_SCHEMA_VERSION:
            version = data.get("schema_version") if isinstance(data, dict) else None
            raise EmailError(f"{self.cursor_path}: schema_version {version!r} is not {CURSOR_SCHEMA_VERSION}")
        folders = data.get("folders") or {}
        return {
            name: (int(state["uidvalidity"]), int(state["last_uid"]))
            for name, state in folders.items()
            if isinstance(state, dict) and "uidvalidity" in state and "last_uid" in state
        }

    def _advance(self, positions: Mapping[str, tuple[int, int]]) -> None:
        """Merge `positions` into the stored cursor under a lock (several pollers may share it)."""
        with file_lock(self.cursor_path.with_suffix(".lock")):
            stored = self._read_cursor()
            for folder, (uidvalidity, uid) in positions.items():
                old = stored.get(folder)
                if old is None or old[0] != uidvalidity or old[1] < uid:
                    stored[folder] = (uidvalidity, uid)
            body = {
                "schema_version": CURSOR_SCHEMA_VERSION,
                "folders": {f: {"uidvalidity": v, "last_uid": u} for f, (v, u) in sorted(stored.items())},
            }
            write_atomic(self.cursor_path, json.dumps(body, indent=2).encode("utf-8"))

    def _collect(self, cursor: Mapping[str, tuple[int, int]]) -> tuple[list[_Raw], dict[str, tuple[int, int]]]:
        """(new messages in UID order, folders to baseline at their newest UID)."""
        found: list[_Raw] = []
        baselines: dict[str, tuple[int, int]] = {}
        imap = self.connect(self.account)
        try:
            for folder in self.folders:
                uidvalidity = select_folder(imap, folder)
                uids = search_uids(imap, "ALL")
                stored = cursor.get(folder)
                if stored is None or stored[0] != uidvalidity:
                    if stored is not None:
                        log.warning(
                            "[Channels] %s: %s was rebuilt (UIDVALIDITY changed)", self.binding.adapter_id, folder
                        )
                    baselines[folder] = (uidvalidity, max(uids, default=0))
                    continue
                fresh = sorted(u for u in uids if u > stored[1])[: self.max_messages]
                for message in fetch_messages(imap, fresh, BODY_ITEMS):
                    found.append(_Raw(folder, uidvalidity, message.uid, message.literal))
        finally:
            with contextlib.suppress(imaplib.IMAP4.error, OSError):
                imap.logout()
        return found, baselines

    def _message(self, raw: _Raw) -> ChannelMessage | None:
        """The conversation message in `raw`, or None for mail that is not conversation."""
        parsed = parse_message(raw.raw)
        name, sender = parseaddr(header_value(parsed, "from") or "")
        sender = sender.lower()
        auto = (header_value(parsed, "auto-submitted") or "no").lower()
        if not sender or sender == self.credentials.worker_address.lower() or auto != "no":
            return None
        recipients = {a.lower() for _, a in getaddresses([header_value(parsed, h) or "" for h in ("to", "cc")])}
        routed = {c.lower() for c in self.binding.channel.chat_ids}
        if routed and not routed & recipients:
            return None
        message_id = header_value(parsed, "message-id")
        references = (header_value(parsed, "references") or "").split()
        in_reply_to = header_value(parsed, "in-reply-to")
        root = references[0] if references else in_reply_to or message_id
        subject = header_value(parsed, "subject") or ""
        context = {"subject": subject, "from": sender}
        if message_id:
            context["message_id"] = message_id
            context["references"] = " ".join(references or ([in_reply_to] if in_reply_to else []))
        return ChannelMessage(
            platform="email",
            adapter_id=self.binding.adapter_id,
            tenant_id=self.binding.tenant_id,
            worker_id=self.binding.worker_id,
            event_id=message_id or f"imap:{raw.folder}:{raw.uidvalidity}:{raw.uid}",
            chat_id=sender,
            chat_type="p2p",
            sender_id=sender,
            sender_name=name or None,
            text=_text_of(parsed, subject),
            received_at=_received_at(parsed),
            thread_id=root,
            attachments=_attachments(parsed, raw),
            reply_context=context,
        )


class EmailPolling:
    """Polls every email channel of the loaded workspace and hands its mail to `accept` (the
    channel ingress: dedupe, durable journal, processing). Bindings come from the registry on
    every round, so channels added or re-configured by a reload are picked up."""

    def __init__(self, workspace_root: Path, channels: ChannelRegistry, accept: Accept) -> None:
        self.root = workspace_root
        self.channels = channels
        self.accept = accept
        self.errors: dict[str, str] = {}  # adapter id -> the last poll's error
        self._pollers: dict[str, tuple[object, EmailPoller]] = {}
        self._due: dict[str, float] = {}

    def _poller(self, binding: ChannelBinding) -> EmailPoller:
        cached = self._pollers.get(binding.adapter_id)
        if cached is None or cached[0] is not binding.credentials:
            cached = (binding.credentials, EmailPoller(self.root, binding))
            self._pollers[binding.adapter_id] = cached
        return cached[1]

    async def poll_due(self, now: float) -> dict[str, int]:
        """Poll the email channels whose interval has passed; messages handed over per adapter."""
        handed: dict[str, int] = {}
        for binding in self.channels.all():
            if binding.platform != "email" or self._due.get(binding.adapter_id, 0.0) > now:
                continue
            interval = binding.channel.features.get("poll_interval", POLL_INTERVAL_S)
            self._due[binding.adapter_id] = now + (float(interval) if isinstance(interval, int | float) else 60.0)
            try:
                poller = self._poller(binding)
                handed[binding.adapter_id] = await poller.poll(partial(self.accept, binding))
                self.errors.pop(binding.adapter_id, None)
            except EmailError as exc:
                if self.errors.get(binding.adapter_id) != str(exc):
                    log.warning("[Channels] email polling of %s failed: %s", binding.adapter_id, exc)
                self.errors[binding.adapter_id] = str(exc)
        return handed

    async def run(self, stop: asyncio.Event, tick: float = 5.0) -> None:
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            try:
                await self.poll_due(loop.time())
            except Exception:  # one bad round must not end polling
                log.exception("[Channels] email polling round failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), tick)


def _text_of(message: EmailMessage, subject: str) -> str:
    try:
        part = message.get_body(preferencelist=("plain", "html"))
        body = str(part.get_content()).replace("\r\n", "\n").strip() if part is not None else ""
    except (LookupError, ValueError):  # an undecodable body: the subject still says something
        body = ""
    text = f"Subject: {subject}\n\n{body}" if subject else body
    return text[:MAX_TEXT]


def _received_at(message: EmailMessage) -> str:
    date = header_value(message, "date")
    try:
        when = parsedate_to_datetime(date) if date else None
    except (TypeError, ValueError):
        when = None
    if when is None or when.tzinfo is None:
        when = datetime.now(UTC)
    return when.astimezone(UTC).isoformat()


def _attachments(message: EmailMessage, raw: _Raw) -> tuple[Attachment, ...]:
    found = []
    for index, part in enumerate(message.iter_attachments()):
        payload = part.get_payload(decode=True)
        found.append(
            Attachment(
                kind="file",
                name=part.get_filename(),
                mime_type=part.get_content_type(),
                size=len(payload) if isinstance(payload, bytes) else None,
                ref=f"imap:{raw.folder}:{raw.uidvalidity}:{raw.uid}/{index}",
            )
        )
    return tuple(found)


def _first_line(text: str) -> str:
    line = next((s.strip() for s in text.splitlines() if s.strip()), "")
    return line[:78] or "(no subject)"


def _text(value: bytes | str) -> str:
    return (value.decode("utf-8", "replace") if isinstance(value, bytes) else value)[:200]
