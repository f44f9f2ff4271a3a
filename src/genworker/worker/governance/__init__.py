"""Task governance: duty binding, the decision table, approvals and policy/contract snapshots.

`TaskGovernanceStage(workspace_root).evaluate(GovernanceInput(...))` returns the manifest fields
and the GovernanceDecision (auto | gated | blocked, with posture, risk tier, reversibility and
a reason for every rule that fired). docs/governance.md describes the table.
"""

from genworker.worker.governance.approval_resolver import (
    Approval,
    ApprovalCheck,
    ApprovalResolver,
    ApprovalStatus,
    ApprovalStore,
    InMemoryApprovals,
)
from genworker.worker.governance.contract_terms import ContractTerms, ScopeEntry, ScopeVerdict, parse_scope_entry
from genworker.worker.governance.decision_table import RULES, TABLE_VERSION, Facts, Rule, apply_approval, decide
from genworker.worker.governance.duty_binding import BindingProblem, BoundVia, DutyBinding, DutyBindingResolver
from genworker.worker.governance.errors import GovernanceError, GovernanceInputError, SnapshotError
from genworker.worker.governance.models import (
    AUTONOMOUS_SOURCES,
    CONVERSATIONAL_SOURCES,
    INTERACTIVE_SOURCES,
    SOURCE_TYPES,
    Action,
    GovernanceDecision,
    GovernanceInput,
    GovernanceOutcome,
    ManifestFields,
    Reason,
    Reversibility,
    RiskTier,
    SourceType,
)
from genworker.worker.governance.snapshots import (
    CONTRACT_DIR,
    POLICY_DIR,
    POLICY_REF_PREFIX,
    ContractSnapshot,
    PolicySnapshot,
    SnapshotStore,
    policy_ref,
)
from genworker.worker.governance.task_governance_stage import TABLE_SOURCE, TaskGovernanceStage

__all__ = [
    "AUTONOMOUS_SOURCES",
    "CONTRACT_DIR",
    "CONVERSATIONAL_SOURCES",
    "INTERACTIVE_SOURCES",
    "POLICY_DIR",
    "POLICY_REF_PREFIX",
    "RULES",
    "SOURCE_TYPES",
    "TABLE_SOURCE",
    "TABLE_VERSION",
    "Action",
    "Approval",
    "ApprovalCheck",
    "ApprovalResolver",
    "ApprovalStatus",
    "ApprovalStore",
    "BindingProblem",
    "BoundVia",
    "ContractSnapshot",
    "ContractTerms",
    "DutyBinding",
    "DutyBindingResolver",
    "Facts",
    "GovernanceDecision",
    "GovernanceError",
    "GovernanceInput",
    "GovernanceInputError",
    "GovernanceOutcome",
    "InMemoryApprovals",
    "ManifestFields",
    "PolicySnapshot",
    "Reason",
    "Reversibility",
    "RiskTier",
    "Rule",
    "ScopeEntry",
    "ScopeVerdict",
    "SnapshotError",
    "SnapshotStore",
    "SourceType",
    "TaskGovernanceStage",
    "apply_approval",
    "decide",
    "parse_scope_entry",
    "policy_ref",
]
