"""The email channel against real servers: pymap (IMAP, in-memory backend) and aiosmtpd (SMTP,
with AUTH), both on loopback ports, spoken to by the stdlib clients.

Polling by UID with a persisted cursor (baseline, no repeats across restarts, a failed handler
sees its message again), folders from features.folders, what is not conversation, and
replies threaded by Message-ID / In-Reply-To / References.
"""

from __future__ import annotations

import imaplib
import json
import select
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from email import message_from_bytes
from email.message import Message
from email.policy import default as default_policy
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from genworker.channels.base import ChannelMessage
from genworker.channels.email import CURSOR_SCHEMA_VERSION, EmailError, EmailPoller, EmailPolling
from genworker.channels.outbound import ChannelDelivery
from genworker.channels.registry import ChannelBinding, ChannelRegistry
from genworker.delivery.messages import OutboundMessage
from genworker.workspace.registry import WorkspaceRegistry

pytest.importorskip("pymap", reason="pymap (a pure-Python IMAP server) is a dev dependency")
pytest.importorskip("aiosmtpd", reason="aiosmtpd (an SMTP server) is a dev dependency")

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP as SMTPServer
from aiosmtpd.smtp import AuthResult, Envelope, LoginPassword, Session

pytestmark = [
    pytest.mark.anyio,
    # aiosmtpd itself, in its server thread: it sets its own deprecated Session.login_data on every
    # AUTH, and warns on each connection that AUTH is offered without TLS (wanted here, on loopback)
    pytest.mark.filterwarnings("ignore:Session.login_data is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS:UserWarning"),
]

USER, PASSWORD = "worker@acme.example", "imap-s3cret-pw"
OWNER = "boss@acme.example"
_IMAP = textwrap.dedent(
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


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def imap_port() -> Iterator[int]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", _IMAP, str(port), USER, PASSWORD],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        encoding="utf-8",
    )
    try:
        assert proc.stdout is not None
        readable, _, _ = select.select([proc.stdout], [], [], 30)
        if (proc.stdout.readline() if readable else "").strip() != "READY":
            proc.kill()
            pytest.fail(f"pymap did not start: {proc.communicate(timeout=10)[1][-2000:]}")
        yield port
    finally:
        proc.terminate()
        try:
            proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


class Outbox:
    """aiosmtpd handler: keeps every accepted message and who logged in."""

    def __init__(self) -> None:
        self.messages: list[tuple[Envelope, Message]] = []
        self.logins: list[str] = []
        self.arrived = threading.Event()

    async def handle_DATA(self, server: SMTPServer, session: Session, envelope: Envelope) -> str:
        assert isinstance(envelope.content, bytes)
        self.messages.append((envelope, message_from_bytes(envelope.content, policy=default_policy)))
        self.arrived.set()
        return "250 OK"

    def authenticate(
        self, server: SMTPServer, session: Session, envelope: Envelope, mechanism: str, data: Any
    ) -> AuthResult:
        ok = isinstance(data, LoginPassword) and data.login.decode() == USER and data.password.decode() == PASSWORD
        if ok:
            self.logins.append(data.login.decode())
        return AuthResult(success=ok)


@pytest.fixture
def smtp() -> Iterator[tuple[Outbox, int]]:
    outbox = Outbox()
    port = _free_port()
    controller = Controller(
        outbox,
        hostname="127.0.0.1",
        port=port,
        authenticator=outbox.authenticate,
        auth_required=True,
        auth_require_tls=False,
    )
    controller.start()
    try:
        yield outbox, port
    finally:
        controller.stop()


class Mailbox:
    """Delivers mail the way an MTA would (IMAP APPEND), over one logged-in connection."""

    def __init__(self, port: int) -> None:
        self.imap = imaplib.IMAP4("127.0.0.1", port, timeout=10)
        self.imap.login(USER, PASSWORD)

    def deliver(
        self, subject: str, *, sender: str = "Bob <bob@partner.example>", mailbox: str = "INBOX", **h: str
    ) -> str:
        mid = h.pop("message_id", f"<{abs(hash((subject, sender, mailbox)))}@partner.example>")
        to = h.pop("to", USER)
        extra = "".join(f"{k.replace('_', '-')}: {v}\r\n" for k, v in h.items())
        raw = (
            f"From: {sender}\r\nTo: {to}\r\nSubject: {subject}\r\nMessage-ID: {mid}\r\n{extra}"
            "Date: Mon, 05 Jan 2026 12:00:00 +0100\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n"
            f"About {subject}.\r\n"
        ).encode()
        assert self.imap.append(mailbox, None, datetime.now(UTC), raw)[0] == "OK"
        return mid

    def create(self, mailbox: str) -> None:
        self.imap.create(mailbox)  # NO when it exists already: fine


