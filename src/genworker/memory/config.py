"""Memory settings, read from the layered settings (configs/*.env or the environment)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["MemoryConfig"]

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


@dataclass(frozen=True, slots=True)
class MemoryConfig:
    enabled: bool = True  # GENWORKER_MEMORY: episodes written after runs, recalled before them
    extract: bool = False  # GENWORKER_MEMORY_EXTRACT: one fast-tier call per run for preferences/decisions
    embeddings: bool = False  # GENWORKER_MEMORY_EMBEDDINGS: hybrid BM25 + vector ranking (needs the extra)
    half_life_days: float = 30.0  # GENWORKER_MEMORY_HALF_LIFE_DAYS
    timeout_s: float = 5.0  # GENWORKER_MEMORY_TIMEOUT_S: per provider
    consolidate_every_s: float = 86_400.0  # GENWORKER_MEMORY_CONSOLIDATE_S: how often old episodes are folded
    consolidate_after_days: float = 90.0  # GENWORKER_MEMORY_CONSOLIDATE_AFTER_DAYS: episodes older than this
    reinforce_boost: float = 0.25
    recall_limit: int = 8

    @classmethod
    def from_values(cls, values: Mapping[str, str]) -> MemoryConfig:
        def flag(key: str, default: bool) -> bool:
            raw = values.get(key, "").strip().lower()
            if not raw:
                return default
            if raw in _TRUE | _FALSE:
                return raw in _TRUE
            raise ValueError(f"{key}={values[key]!r}: must be true or false")

        def number(key: str, default: float) -> float:
            raw = values.get(key, "").strip()
            if not raw:
                return default
            try:
                value = float(raw)
            except ValueError:
                raise ValueError(f"{key}={raw!r}: must be a number") from None
            if value <= 0:
                raise ValueError(f"{key}={raw!r}: must be greater than 0")
            return value

        return cls(
            enabled=flag("GENWORKER_MEMORY", True),
            extract=flag("GENWORKER_MEMORY_EXTRACT", False),
            embeddings=flag("GENWORKER_MEMORY_EMBEDDINGS", False),
            half_life_days=number("GENWORKER_MEMORY_HALF_LIFE_DAYS", 30.0),
            timeout_s=number("GENWORKER_MEMORY_TIMEOUT_S", 5.0),
            consolidate_every_s=number("GENWORKER_MEMORY_CONSOLIDATE_S", 86_400.0),
            consolidate_after_days=number("GENWORKER_MEMORY_CONSOLIDATE_AFTER_DAYS", 90.0),
        )
