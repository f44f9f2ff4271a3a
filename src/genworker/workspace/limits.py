"""How large each kind of workspace file may be. The loader checks a file's size with stat before
reading it, so an oversized file costs one stat, not a read and a parse."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from genworker.settings import Settings

__all__ = ["DEFAULT_LIMITS", "KIB", "FileLimits", "SizeLimit", "describe_size"]

KIB = 1024
_MAX_SETTING_KIB = 64 * KIB  # the highest value a GENWORKER_MAX_*_KIB setting accepts (64 MiB)


@dataclass(frozen=True, slots=True)
class SizeLimit:
    label: str  # what the error calls the file kind, e.g. "PERSONA.md"
    setting: str  # the setting that changes it, in KiB
    max_bytes: int


@dataclass(frozen=True, slots=True)
class FileLimits:
    tenant: SizeLimit = SizeLimit("TENANT.json", "GENWORKER_MAX_TENANT_KIB", 64 * KIB)
    persona: SizeLimit = SizeLimit("PERSONA.md", "GENWORKER_MAX_PERSONA_KIB", 256 * KIB)
    duty: SizeLimit = SizeLimit("duty", "GENWORKER_MAX_DUTY_KIB", 128 * KIB)
    goal: SizeLimit = SizeLimit("goal", "GENWORKER_MAX_GOAL_KIB", 128 * KIB)
    skill: SizeLimit = SizeLimit("SKILL.md", "GENWORKER_MAX_SKILL_KIB", 256 * KIB)
    rule: SizeLimit = SizeLimit("rule", "GENWORKER_MAX_RULE_KIB", 64 * KIB)
    contact: SizeLimit = SizeLimit("contact", "GENWORKER_MAX_CONTACT_KIB", 64 * KIB)
    contact_index: SizeLimit = SizeLimit("contacts index", "GENWORKER_MAX_CONTACT_INDEX_KIB", 8 * KIB * KIB)
    credentials: SizeLimit = SizeLimit("CHANNEL_CREDENTIALS.json", "GENWORKER_MAX_CREDENTIALS_KIB", 64 * KIB)

    @classmethod
    def from_settings(cls, settings: Settings) -> FileLimits:
        """The defaults, each overridden by its GENWORKER_MAX_*_KIB setting (SettingsError naming it)."""
        limits = cls()
        changed = {}
        for f in fields(cls):
            limit: SizeLimit = getattr(limits, f.name)
            kib = settings.number(limit.setting, limit.max_bytes / KIB, 1, _MAX_SETTING_KIB)
            changed[f.name] = replace(limit, max_bytes=int(kib * KIB))
        return cls(**changed)


DEFAULT_LIMITS = FileLimits()


def describe_size(size: int) -> str:
    """`812 bytes`, `256 KiB`, `40.5 MiB`."""
    if size < KIB:
        return f"{size} bytes"
    value, unit = (size / KIB, "KiB") if size < KIB * KIB else (size / (KIB * KIB), "MiB")
    return f"{value:.0f} {unit}" if value.is_integer() else f"{value:.1f} {unit}"