@pytest.fixture(scope="module")
def mail(imap_port: int) -> Iterator[Mailbox]:
    box = Mailbox(imap_port)
    box.create("Support")
    yield box
    box.imap.logout()


@pytest.fixture
def build(
    write_tree: Callable[[Mapping[str, str]], Path], imap_port: int, smtp: tuple[Outbox, int], mail: Mailbox
) -> Callable[..., tuple[Path, ChannelBinding, ChannelRegistry]]:
    def make(chat_ids: str = f"[{USER}]") -> tuple[Path, ChannelBinding, ChannelRegistry]:
        persona = (
            "---\nidentity:\n  name: Alice\n  worker_id: alice\n  role: assistant\nmode: personal\n"
            f"channels:\n  - type: email\n    chat_ids: {chat_ids}\n"
            "    features: {folders: [INBOX, Support], imap_security: plain, smtp_security: plain}\n"
            "---\nYou are alice.\n"
        )
        creds = {
            "email": {
                "worker_address": USER,
                "worker_password": PASSWORD,
                "worker_imap_host": "127.0.0.1",
                "worker_imap_port": imap_port,
                "worker_smtp_host": "127.0.0.1",
                "worker_smtp_port": smtp[1],
                "owner_address": OWNER,
            }
        }
        root = write_tree(
            {
                "tenants/acme/TENANT.json": '{"tenant_id": "acme", "name": "Acme"}',
                "tenants/acme/workers/alice/PERSONA.md": persona,
                "tenants/acme/workers/alice/CHANNEL_CREDENTIALS.json": json.dumps(creds),
            }
        )
        registry = WorkspaceRegistry(root, product_skills=None)
        registry.load_all()
        channels = ChannelRegistry(registry)
        binding = channels.resolve("acme~alice~email")
        assert binding is not None, registry.issues()
        return root, binding, channels

    return make


class Collected:
    def __init__(self, fail_on: str | None = None) -> None:
        self.messages: list[ChannelMessage] = []
        self.fail_on = fail_on

    async def __call__(self, message: ChannelMessage) -> None:
        if self.fail_on and self.fail_on in message.text:
            self.fail_on = None  # fails once
            raise RuntimeError("the pipeline is down")
        self.messages.append(message)

    def subjects(self) -> list[str]:
        return [m.reply_context["subject"] for m in self.messages]


async def test_polls_new_mail_once_across_restarts_and_folders(build: Any, mail: Mailbox) -> None:
    root, binding, _ = build()
    seen = Collected()
    assert await EmailPoller(root, binding).poll(seen) == 0  # baseline: existing mail is not answered
    first_id = mail.deliver("Quarterly numbers")
    mail.deliver("Ticket 42", mailbox="Support")
    assert await EmailPoller(root, binding).poll(seen) == 2
    assert seen.subjects() == ["Quarterly numbers", "Ticket 42"]
    got = seen.messages[0]
    assert got.platform == "email" and got.adapter_id == "acme~alice~email"
    assert got.event_id == first_id and got.thread_id == first_id
    assert got.chat_id == got.sender_id == "bob@partner.example" and got.sender_name == "Bob"
    assert got.text.startswith("Subject: Quarterly numbers\n\nAbout Quarterly numbers.")
    assert got.received_at == "2026-01-05T11:00:00+00:00"
    restarted = EmailPoller(root, binding)
    assert await restarted.poll(seen) == 0  # no repeats after a restart
    cursor = json.loads(restarted.cursor_path.read_text(encoding="utf-8"))
    assert cursor["schema_version"] == CURSOR_SCHEMA_VERSION and set(cursor["folders"]) == {"INBOX", "Support"}


async def test_a_failed_handler_sees_its_message_again(build: Any, mail: Mailbox) -> None:
    root, binding, _ = build()
    poller = EmailPoller(root, binding)
    await poller.poll(Collected())
    mail.deliver("first")
    mail.deliver("second")
    flaky = Collected(fail_on="About second")
    with pytest.raises(RuntimeError, match="pipeline is down"):
        await poller.poll(flaky)
    assert flaky.subjects() == ["first"]
    assert await poller.poll(flaky) == 1
    assert flaky.subjects() == ["first", "second"]


async def test_own_mail_auto_replies_and_other_recipients_are_not_conversation(build: Any, mail: Mailbox) -> None:
    root, binding, _ = build()
    poller = EmailPoller(root, binding)
    await poller.poll(Collected())
    mail.deliver("echo of my own mail", sender=f"Alice <{USER}>")
    mail.deliver("Out of office", auto_submitted="auto-replied")
    mail.deliver("for someone else", to="carol@acme.example")
    mail.deliver("real question")
    seen = Collected()
    assert await poller.poll(seen) == 1
    assert seen.subjects() == ["real question"]


