"""Contacts: people a worker knows, declared in PERSONA.md or under contacts/.

Upstream genworker's spellings load too: `primary_name` for `name`, identities with
`channel_type` (for `channel`), `email` and `source`, and the profile fields its contact store
writes (`source`, `is_same_org_as_owner`, `merge_history`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import AliasChoices, Field, model_validator

from genworker.workspace.models.base import Model, StrTuple, WorkspaceId, note

__all__ = ["Contact", "ContactIdentity"]


class ContactIdentity(Model):
    channel: str = Field(default="", validation_alias=AliasChoices("channel", "channel_type"))
    handle: str = ""  # defaults to `email`
    display_name: str = ""
    email: str = ""
    source: str = ""

    @model_validator(mode="before")
    @classmethod
    def _upstream(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        if "channel" in data and "channel_type" in data:
            raise ValueError("set channel or channel_type, not both")
        if "channel_type" in data:
            note("channel_type", "mapped", "channel_type -> channel")
        if not data.get("handle") and data.get("email"):
            data["handle"] = data["email"]
        return data


class Contact(Model):
    compat_keys = frozenset({"primary_name"})

    person_id: WorkspaceId  # a contact file's name when absent
    name: str = ""  # display falls back to person_id
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
    source: str = "configured"  # configured / discovered (upstream's contact store)
    is_same_org_as_owner: bool = False
    merge_history: StrTuple = ()  # person ids merged into this one

    @model_validator(mode="before")
    @classmethod
    def _primary_name(cls, data: Any) -> Any:
        """Upstream's contact files name a person `primary_name` (and ignore `name`): it wins."""
        if not isinstance(data, Mapping) or "primary_name" not in data:
            return data
        data = dict(data)
        primary = data.pop("primary_name")
        name = data.get("name")
        if name not in (None, "") and name != primary:
            note("name", "warning", f"name {name!r} and primary_name {primary!r} differ: primary_name is used")
        else:
            note("primary_name", "mapped", "primary_name -> name")
        data["name"] = primary
        return data

    @property
    def display_name(self) -> str:
        return self.name or self.person_id
