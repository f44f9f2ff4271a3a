"""`VersionedRecord`: the base of the autonomy layer's persisted pydantic records (briefs, context
spaces). Frozen, no unknown field, and a `schema_version` this build knows: a record of another
version is refused with an error naming both, never read as if it were this one."""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict, field_validator

__all__ = ["VersionedRecord"]


class VersionedRecord(BaseModel):
    """A subclass of another version sets both `SCHEMA_VERSION` and the field's default."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    SCHEMA_VERSION: ClassVar[int] = 1

    schema_version: int = 1

    @field_validator("schema_version")
    @classmethod
    def _known(cls, value: int) -> int:
        if value != cls.SCHEMA_VERSION:
            raise ValueError(f"unknown schema_version {value}; this build reads {cls.SCHEMA_VERSION}")
        return value
