"""email_list_folders and email_search: read the worker's own mailbox over IMAP.

The account is the email sensor's and the email channel's: CHANNEL_CREDENTIALS.json `email`
(worker_imap_host, worker_imap_port, worker_username or worker_address, worker_password); TLS as the
email sensor's `filter.security` or the email channel's `features.imap_security` says, else SSL on
port 993 and STARTTLS elsewhere. Folders are opened read-only: nothing is marked seen. Both tools
are `read` (risk low). Blocking IMAP runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import imaplib
import re
from collections.abc import Callable
from datetime import date
from typing import Any

from genworker.mail.errors import MailConfigError, MailServerError
from genworker.mail.imap import (
    BODY_ITEMS,
    HEADER_ITEMS,
    ImapAccount,
    Security,
    fetch_messages,
    header_value,
    imap_date,
    open_imap,
    parse_message,
    search_uids,
    select_folder,
)
from genworker.tools.base import Effect, RiskLevel, ToolResult
from genworker.tools.context import ToolContext
from genworker.tools.tool import FunctionTool, function_tool
from genworker.workspace.snapshot import Worker

__all__ = ["MAX_RESULTS", "MailboxError", "MailboxSlot", "account_of", "mailbox_tools"]

MAX_RESULTS = 50
MAX_BODY_BYTES = 1_048_576  # larger messages are listed without a snippet
SNIPPET_CHARS = 300
_LIST = re.compile(rb'^\((?P<flags>[^)]*)\) (?P<delim>"(?:[^"\\]|\\.)*"|NIL) (?P<name>.+)$')

Connect = Callable[[ImapAccount], imaplib.IMAP4]


class MailboxError(ValueError):
    """The mailbox cannot be read or the arguments are wrong; the message is fed back to the model."""


class MailboxSlot:
    """How the tools find the worker; the composition fills it."""

    def __init__(self) -> None:
        self.worker: Callable[[str, str], Worker | None] | None = None
        self.connect: Connect = open_imap


def account_of(worker: Worker) -> ImapAccount:
    """The worker's IMAP account, with the TLS mode its email sensor or email channel sets."""
    security: Security | None = None
    for config in worker.persona.sensor_configs:
        wanted = config.filter.get("security") if config.source_type == "email" else None
        if wanted in ("ssl", "starttls", "plain"):
            security = wanted
            break
    if security is None:
        for channel in worker.persona.channels:
            wanted = channel.features.get("imap_security") if channel.type == "email" else None
            if wanted in ("ssl", "starttls", "plain"):
                security = wanted
                break
    try:
        return ImapAccount.from_credentials(worker.credentials, security)
    except MailConfigError as exc:
        raise MailboxError(f"this worker has no mailbox to read: {exc}") from None


def mailbox_tools(slot: MailboxSlot) -> list[FunctionTool]:
    def account(ctx: ToolContext) -> ImapAccount:
        worker = slot.worker(ctx.scope.tenant_id, ctx.scope.worker_id) if slot.worker is not None else None
        if worker is None:
            raise MailboxError(f"worker {ctx.scope.tenant_id}/{ctx.scope.worker_id} is not loaded")
        return account_of(worker)

    @function_tool(effect=Effect.READ, risk_level=RiskLevel.LOW)
    async def email_list_folders(ctx: ToolContext) -> ToolResult:
        """List the folders of your mailbox (their real names, to pass to email_search)."""
        folders = await asyncio.to_thread(_session, slot.connect, account(ctx), _list_folders)
        text = "\n".join(f["name"] for f in folders) or "(no folders)"
        return ToolResult(text, data={"folders": folders})

    @function_tool(effect=Effect.READ, risk_level=RiskLevel.LOW)
    async def email_search(
        ctx: ToolContext,
        query: str = "",
        folder: str = "INBOX",
        sender: str | None = None,
        since: str | None = None,
        limit: int = 10,
    ) -> ToolResult:
        """Search your mailbox; the newest matching messages first, with sender, subject, date and the
        start of the text. Nothing is marked read.

        Args:
            query: Words to find in the headers and text (empty: every message).
            folder: The folder to search; email_list_folders gives the names.
            sender: Only mail whose From contains this (an address or a name).
            since: Only mail received on or after this day, YYYY-MM-DD.
            limit: How many messages at most (1-50).
        """
        criteria = _criteria(query, sender, since)
        if not 1 <= limit <= MAX_RESULTS:
            raise MailboxError(f"limit={limit} must be between 1 and {MAX_RESULTS}")
        name = _folder(folder)
        found = await asyncio.to_thread(
            _session, slot.connect, account(ctx), lambda imap: _search_folder(imap, name, criteria, limit)
        )
        lines = [f"{m['date'] or '?'} | {m['from'] or '?'} | {m['subject'] or '(no subject)'} [uid {m['uid']}]"
                 for m in found]  # fmt: skip
        text = "\n".join(lines) if lines else f"no messages in {name} match"
        return ToolResult(text, data={"folder": name, "messages": found})

    return [email_list_folders, email_search]


