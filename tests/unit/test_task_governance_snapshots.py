"""Policy and contract snapshots: written once per distinct policy, content-addressed, read back
with a schema check, refused when tampered with."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from genworker.tools.base import Effect
from genworker.worker.governance import (
    CONTRACT_DIR,
    POLICY_DIR,
    TABLE_VERSION,
    Approval,
    ApprovalResolver,
    GovernanceInput,
    InMemoryApprovals,
    PolicySnapshot,
    SnapshotError,
    TaskGovernanceStage,
    policy_ref,
)
from genworker.workspace.models import Tenant
from genworker.workspace.snapshot import Worker

DUTY = """
triggers:
  - {id: new-mail, type: event, source: mailbox}
contract:
  version: "2026.10"
  decision_scope: ["auto: label mail", "confirm: send any reply"]
  approval: {required_for: [forward]}
  sla: {respond_within: 15m}
process_step: {process_id: mail, step_id: triage}
"""


@pytest.fixture
def setup(ws) -> tuple[TaskGovernanceStage, Worker, Path]:
    ws.persona()
    ws.duty("triage", DUTY)
    ws.duty("odd-version", 'contract:\n  version: "v1/2 ../x"\n')
    worker, _ = ws.load_worker()
    return TaskGovernanceStage(ws.root), worker, ws.worker_dir()


def run(setup: Any, text: str = "hi", trust: int = 2, **fields: Any):
    stage, worker, _ = setup
    return stage.evaluate(GovernanceInput(Tenant(tenant_id="acme", trust_level=trust), worker, text, **fields))


def files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def test_one_file_per_distinct_policy(setup) -> None:
    worker_dir = setup[2]
    policies = worker_dir / POLICY_DIR
    first = run(setup, "summarise my week")
    second = run(setup, "something else entirely", source_id="other-thread")  # task text and ids are not policy
    assert first.manifest.policy_ref == second.manifest.policy_ref
    assert files(policies) == [f"{first.manifest.policy_ref[-12:]}.json"]
    run(setup, trust=1)
    run(setup, requested_effects=frozenset({Effect.READ}))
    assert len(files(policies)) == 3
    assert not any(p.name.endswith(".tmp") for p in policies.iterdir())


def test_the_policy_file_holds_the_inputs_and_the_decision(setup) -> None:
    outcome = run(setup, "secret task text", source_type="event", duty_id="triage", trigger_id="new-mail")
    path = setup[2] / outcome.manifest.policy_snapshot_ref
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["schema_version"] == 1
    assert data["kind"] == "task_governance_policy"
    assert data["table_version"] == TABLE_VERSION == 3
    assert (data["tenant_id"], data["worker_id"]) == ("acme", "w")
    assert data["inputs"]["duty_id"] == "triage"
    assert (data["inputs"]["execution_depth"], data["inputs"]["duty_posture"]) == ("standard", "execute")
    assert data["inputs"]["contract_snapshot_ref"] == outcome.manifest.contract_snapshot_ref
    assert data["decision"] == outcome.decision.as_dict()
    assert "secret task text" not in path.read_text(encoding="utf-8")


def test_a_gated_policy_and_its_approved_successor_are_both_kept(setup, ws) -> None:
    _, worker, worker_dir = setup
    approvals = InMemoryApprovals()
    stage = TaskGovernanceStage(ws.root, approvals=ApprovalResolver(approvals))
    inp = GovernanceInput(
        Tenant(tenant_id="acme", trust_level=2), worker, duty_id="triage", requested_actions=("send",)
    )
    gated = stage.evaluate(inp)
    assert gated.gate_ref == gated.manifest.policy_ref
    assert len(files(worker_dir / POLICY_DIR)) == 1
    approvals.add(Approval("c-1", "acme", "w", "approved", gated.gate_ref))
    approved = stage.evaluate(dataclasses.replace(inp, approval_ref="c-1"))
    assert files(worker_dir / POLICY_DIR) == sorted(f"{o.manifest.policy_ref[-12:]}.json" for o in (gated, approved))
    snapshot = stage.snapshots.load_policy("acme", "w", approved.manifest.policy_ref)
    assert (snapshot.inputs.approval_ref, snapshot.inputs.gated_policy_ref) == ("c-1", gated.gate_ref)
    assert snapshot.decision.posture == "gated_execute"


def test_the_contract_snapshot(setup) -> None:
    outcome = run(setup, source_type="task", duty_id="triage")
    ref = outcome.manifest.contract_snapshot_ref
    assert ref is not None
    assert ref.startswith(f"{CONTRACT_DIR}/triage/2026.10-") and ref.endswith(".json")
    data = json.loads((setup[2] / ref).read_text(encoding="utf-8"))
    assert data["kind"] == "duty_contract"
    assert data["contract"]["version"] == "2026.10"
    assert data["contract"]["sla"] == {"respond_within": "15m"}
    assert data["process_step"] == {"process_id": "mail", "step_id": "triage", "step_name": ""}
    assert data["duty_file"] == "tenants/acme/workers/w/duties/triage.md"
    run(setup, source_type="event", duty_id="triage", trigger_id="new-mail")
    assert len(files(setup[2] / CONTRACT_DIR)) == 1
    assert run(setup, source_type="chat").manifest.contract_snapshot_ref is None


def test_an_edited_contract_gets_a_new_snapshot(setup, ws) -> None:
    first = run(setup, source_type="task", duty_id="triage").manifest.contract_snapshot_ref
    ws.duty("triage", DUTY.replace("15m", "30m"))
    worker, _ = ws.load_worker()
    stage = setup[0]
    outcome = stage.evaluate(GovernanceInput(Tenant(tenant_id="acme", trust_level=2), worker, duty_id="triage"))
    assert outcome.manifest.contract_snapshot_ref != first
    assert len(files(setup[2] / CONTRACT_DIR)) == 2


def test_a_version_that_is_not_a_safe_file_name(setup) -> None:
    ref = run(setup, source_type="task", duty_id="odd-version").manifest.contract_snapshot_ref
    assert ref is not None
    name = ref.rsplit("/", 1)[-1]
    assert name.startswith("v1_2_") and "/" not in name and ".." not in name


def test_read_back_by_ref_and_by_path(setup) -> None:
    stage = setup[0]
    outcome = run(setup, source_type="task", duty_id="triage")
    by_ref = stage.snapshots.load_policy("acme", "w", outcome.manifest.policy_ref)
    by_path = stage.snapshots.load_policy("acme", "w", outcome.manifest.policy_snapshot_ref)
    assert by_ref == by_path
    assert isinstance(by_ref, PolicySnapshot)
    assert policy_ref(by_ref) == outcome.manifest.policy_ref
    assert by_ref.decision.action == outcome.decision.action
    contract = stage.snapshots.load_contract("acme", "w", outcome.manifest.contract_snapshot_ref)
    assert contract.contract["version"] == "2026.10"


def test_a_tampered_snapshot_is_refused(setup) -> None:
    stage = setup[0]
    outcome = run(setup)
    path = setup[2] / outcome.manifest.policy_snapshot_ref
    data = json.loads(path.read_text(encoding="utf-8"))
    data["decision"]["action"] = "auto" if data["decision"]["action"] != "auto" else "gated"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(SnapshotError, match="content does not match its name"):
        stage.snapshots.load_policy("acme", "w", outcome.manifest.policy_ref)


def test_an_unknown_schema_version_is_refused(setup) -> None:
    stage = setup[0]
    outcome = run(setup)
    path = setup[2] / outcome.manifest.policy_snapshot_ref
    data = json.loads(path.read_text(encoding="utf-8"))
    data["schema_version"] = 2
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(SnapshotError, match="schema_version: Value error, unknown schema_version 2"):
        stage.snapshots.load_policy("acme", "w", outcome.manifest.policy_ref)


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("snapshot:policy:0123456789ab", "no such snapshot"),
        ("snapshot:policy:../../etc", "not a snapshot reference"),
        ("snapshot:policy:ABC", "not a snapshot reference"),
    ],
)
def test_bad_policy_refs(setup, ref: str, message: str) -> None:
    with pytest.raises(SnapshotError, match=message):
        setup[0].snapshots.load_policy("acme", "w", ref)


def test_bad_contract_refs(setup) -> None:
    with pytest.raises(SnapshotError, match="starts with runtime/contract_snapshots/duties/"):
        setup[0].snapshots.load_contract("acme", "w", "../TENANT.json")
    with pytest.raises(SnapshotError, match="is not a valid id"):
        setup[0].snapshots.load_contract("acme", "w", f"{CONTRACT_DIR}/../x/1-0123456789ab.json")