async def test_replies_are_threaded_and_sent_over_smtp_with_auth(
    build: Any, mail: Mailbox, smtp: tuple[Outbox, int]
) -> None:
    outbox, _ = smtp
    root, binding, channels = build()
    poller = EmailPoller(root, binding)
    await poller.poll(Collected())
    mail.deliver(
        "Re: Contract draft",
        message_id="<c3@partner.example>",
        in_reply_to="<c2@acme.example>",
        references="<c1@partner.example> <c2@acme.example>",
    )
    seen = Collected()
    await poller.poll(seen)
    incoming = seen.messages[0]
    assert incoming.thread_id == "<c1@partner.example>"  # the root of the thread
    delivery = ChannelDelivery(channels)
    try:
        result = await delivery.reply(incoming, OutboundMessage("Signed copy attached tomorrow."))
        assert result.ok and result.platform == "email", result
        sent_envelope, sent = outbox.messages[0]
        assert sent_envelope.rcpt_tos == ["bob@partner.example"] and outbox.logins == [USER]
        assert sent["Subject"] == "Re: Contract draft"
        assert sent["In-Reply-To"] == "<c3@partner.example>"
        assert sent["References"].split() == ["<c1@partner.example>", "<c2@acme.example>", "<c3@partner.example>"]
        assert sent["Message-ID"] == result.message_id and sent["Message-ID"].endswith("@acme.example>")
        assert sent.get_content().strip() == "Signed copy attached tomorrow."
        brief = await delivery.send("acme", "alice", OutboundMessage("Morning brief: 3 items"))
        assert brief.ok
        _, proactive = outbox.messages[1]
        assert proactive["To"] == OWNER and proactive["Subject"] == "Morning brief: 3 items"
        assert proactive["In-Reply-To"] is None
    finally:
        await delivery.aclose()


async def test_routing_addresses_and_bad_cursors_are_checked(build: Any, mail: Mailbox) -> None:
    root, binding, _ = build(chat_ids="[]")  # no routing addresses: all mail is conversation
    poller = EmailPoller(root, binding)
    await poller.poll(Collected())
    mail.deliver("to anyone", to="carol@acme.example")
    seen = Collected()
    assert await poller.poll(seen) == 1
    poller.cursor_path.write_text('{"schema_version": 99, "folders": {}}', encoding="utf-8")
    with pytest.raises(EmailError, match="schema_version 99"):
        await poller.poll(seen)


async def test_a_wrong_password_is_a_clear_error_without_the_password(build: Any) -> None:
    _, binding, _ = build()
    creds = binding.credentials.model_copy(update={"worker_password": SecretStr("wrong-password-value")})  # type: ignore[union-attr]
    broken = ChannelBinding(binding.adapter_id, "acme", "alice", "email", binding.channel, creds)
    with pytest.raises(EmailError) as caught:
        await EmailPoller(Path("/nonexistent"), broken).poll(Collected())
    assert "IMAP 127.0.0.1" in str(caught.value) and "wrong-password-value" not in str(caught.value)


async def test_a_refused_folder_and_missing_credentials_are_clear_errors(build: Any) -> None:
    root, binding, _ = build()
    features = {**binding.channel.features, "folders": ["INBOX", "Missing"]}
    channel = binding.channel.model_copy(update={"features": features})
    missing = ChannelBinding(binding.adapter_id, "acme", "alice", "email", channel, binding.credentials)
    refused = r"^acme~alice~email: IMAP 127\.0\.0\.1:\d+: mailbox 'Missing' cannot be opened"
    with pytest.raises(EmailError, match=refused):
        await EmailPoller(root, missing).poll(Collected())
    creds = binding.credentials.model_copy(update={"worker_imap_host": None})  # type: ignore[union-attr]
    unset = ChannelBinding(binding.adapter_id, "acme", "alice", "email", binding.channel, creds)
    with pytest.raises(EmailError, match=r"^acme~alice~email: CHANNEL_CREDENTIALS.json has no email.worker_imap_host"):
        EmailPoller(root, unset)


async def test_polling_hands_mail_to_the_ingress_on_its_interval(build: Any, mail: Mailbox) -> None:
    root, _, channels = build()
    accepted: list[tuple[str, str]] = []

    async def accept(binding: ChannelBinding, message: ChannelMessage) -> bool:
        accepted.append((binding.adapter_id, message.reply_context["subject"]))
        return True

    polling = EmailPolling(root, channels, accept)
    assert await polling.poll_due(now=0.0) == {"acme~alice~email": 0}  # baseline
    mail.deliver("via the ingress")
    assert await polling.poll_due(now=30.0) == {}  # the 60 s interval has not passed
    assert await polling.poll_due(now=61.0) == {"acme~alice~email": 1}
    assert accepted == [("acme~alice~email", "via the ingress")] and polling.errors == {}
