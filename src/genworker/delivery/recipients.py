"""Who a proactive message goes to: a worker's contacts, its owner, and the chats its channels are bound to.

A contact is reached through its `identities`, in the order they are listed (the first is the
preferred channel), on those platforms the worker has a channel with credentials for (email: the
credentials' email section with an SMTP host, with or without a `channels[]` entry). The owner is
the contact `identity.reports_to` names (by person_id, name, alias or handle); after the owner's own
channels come the worker's default chats (each channel's first `chat_ids` entry, the email
owner_address), so a notice still reaches someone when the owner has no usable identity.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

from pydantic import BaseModel

from genworker.delivery.messages import PLATFORMS, ChatType, Target
from genworker.delivery.outbox import Recipient
from genworker.workspace.models import Contact
from genworker.workspace.models.credentials import EmailCredentials
from genworker.workspace.models.persona import Channel
from genworker.workspace.snapshot import Worker

__all__ = [
    "EMAIL_ADDRESS",
    "BoundChannel",
    "bound_chat",
    "bound_chats",
    "can_send",
    "contact_recipients",
    "default_target",
    "email_capable",
    "find_contact",
    "owner_of",
    "owner_recipients",
]

EMAIL_ADDRESS = re.compile(r"^[^@\s,;<>\"]+@[^@\s,;<>\"]+\.[^@\s,;<>\"]+$")


class BoundChannel(Protocol):
    """What recipients need of one of the worker's channels (`channels.registry.BoundChannel`)."""

    @property
    def platform(self) -> str: ...

    @property
    def key(self) -> str: ...

    @property
    def channel(self) -> Channel: ...

    @property
    def credentials(self) -> BaseModel | None: ...


def can_send(binding: BoundChannel) -> bool:
    creds = binding.credentials
    if isinstance(creds, EmailCredentials):
        return bool(creds.worker_smtp_host)
    return creds is not None


def email_capable(worker: Worker, bindings: Sequence[BoundChannel]) -> bool:
    """The worker can send mail: an email channel with SMTP credentials, or the credentials alone."""
    if any(b.platform == "email" and can_send(b) for b in bindings):
        return True
    creds = worker.credentials.email if worker.credentials is not None else None
    return creds is not None and bool(creds.worker_smtp_host)


def _binding(worker: Worker, bindings: Sequence[BoundChannel], platform: str) -> BoundChannel | bool | None:
    """The worker's channel for `platform` that can send; True for email without a channel entry."""
    found = next((b for b in bindings if b.platform == platform and can_send(b)), None)
    if found is None and platform == "email" and email_capable(worker, bindings):
        return True
    return found


def find_contact(worker: Worker, name: str) -> Contact | None:
    """The contact `name` means: its person_id, name, an alias or an identity's handle (any case)."""
    wanted = name.strip().casefold()
    if not wanted:
        return None
    for contact in worker.contacts.values():
        names = {contact.person_id, contact.name, *contact.aliases, *(i.handle for i in contact.identities)}
        if wanted in {n.strip().casefold() for n in names if n}:
            return contact
    return None


def contact_recipients(
    worker: Worker, bindings: Sequence[BoundChannel], contact: Contact, platform: str | None = None
) -> list[Recipient]:
    """The ways to reach `contact` from this worker, preferred first (the order of its identities)."""
    found: list[Recipient] = []
    for identity in contact.identities:
        channel, handle = identity.channel.strip().lower(), identity.handle.strip()
        if not handle or channel not in PLATFORMS or (platform is not None and channel != platform):
            continue
        if channel == "email" and not EMAIL_ADDRESS.match(handle):
            continue
        binding = _binding(worker, bindings, channel)
        if binding is None:
            continue
        key = None if isinstance(binding, bool) else binding.key
        found.append(Recipient(channel, handle, "p2p", key, label=f"{contact.display_name} ({channel})"))
    return _unique(found)


def owner_of(worker: Worker) -> Contact | None:
    """The contact `identity.reports_to` names, if any."""
    reports_to = worker.persona.identity.reports_to
    return find_contact(worker, reports_to) if reports_to else None


def owner_recipients(worker: Worker, bindings: Sequence[BoundChannel]) -> list[Recipient]:
    """The owner's channels in their preferred order, then the worker's default chats."""
    found: list[Recipient] = []
    owner = owner_of(worker)
    reports_to = worker.persona.identity.reports_to.strip()
    if owner is not None:
        found.extend(contact_recipients(worker, bindings, owner))
    elif EMAIL_ADDRESS.match(reports_to) and email_capable(worker, bindings):
        found.append(Recipient("email", reports_to, label=f"{reports_to} (email)"))
    for binding in bindings:
        target = default_target(binding) if can_send(binding) else None
        if target is not None:
            label = f"default chat of {binding.key} ({binding.platform})"
            found.append(Recipient(binding.platform, target.chat_id, target.chat_type, binding.key, label=label))
    return _unique(found)


def bound_chats(bindings: Sequence[BoundChannel]) -> list[Recipient]:
    """Every chat listed in a channel's `chat_ids` or `features.group_chat_ids`, on channels that can send."""
    found: list[Recipient] = []
    for binding in bindings:
        if not can_send(binding):
            continue
        groups = _group_ids(binding)
        for chat in (*binding.channel.chat_ids, *groups):
            kind: ChatType = "group" if chat in groups else "p2p"
            found.append(Recipient(binding.platform, chat, kind, binding.key, label=f"{binding.platform}:{chat}"))
    return _unique(found)


def bound_chat(bindings: Sequence[BoundChannel], chat: str, platform: str | None = None) -> Recipient | None:
    """The bound chat `chat` names (`C0123`, or `slack:C0123`), on `platform` when given."""
    written = chat.strip()
    prefix, _, rest = written.partition(":")
    if rest and prefix.lower() in PLATFORMS:
        if platform is not None and platform != prefix.lower():
            return None
        platform, written = prefix.lower(), rest.strip()
    for recipient in bound_chats(bindings):
        if recipient.chat_id == written and (platform is None or recipient.platform == platform):
            return recipient
    return None


def default_target(binding: BoundChannel) -> Target | None:
    """Where proactive messages go on `binding`: its first chat id (for email: the owner)."""
    creds = binding.credentials
    if isinstance(creds, EmailCredentials) and creds.owner_address:
        return Target(creds.owner_address)
    if binding.channel.chat_ids:
        return Target(
            binding.channel.chat_ids[0], "group" if _looks_group(binding, binding.channel.chat_ids[0]) else "p2p"
        )
    return None


def _looks_group(binding: BoundChannel, chat_id: str) -> bool:
    group_ids = binding.channel.features.get("group_chat_ids")
    return isinstance(group_ids, (list, tuple)) and chat_id in group_ids


def _group_ids(binding: BoundChannel) -> tuple[str, ...]:
    ids = binding.channel.features.get("group_chat_ids")
    return tuple(str(i) for i in ids) if isinstance(ids, (list, tuple)) else ()


def _unique(recipients: list[Recipient]) -> list[Recipient]:
    seen: set[tuple[str, str]] = set()
    kept = []
    for recipient in recipients:
        if (recipient.platform, recipient.chat_id) not in seen:
            seen.add((recipient.platform, recipient.chat_id))
            kept.append(recipient)
    return kept
