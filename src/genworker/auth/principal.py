"""Who is calling: the tenant and workers an authenticated API key may use."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Principal"]


@dataclass(frozen=True, slots=True)
class Principal:
    tenant_id: str
    key_id: str
    workers: frozenset[str] | None = None  # None: every worker of the tenant

    def can_use(self, worker_id: str) -> bool:
        return self.workers is None or worker_id in self.workers
