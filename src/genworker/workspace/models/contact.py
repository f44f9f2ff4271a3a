"""Contacts: people a worker knows, declared in PERSONA.md or under contacts/."""

from __future__ import annotations

from pydantic import Field

from genworker.workspace.models.base import Model, StrTuple, WorkspaceId

__all__ = ["Contact", "ContactIdentity"]


class ContactIdentity(Model):
    channel: str  # email, feishu, wecom, dingtalk, slack, phone ...
    handle: str
    display_name: str = ""


class Contact(Model):
    person_id: WorkspaceId
    name: str
    role: str = ""
    organization: str = ""
    notes: str = ""
    confidence: float = Field(default=1.0, ge=0.0, le=1.0)
    identities: tuple[ContactIdentity, ...] = ()
    social_circles: StrTuple = ()
    hierarchy_level: str = ""
    aliases: StrTuple = ()
    tags: StrTuple = ()
    service_count: int = Field(default=0, ge=0)
    common_topics: StrTuple = ()
