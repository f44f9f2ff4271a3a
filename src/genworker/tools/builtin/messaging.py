"""send_message and send_email: a worker sends a message or mails someone itself.

Both are `external` (risk high): hidden in the read-only postures, they need trust level 2, a
per-call approval when a policy layer asks for one, and in a run given an undo window they are
held before anything leaves. A call goes through the outbox (`delivery/outbox.py`)
under the idempotency key `tool:{run_id}:{call_id}`, so the same call, released by the undo
window or approved by a person after a confirmation, sends once; a failed send is re-sent on the
channels' schedule and the call says so (a failed tool call on the run, never silent).

Recipients are the worker's contacts (by person_id, name, alias or handle), `owner` (the person
`identity.reports_to` names), or chats its channels are bound to (`chat_ids`,
`features.group_chat_ids`); send_email also takes plain addresses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from genworker.delivery.outbox import Outbox, OutboxEntry, OutboxMessage, Recipient
from genworker.delivery.recipients import (
    EMAIL_ADDRESS,
    BoundChannel,
    bound_chat,
    bound_chats,
    contact_recipients,
    email_capable,
    find_contact,
    owner_recipients,
)
from genworker.tools.base import Effect, RiskLevel, ToolResult
from genworker.tools.context import ToolContext
from genworker.tools.tool import FunctionTool, function_tool
from genworker.workspace.snapshot import Worker

__all__ = ["MAX_EMAIL_RECIPIENTS", "MAX_TEXT", "MessagingError", "MessagingSlot", "messaging_tools", "tool_key"]

MAX_TEXT = 20_000
MAX_SUBJECT = 300
MAX_EMAIL_RECIPIENTS = 20
_SHOWN = 10  # names listed in an error


class MessagingError(ValueError):
    """A send the tool refuses or could not complete; the message is fed back to the model."""


class MessagingSlot:
    """What the tools send through; the composition fills it once the outbox and channels exist."""

    def __init__(self) -> None:
        self.outbox: Outbox | None = None
        self.worker: Callable[[str, str], Worker | None] | None = None
        self.bindings: Callable[[str, str], Sequence[BoundChannel]] | None = None

    def parts(self, ctx: ToolContext) -> tuple[Outbox, Worker, Sequence[BoundChannel]]:
        if self.outbox is None or self.worker is None or self.bindings is None:
            raise MessagingError("sending messages is not available on this runtime")
        scope = ctx.scope
        worker = self.worker(scope.tenant_id, scope.worker_id)
        if worker is None:
            raise MessagingError(f"worker {scope.tenant_id}/{scope.worker_id} is not loaded")
        return self.outbox, worker, self.bindings(scope.tenant_id, scope.worker_id)


def tool_key(ctx: ToolContext) -> str:
    """The idempotency key of one tool call: the same call (retried, released, approved) sends once."""
    return f"tool:{ctx.scope.run_id}:{ctx.call.id}"


def messaging_tools(slot: MessagingSlot) -> list[FunctionTool]:
    @function_tool(effect=Effect.EXTERNAL, risk_level=RiskLevel.HIGH)
    async def send_message(
        ctx: ToolContext,
        to: str,
        text: str,
        platform: Literal["slack", "feishu", "wecom", "dingtalk", "email"] | None = None,
        thread_id: str | None = None,
    ) -> ToolResult:
        """Send a message to a person in your contacts, to your owner, or to a chat your channels are
        bound to (Slack, Feishu, WeCom, DingTalk or email). It is sent once; if the platform is down it
        is re-sent automatically, so never send the same message twice.

        Args:
            to: A contact (person id, name or alias), 'owner' (whom you report to), or a chat id ('slack:C0123').
            text: The message (Markdown).
            platform: Reach the contact on this platform only (default: their preferred one, then the next).
            thread_id: Reply inside this thread of the chat (Slack thread_ts, email Message-ID).
        """
        outbox, worker, bindings = slot.parts(ctx)
        _check_text(text, "text")
        recipients = _message_recipients(worker, bindings, to, platform)
        if thread_id:
            recipients = [_in_thread(r, thread_id) for r in recipients]
        entry = await outbox.send(
            tool_key(ctx),
            ctx.scope.tenant_id,
            ctx.scope.worker_id,
            recipients,
            OutboxMessage(text),
            origin=_origin(ctx),
        )
        return _result(entry)

    @function_tool(effect=Effect.EXTERNAL, risk_level=RiskLevel.HIGH)
    async def send_email(
        ctx: ToolContext, to: list[str], subject: str, body: str, cc: list[str] | None = None
    ) -> ToolResult:
        """Send an email from your own mailbox (SMTP). It is sent once; if the mail server is down it
        is re-sent automatically, so never send the same mail twice.

        Args:
            to: Recipients: email addresses, or contacts (person id, name or alias) that have an email identity.
            subject: The subject line.
            body: The mail's text.
            cc: Copy recipients, like `to`.
        """
        outbox, worker, bindings = slot.parts(ctx)
        if not email_capable(worker, bindings):
            raise MessagingError(
                "this worker has no mailbox to send from: CHANNEL_CREDENTIALS.json needs email.worker_address "
                "and email.worker_smtp_host"
            )
        subject = subject.strip()
        if not subject or len(subject) > MAX_SUBJECT or "\n" in subject or "\r" in subject:
            raise MessagingError(f"subject must be one line of 1-{MAX_SUBJECT} characters")
        _check_text(body, "body")
        to_addresses = _addresses(worker, to, "to")
        taken = {a.casefold() for a in to_addresses}
        cc_addresses = [a for a in _addresses(worker, cc or [], "cc") if a.casefold() not in taken]
        if not to_addresses:
            raise MessagingError("to must name at least one recipient")
        if len(to_addresses) + len(cc_addresses) > MAX_EMAIL_RECIPIENTS:
            raise MessagingError(f"at most {MAX_EMAIL_RECIPIENTS} recipients (to and cc together)")
        recipient = Recipient("email", ", ".join(to_addresses), label=f"{', '.join(to_addresses)} (email)")
        message = OutboxMessage(body, "text", subject, tuple(cc_addresses))
        entry = await outbox.send(
            tool_key(ctx), ctx.scope.tenant_id, ctx.scope.worker_id, [recipient], message, origin=_origin(ctx)
        )
        return _result(entry)

    return [send_message, send_email]


def _check_text(text: str, name: str) -> None:
    if not text.strip():
        raise MessagingError(f"{name} is empty")
    if len(text) > MAX_TEXT:
        raise MessagingError(f"{name} has {len(text)} characters; at most {MAX_TEXT}")


def _message_recipients(
    worker: Worker, bindings: Sequence[BoundChannel], to: str, platform: str | None
) -> list[Recipient]:
    wanted = to.strip()
    if not wanted:
        raise MessagingError("to is empty: name a contact, 'owner', or a bound chat")
    where = f" on {platform}" if platform else ""
    if wanted.casefold() == "owner":
        found = [r for r in owner_recipients(worker, bindings) if platform is None or r.platform == platform]
        if not found:
            raise MessagingError(f"there is no way to reach your owner{where}: {_owner_problem(worker)}")
        return found
    contact = find_contact(worker, wanted)
    if contact is not None:
        found = contact_recipients(worker, bindings, contact, platform)
        if not found:
            ways = ", ".join(f"{i.channel}:{i.handle}" for i in contact.identities) or "none"
            raise MessagingError(
                f"{contact.display_name} cannot be reached{where} from this worker (their identities: {ways}; "
                "a platform needs a channel with credentials)"
            )
        return found
    chat = bound_chat(bindings, wanted, platform)
    if chat is not None:
        return [chat]
    raise MessagingError(f"no contact or bound chat {wanted!r}{where}; {_known(worker, bindings)}")


def _owner_problem(worker: Worker) -> str:
    reports_to = worker.persona.identity.reports_to
    if not reports_to:
        return "PERSONA.md sets no identity.reports_to, and no channel has a default chat"
    return f"identity.reports_to {reports_to!r} has no usable identity, and no channel has a default chat"


def _known(worker: Worker, bindings: Sequence[BoundChannel]) -> str:
    contacts = sorted(worker.contacts)
    chats = [r.describe() for r in bound_chats(bindings)]
    shown_contacts = ", ".join(contacts[:_SHOWN]) + (" ..." if len(contacts) > _SHOWN else "") or "none"
    shown_chats = ", ".join(chats[:_SHOWN]) + (" ..." if len(chats) > _SHOWN else "") or "none"
    return f"contacts: {shown_contacts}; bound chats: {shown_chats}"


def _addresses(worker: Worker, names: Sequence[str], field: str) -> list[str]:
    found: list[str] = []
    for name in names:
        written = name.strip()
        address = written if EMAIL_ADDRESS.match(written) else _email_of(worker, written, field)
        if address.casefold() not in {a.casefold() for a in found}:
            found.append(address)
    return found


def _email_of(worker: Worker, name: str, field: str) -> str:
    contact = find_contact(worker, name) if name else None
    if contact is None:
        raise MessagingError(f"{field}: {name!r} is neither an email address nor a contact")
    for identity in contact.identities:
        handle = identity.handle.strip()
        if identity.channel.strip().lower() == "email" and EMAIL_ADDRESS.match(handle):
            return handle
    raise MessagingError(f"{field}: {contact.display_name} has no email identity")


def _in_thread(recipient: Recipient, thread_id: str) -> Recipient:
    return Recipient(
        recipient.platform,
        recipient.chat_id,
        recipient.chat_type,
        recipient.adapter_key,
        thread_id.strip() or None,
        recipient.label,
    )


def _origin(ctx: ToolContext) -> dict[str, str]:
    return {"run_id": ctx.scope.run_id, "call_id": ctx.call.id, "tool": ctx.spec.name, "caller": ctx.caller}


def _result(entry: OutboxEntry) -> ToolResult:
    data = {"outbox_id": entry.entry_id, "state": entry.state, "platform": entry.platform,
            "message_id": entry.message_id}  # fmt: skip
    match entry.state:
        case "sent":
            return ToolResult(f"Sent to {entry.delivered_to} (outbox {entry.entry_id}).", data=data)
        case "sending":
            raise MessagingError(f"this message is being sent now (outbox {entry.entry_id}); do not send it again")
        case "retrying":
            raise MessagingError(
                f"not delivered yet: {entry.last_error}. It is kept and sent again automatically "
                f"(outbox {entry.entry_id}); do not send it again"
            )
        case "given_up" | "failed":
            raise MessagingError(f"not delivered: {entry.last_error} (outbox {entry.entry_id}, {entry.state})")
        case "outcome_unknown":
            raise MessagingError(
                f"an earlier attempt was cut short and may or may not have been delivered (outbox {entry.entry_id}); "
                "a person will check it"
            )
