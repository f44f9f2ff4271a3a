"""Local mail servers for tests: a real IMAP server (pymap's in-memory backend, in a child process)
and a real SMTP server (aiosmtpd, with AUTH), both on loopback ports, spoken to by the stdlib
clients the runtime uses. pymap and aiosmtpd are dev dependencies; import this module from tests.

aiosmtpd warns in its server thread on every AUTH (its own deprecated `Session.login_data`) and that
AUTH is offered without TLS (wanted here, on loopback): tests filter `SMTP_WARNINGS`.
"""

from __future__ import annotations

import imaplib
import select
import socket
import subprocess
import sys
import textwrap
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email import message_from_bytes
from email.message import Message
from email.policy import default as default_policy
from types import TracebackType
from typing import Any

__all__ = ["SMTP_WARNINGS", "ImapServer", "Sent", "SmtpServer"]

SMTP_WARNINGS = (
    "ignore:Session.login_data is deprecated:DeprecationWarning",
    "ignore:Requiring AUTH while not requiring TLS:UserWarning",
)

_PYMAP = textwrap.dedent(
    """
    import sys
    import pymap.main

    def ready() -> None:
        print("READY", flush=True)

    pymap.main.notify_ready = ready
    sys.argv = ["pymap", "--host", "127.0.0.1", "--port", sys.argv[1], "dict", "--demo-data",
                "--demo-user", sys.argv[2], "--demo-password", sys.argv[3]]
    pymap.main.main()
    """
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ImapServer:
    """pymap serving one user's mailbox (INBOX plus pymap's demo folders) on 127.0.0.1:`port`."""

    def __init__(self, user: str, password: str) -> None:
        self.user, self.password = user, password
        self.port = free_port()
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> ImapServer:
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _PYMAP, str(self.port), self.user, self.password],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            encoding="utf-8",
        )
        assert self._proc.stdout is not None
        readable, _, _ = select.select([self._proc.stdout], [], [], 30)
        if (self._proc.stdout.readline() if readable else "").strip() != "READY":
            self._proc.kill()
            raise RuntimeError(f"pymap did not start: {self._proc.communicate(timeout=10)[1][-2000:]}")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is None:
            return
        self._proc.terminate()
        try:
            self._proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.communicate()

    def _connect(self) -> imaplib.IMAP4:
        imap = imaplib.IMAP4("127.0.0.1", self.port, timeout=10)
        imap.login(self.user, self.password)
        return imap

    def deliver(
        self,
        subject: str,
        sender: str = "Bob <bob@partner.example>",
        *,
        mailbox: str = "INBOX",
        body: str = "Hello.",
        message_id: str | None = None,
        when: datetime | None = None,
    ) -> str:
        """Put a message into `mailbox` the way an MTA would (IMAP APPEND); its Message-ID."""
        mid = message_id or f"<{abs(hash((subject, sender, mailbox)))}@partner.example>"
        raw = (
            f"From: {sender}\r\nTo: {self.user}\r\nSubject: {subject}\r\nMessage-ID: {mid}\r\n"
            "Date: Mon, 05 Jan 2026 12:00:00 +0100\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n"
            f"{body}\r\n"
        ).encode()
        imap = self._connect()
        try:
            typ, data = imap.append(mailbox, None, when or datetime.now(UTC), raw)
            if typ != "OK":
                raise RuntimeError(f"APPEND to {mailbox} failed: {data!r}")
        finally:
            imap.logout()
        return mid

    def create(self, mailbox: str) -> None:
        imap = self._connect()
        try:
            imap.create(mailbox)  # NO when it exists already: fine
        finally:
            imap.logout()


@dataclass(frozen=True)
class Sent:
    sender: str
    recipients: tuple[str, ...]  # the envelope's: To and Cc (and Bcc)
    message: Message


@dataclass
class SmtpServer:
    """aiosmtpd accepting mail from `user` / `password` (AUTH LOGIN / PLAIN, no TLS) on 127.0.0.1:`port`;
    `refuse` answers every DATA with that reply (e.g. "451 try later") while set."""

    user: str
    password: str
    port: int = field(default_factory=free_port)
    sent: list[Sent] = field(default_factory=list)
    logins: list[str] = field(default_factory=list)
    refuse: str | None = None
    _changed: threading.Condition = field(default_factory=threading.Condition)
    _controller: Any = None

    def __enter__(self) -> SmtpServer:
        from aiosmtpd.controller import Controller

        self._controller = Controller(
            self,
            hostname="127.0.0.1",
            port=self.port,
            authenticator=self.authenticate,
            auth_required=True,
            auth_require_tls=False,
        )
        self._controller.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._controller.stop()

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        if self.refuse is not None:
            return self.refuse
        message = message_from_bytes(envelope.content, policy=default_policy)
        with self._changed:
            self.sent.append(Sent(envelope.mail_from, tuple(envelope.rcpt_tos), message))
            self._changed.notify_all()
        return "250 OK"

    def authenticate(self, server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> Any:
        from aiosmtpd.smtp import AuthResult, LoginPassword

        ok = isinstance(data, LoginPassword) and (data.login.decode(), data.password.decode()) == (
            self.user,
            self.password,
        )
        if ok:
            self.logins.append(self.user)
        return AuthResult(success=ok, handled=False)  # not handled: aiosmtpd answers 235, or 535 as a server does

    def wait_for(self, count: int, timeout: float = 30) -> list[Sent]:
        """Block until `count` messages were accepted; them."""
        with self._changed:
            reached = self._changed.wait_for(lambda: len(self.sent) >= count, timeout)
            found = list(self.sent)
        assert reached, f"{len(found)} mails accepted within {timeout} s, not {count}"
        return found