def _session(connect: Connect, account: ImapAccount, work: Callable[[imaplib.IMAP4], Any]) -> Any:
    where = f"IMAP {account.host}:{account.port}"
    try:
        imap = connect(account)
    except (imaplib.IMAP4.error, OSError) as exc:
        raise MailboxError(f"{where}: {str(exc)[:300] or type(exc).__name__}") from None
    try:
        return work(imap)
    except MailServerError as exc:
        raise MailboxError(f"{where}: {exc}") from None
    except (imaplib.IMAP4.error, OSError) as exc:
        raise MailboxError(f"{where}: {str(exc)[:300] or type(exc).__name__}") from None
    finally:
        with contextlib.suppress(Exception):
            imap.logout()


def _list_folders(imap: imaplib.IMAP4) -> list[dict[str, Any]]:
    typ, data = imap.list()
    if typ != "OK":
        raise MailboxError(f"LIST failed: {data!r}"[:300])
    folders = []
    for part in data:
        line = part[0] + b" " + _quote(part[1]) if isinstance(part, tuple) else part
        if not isinstance(line, bytes):
            continue
        found = _LIST.match(line)
        if found is None:
            continue
        flags = found.group("flags").decode("ascii", "replace").split()
        name = _unquote(found.group("name")).decode("utf-8", "replace")
        if "\\Noselect" not in flags and "\\NonExistent" not in flags:
            folders.append({"name": name, "flags": flags})
    return sorted(folders, key=lambda f: (f["name"] != "INBOX", f["name"]))


def _quote(literal: bytes) -> bytes:
    return b'"' + literal.replace(b"\\", b"\\\\").replace(b'"', b'\\"') + b'"'


def _unquote(raw: bytes) -> bytes:
    raw = raw.strip()
    if len(raw) >= 2 and raw[:1] == b'"' and raw[-1:] == b'"':
        return re.sub(rb"\\(.)", rb"\1", raw[1:-1])
    return raw


def _folder(folder: str) -> str:
    name = folder.strip()
    if not name or not name.isascii() or any(c in name for c in '\r\n"\\') or len(name) > 200:
        raise MailboxError(
            f"folder {folder!r}: use a name email_list_folders gives (ASCII, no quotes, backslashes or newlines)"
        )
    return name


def _criteria(query: str, sender: str | None, since: str | None) -> list[str]:
    criteria: list[str] = []
    if query.strip():
        criteria += ["TEXT", _astring(query.strip(), "query")]
    if sender and sender.strip():
        criteria += ["FROM", _astring(sender.strip(), "sender")]
    if since:
        try:
            day = date.fromisoformat(since.strip())
        except ValueError:
            raise MailboxError(f"since={since!r} must be a day as YYYY-MM-DD") from None
        criteria += ["SINCE", imap_date(day)]
    return criteria or ["ALL"]


def _astring(value: str, name: str) -> str:
    if len(value) > 200:
        raise MailboxError(f"{name} must be at most 200 characters")
    if not value.isascii() or any(c in value for c in "\r\n"):
        raise MailboxError(f"{name} must be ASCII text on one line (the IMAP search this server gets)")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _search_folder(imap: imaplib.IMAP4, folder: str, criteria: list[str], limit: int) -> list[dict[str, Any]]:
    select_folder(imap, folder)
    uids = sorted(search_uids(imap, *criteria), reverse=True)[:limit]
    messages = fetch_messages(imap, uids, HEADER_ITEMS)
    small = [m.uid for m in messages if m.size <= MAX_BODY_BYTES]
    bodies = {m.uid: m.literal for m in fetch_messages(imap, small, BODY_ITEMS)} if small else {}
    found = []
    for message in sorted(messages, key=lambda m: m.uid, reverse=True):
        header = parse_message(message.literal, headers_only=True)
        found.append(
            {
                "uid": message.uid,
                "folder": folder,
                "message_id": header_value(header, "message-id"),
                "from": header_value(header, "from"),
                "to": header_value(header, "to"),
                "cc": header_value(header, "cc"),
                "subject": header_value(header, "subject"),
                "date": header_value(header, "date"),
                "received_at": message.internaldate.isoformat() if message.internaldate else None,
                "snippet": _snippet(bodies.get(message.uid)),
            }
        )
    return found


def _snippet(raw: bytes | None) -> str | None:
    if raw is None:
        return None
    try:
        part = parse_message(raw).get_body(preferencelist=("plain", "html"))
        text = str(part.get_content()) if part is not None else ""
    except Exception:  # an undecodable body: the headers are still worth listing
        return None
    flat = " ".join(text.split())
    return flat[:SNIPPET_CHARS] + ("…" if len(flat) > SNIPPET_CHARS else "")
