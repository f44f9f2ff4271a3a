"""ApprovalResolver: does `approval_ref` name a confirmation that admits this gated task?

An approval counts only when it was decided `approved`, for the same tenant and worker, has not
expired, and names the very policy it approved (`policy_ref`, the `snapshot:policy:…` of the
gated decision). Anything else leaves the task gated with a reason, so an approval cannot be
replayed for different work. The confirmation store implements `ApprovalStore`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal, Protocol

from genworker.worker.governance.errors import GovernanceInputError
from genworker.worker.governance.models import Reason

__all__ = ["Approval", "ApprovalCheck", "ApprovalResolver", "ApprovalStatus", "ApprovalStore", "InMemoryApprovals"]

ApprovalStatus = Literal["pending", "approved", "rejected"]


@dataclass(frozen=True, slots=True)
class Approval:
    ref: str
    tenant_id: str
    worker_id: str
    status: ApprovalStatus
    policy_ref: str | None = None  # the gated decision it answers
    decided_by: str | None = None
    expires_at: datetime | None = None

    def __post_init__(self) -> None:
        if self.expires_at is not None and self.expires_at.utcoffset() is None:
            raise GovernanceInputError(f"approval {self.ref}: expires_at must be timezone-aware")


class ApprovalStore(Protocol):
    def get_approval(self, tenant_id: str, worker_id: str, ref: str) -> Approval | None: ...


class InMemoryApprovals:
    """An ApprovalStore held in memory (one process, or tests)."""

    def __init__(self, approvals: tuple[Approval, ...] = ()) -> None:
        self._items: dict[tuple[str, str, str], Approval] = {}
        for approval in approvals:
            self.add(approval)

    def add(self, approval: Approval) -> None:
        self._items[(approval.tenant_id, approval.worker_id, approval.ref)] = approval

    def get_approval(self, tenant_id: str, worker_id: str, ref: str) -> Approval | None:
        return self._items.get((tenant_id, worker_id, ref))


@dataclass(frozen=True, slots=True)
class ApprovalCheck:
    granted: bool
    reason: Reason
    approval: Approval | None = None


def _utc_now() -> datetime:
    return datetime.now(UTC)


class ApprovalResolver:
    def __init__(self, store: ApprovalStore | None = None, *, clock: Callable[[], datetime] = _utc_now) -> None:
        self._store = store
        self._clock = clock

    def check(self, tenant_id: str, worker_id: str, ref: str, *, policy_ref: str) -> ApprovalCheck:
        if self._store is None:
            return ApprovalCheck(False, Reason("approval_unverifiable", f"no approval store to look up {ref!r}"))
        approval = self._store.get_approval(tenant_id, worker_id, ref)
        if approval is None or (approval.tenant_id, approval.worker_id) != (tenant_id, worker_id):
            return ApprovalCheck(False, Reason("approval_unknown", f"approval {ref!r} does not exist for this worker"))
        denial = self._denial(approval, policy_ref)
        if denial is not None:
            return ApprovalCheck(False, denial, approval)
        who = f" by {approval.decided_by}" if approval.decided_by else ""
        return ApprovalCheck(True, Reason("approval_granted", f"approval {ref!r} was given{who}"), approval)

    def _denial(self, approval: Approval, policy_ref: str) -> Reason | None:
        ref = approval.ref
        if approval.status != "approved":
            code = "approval_rejected" if approval.status == "rejected" else "approval_pending"
            return Reason(code, f"approval {ref!r} is {approval.status}")
        if approval.expires_at is not None and approval.expires_at <= self._clock():
            return Reason("approval_expired", f"approval {ref!r} expired at {approval.expires_at.isoformat()}")
        if approval.policy_ref != policy_ref:
            return Reason(
                "approval_mismatch",
                f"approval {ref!r} was given for {approval.policy_ref or 'no recorded policy'}, not {policy_ref}",
            )
        return None
