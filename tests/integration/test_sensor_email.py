"""The email sensor against a real IMAP server (pymap's in-memory backend, on a loopback port) with imaplib.

New mail, restart without repeats, mail that arrived while stopped, a UIDVALIDITY change, filters,
and failures that degrade the sensor without leaking the password.
"""

from __future__ import annotations

import imaplib
import select
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from genworker.autonomy.inbox import InboxItem
from genworker.autonomy.sensing import EmailSensor, SensorRunner
from genworker.autonomy.sensing.testing import MemoryInboxWriter, write_worker

pytest.importorskip("pymap", reason="pymap (a pure-Python IMAP server) is a dev dependency for the email tests")

pytestmark = pytest.mark.anyio

USER, PASSWORD = "worker@acme.example", "imap-s3cret-pw"
_SERVER = textwrap.dedent(
    """
    import sys
    import pymap.main

    def ready() -> None:
        print("READY", flush=True)

    pymap.main.notify_ready = ready  # pymap calls it once its IMAP socket listens
    sys.argv = ["pymap", "--host", "127.0.0.1", "--port", sys.argv[1], "dict", "--demo-data",
                "--demo-user", sys.argv[2], "--demo-password", sys.argv[3]]
    pymap.main.main()
    """
)


@pytest.fixture(scope="module")
def imap_port() -> Iterator[int]:
    """One server for the module: each test starts from its own baseline, so earlier mail is old news."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    proc = subprocess.Popen(
        [sys.executable, "-c", _SERVER, str(port), USER, PASSWORD],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        encoding="utf-8",
    )
    try:
        assert proc.stdout is not None
        readable, _, _ = select.select([proc.stdout], [], [], 30)
        line = proc.stdout.readline() if readable else ""
        if line.strip() != "READY":
            proc.kill()
            _, err = proc.communicate(timeout=10)
            pytest.fail(f"pymap did not start: {err[-2000:]}")
        yield port
    finally:
        proc.terminate()
        try:
            proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


class Mailbox:
    """Delivers mail the way an MTA would: IMAP APPEND, with a chosen INTERNALDATE."""

    def __init__(self, port: int) -> None:
        self.port = port

    def _connect(self) -> imaplib.IMAP4:
        imap = imaplib.IMAP4("127.0.0.1", self.port, timeout=10)
        imap.login(USER, PASSWORD)
        return imap

    def deliver(
        self,
        subject: str,
        sender: str = "Bob <bob@partner.example>",
        *,
        mailbox: str = "INBOX",
        message_id: str | None = None,
        when: datetime | None = None,
        body: str = "Hello.",
    ) -> None:
        mid = message_id or f"<{abs(hash((subject, sender)))}@partner.example>"
        raw = (
            f"From: {sender}\r\nTo: {USER}\r\nSubject: {subject}\r\nMessage-ID: {mid}\r\n"
            f"Content-Type: text/plain; charset=utf-8\r\n\r\n{body}\r\n"
        ).encode()
        imap = self._connect()
        try:
            typ, data = imap.append(mailbox, None, when or datetime.now(UTC), raw)
            assert typ == "OK", data
        finally:
            imap.logout()

    def rebuild(self, mailbox: str) -> None:
        """Delete and re-create a mailbox: its UIDVALIDITY changes."""
        imap = self._connect()
        try:
            imap.delete(mailbox)
            assert imap.create(mailbox)[0] == "OK"
        finally:
            imap.logout()

    def create(self, mailbox: str) -> None:
        imap = self._connect()
        try:
            assert imap.create(mailbox)[0] == "OK"
        finally:
            imap.logout()


@pytest.fixture
def mail(imap_port: int) -> Mailbox:
    return Mailbox(imap_port)


def credentials(port: int, password: str = PASSWORD) -> dict[str, Any]:
    return {
        "email": {
            "worker_address": USER,
            "worker_password": password,
            "worker_imap_host": "127.0.0.1",
            "worker_imap_port": port,
        }
    }


def runner(root: Path, writer: MemoryInboxWriter, port: int, password: str = PASSWORD, **filter: Any) -> SensorRunner:
    config = {
        "source_type": "email",
        "poll_interval": "5m",
        "filter": {"security": "plain", **filter},
        "routing_rules": [{"field": "subject", "pattern": "invoice", "match": "contains", "route": "task"}],
        "fallback_route": "summary",
    }
    worker = write_worker(root, [config], credentials=credentials(port, password))
    return SensorRunner(worker, writer, workspace=root)


def subjects(items: list[InboxItem]) -> list[str]:
    return [str(i.payload.get("subject")) for i in items if i.event_type == "email.received"]


async def test_new_mail_is_reported_once_and_routed(tmp_path: Path, mail: Mailbox, imap_port: int) -> None:
    writer = MemoryInboxWriter()
    run = runner(tmp_path, writer, imap_port)
    assert await run.poll_now("email") == []  # baseline: pymap's demo mail is old news
    mail.deliver("Your invoice #7", body="Please pay 10 EUR.")
    mail.deliver("Lunch?")
    items = await run.poll_now("email")
    assert subjects(items) == ["Your invoice #7", "Lunch?"]
    assert [i.route for i in items] == ["task", "summary"]
    first = items[0].payload
    assert first["from"] == "Bob <bob@partner.example>" and first["body"].strip() == "Please pay 10 EUR."
    assert first["mailbox"] == "INBOX" and first["body_type"] == "plain"
    assert first["sender"] == "bob@partner.example"
    assert items[0].dedupe_key == f"email:email:uid:INBOX:{first['uidvalidity']}:{first['uid']}"
    assert await run.poll_now("email") == []


async def test_restart_no_repeats_and_mail_that_arrived_while_stopped(
    tmp_path: Path, mail: Mailbox, imap_port: int
) -> None:
    writer = MemoryInboxWriter()
    first = runner(tmp_path, writer, imap_port)
    await first.poll_now("email")
    mail.deliver("one")
    assert subjects(await first.poll_now("email")) == ["one"]
    await first.stop()
    mail.deliver("two")
    mail.deliver("three")
    second = runner(tmp_path, writer, imap_port)
    assert subjects(await second.poll_now("email")) == ["two", "three"]
    assert await second.poll_now("email") == [] and writer.dropped == []


async def test_at_most_max_messages_per_poll_and_the_rest_next_time(
    tmp_path: Path, mail: Mailbox, imap_port: int
) -> None:
    writer = MemoryInboxWriter()
    run = runner(tmp_path, writer, imap_port, max_messages=2)
    await run.poll_now("email")
    for n in range(3):
        mail.deliver(f"m{n}")
    assert subjects(await run.poll_now("email")) == ["m0", "m1"]
    assert subjects(await run.poll_now("email")) == ["m2"]


async def test_a_uidvalidity_change_reports_a_reset_and_only_the_new_mail(
    tmp_path: Path, mail: Mailbox, imap_port: int
) -> None:
    mail.create("Orders")
    writer = MemoryInboxWriter()
    run = runner(tmp_path, writer, imap_port, mailbox="Orders")
    await run.poll_now("email")
    monday = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)
    mail.deliver("order 1", mailbox="Orders", message_id="<order-1@shop>", when=monday)
    [before] = await run.poll_now("email")
    mail.rebuild("Orders")  # e.g. the mail server migrated the folder: every UID is new
    mail.deliver("order 1", mailbox="Orders", message_id="<order-1@shop>", when=monday)  # the old mail, again
    mail.deliver("order 2", mailbox="Orders", message_id="<order-2@shop>", when=datetime(2025, 3, 4, tzinfo=UTC))
    items = await run.poll_now("email")
    assert [i.event_type for i in items] == ["email.mailbox_reset", "email.received"]
    reset = items[0].payload
    assert reset["old_uidvalidity"] == before.payload["uidvalidity"] != reset["new_uidvalidity"]
    assert subjects(items) == ["order 2"]
    mail.deliver("order 3", mailbox="Orders", message_id="<order-3@shop>")
    assert subjects(await run.poll_now("email")) == ["order 3"]


async def test_from_and_subject_filters(tmp_path: Path, mail: Mailbox, imap_port: int) -> None:
    writer = MemoryInboxWriter()
    filters: dict[str, Any] = {"from": "@partner.example", "subject_contains": ["invoice"]}  # `from` is a keyword
    run = runner(tmp_path, writer, imap_port, **filters)
    await run.poll_now("email")
    mail.deliver("invoice 1")
    mail.deliver("invoice 2", sender="Eve <eve@evil.example>")
    mail.deliver("newsletter")
    assert subjects(await run.poll_now("email")) == ["invoice 1"]
    assert await run.poll_now("email") == []  # the cursor moved past the filtered mail too


async def test_several_folders_and_excluded_senders(tmp_path: Path, mail: Mailbox, imap_port: int) -> None:
    mail.create("Support")
    writer = MemoryInboxWriter()
    run = runner(tmp_path, writer, imap_port, folders=["INBOX", "Support"], exclude_senders=["noreply@*"])
    await run.poll_now("email")
    mail.deliver("ticket 1", mailbox="Support")
    mail.deliver("hello", mailbox="INBOX")
    mail.deliver("build ok", sender="CI <NoReply@ci.example>", mailbox="INBOX")
    items = await run.poll_now("email")
    assert [(i.payload["mailbox"], i.payload["subject"]) for i in items] == [
        ("INBOX", "hello"),
        ("Support", "ticket 1"),
    ]
    assert await run.poll_now("email") == []


async def test_a_wrong_password_degrades_the_sensor_without_leaking_it(tmp_path: Path, imap_port: int) -> None:
    wrong = "not-the-password-123"
    run = runner(tmp_path, MemoryInboxWriter(), imap_port, password=wrong)
    assert await run.poll_all() == {}
    status = run.status("email")
    assert status.state == "degraded" and "IMAP 127.0.0.1" in status.reason
    sensor = run.sensors["email"]
    assert isinstance(sensor, EmailSensor)
    assert wrong not in status.reason and wrong not in repr(sensor.account)


async def test_missing_credentials_degrade_at_start(tmp_path: Path) -> None:
    worker = write_worker(tmp_path, [{"source_type": "email", "filter": {"security": "plain"}}])
    run = SensorRunner(worker, MemoryInboxWriter(), workspace=tmp_path)
    status = run.status("email")
    assert status.state == "degraded"
    assert status.reason == "CHANNEL_CREDENTIALS.json has no email.worker_imap_host for this worker"  # a config error


async def test_a_folder_the_server_refuses_is_a_failed_poll_naming_it(
    tmp_path: Path, mail: Mailbox, imap_port: int
) -> None:
    run = runner(tmp_path, MemoryInboxWriter(), imap_port, folders=["INBOX", "Missing"])
    assert await run.poll_all() == {}
    status = run.status("email")
    assert status.state == "degraded" and status.consecutive_failures == 1
    assert status.reason.startswith("mailbox 'Missing' cannot be opened: ")  # a poll error, not a crash
