"""Policy and contract snapshots: content-addressed JSON files under the worker's runtime/ folder.

    runtime/policy_snapshots/task_governance/{sha256_12}.json           -> "snapshot:policy:{sha256_12}"
    runtime/contract_snapshots/duties/{duty_id}/{version}-{sha256_12}.json

The name is the first 12 hex digits of the SHA-256 of the canonical JSON (sorted keys, no
spaces), so identical policies share one file and a file edited by hand no longer matches its
name. Files are written once, atomically (temp file, fsync, rename), and carry a
`schema_version`; reading rejects unknown versions. Blocking; callers run it off the loop.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
)

from genworker.ids import InvalidIdError, PathEscapeError, safe_join
from genworker.worker.governance.errors import SnapshotError
from genworker.write_journal import DIRECT, DurableFiles

__all__ = [
    "CONTRACT_DIR",
    "POLICY_DIR",
    "POLICY_REF_PREFIX",
    "SNAPSHOT_SCHEMA_VERSION",
    "ContractSnapshot",
    "PolicyDecisionRecord",
    "PolicyInputs",
    "PolicySnapshot",
    "ReasonRecord",
    "SnapshotStore",
    "digest",
    "policy_ref",
]

SNAPSHOT_SCHEMA_VERSION = 1
POLICY_DIR = "runtime/policy_snapshots/task_governance"
CONTRACT_DIR = "runtime/contract_snapshots/duties"
POLICY_REF_PREFIX = "snapshot:policy:"
_SHA12 = re.compile(r"^[0-9a-f]{12}$")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")

M = TypeVar("M", bound="_SnapshotFile")


class _SnapshotFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int = SNAPSHOT_SCHEMA_VERSION

    @field_validator("schema_version")
    @classmethod
    def _known_version(cls, value: int) -> int:
        if value != SNAPSHOT_SCHEMA_VERSION:
            raise ValueError(f"unknown schema_version {value}; this build reads {SNAPSHOT_SCHEMA_VERSION}")
        return value


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PolicyInputs(_Record):
    """The effective policy inputs. Deliberately no task text, ids of the task or times: equal
    policies must hash equal."""

    trust_level: int
    source_type: str
    source_class: Literal["interactive", "autonomous"]
    goal_id: str | None = None
    goal_status: str | None = None
    duty_id: str | None = None
    duty_status: str | None = None
    bound_via: str = "none"
    binding_problem: str | None = None
    trigger_id: str | None = None
    execution_depth: str | None = None
    duty_posture: str | None = None
    contract_version: str | None = None
    contract_snapshot_ref: str | None = None
    requested_effects: tuple[str, ...] | None = None
    requested_actions: tuple[str, ...] = ()
    sensor_id: str | None = None
    sensor_requires_approval: bool = False
    approval_ref: str | None = None  # set once an approval was considered
    gated_policy_ref: str | None = None  # the gated policy that approval answered
    confidence: float | None = None  # the evidence behind an inferred action
    evidence_sources: tuple[str, ...] = ()

    @model_serializer(mode="wrap")
    def _without_empty_evidence(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Snapshots written before evidence reached the gate have no such fields; leaving them out
        # when empty keeps those files' content hashes (their names) valid.
        data: dict[str, Any] = handler(self)
        if data.get("confidence") is None:
            data.pop("confidence", None)
        if not data.get("evidence_sources"):
            data.pop("evidence_sources", None)
        if data.get("duty_posture") is None:  # likewise for snapshots from before postures
            data.pop("duty_posture", None)
        return data


class ReasonRecord(_Record):
    code: str
    message: str


class PolicyDecisionRecord(_Record):
    action: str
    posture: str
    risk_tier: str
    reversibility: str
    reasons: tuple[ReasonRecord, ...]
    policy_sources: tuple[str, ...]
    gate_result: str | None = None  # the Policy Gate's output
    gate_reasons: tuple[ReasonRecord, ...] = ()
    undo_window_s: int | None = None  # the run's external calls were held this long

    @model_serializer(mode="wrap")
    def _without_empty_gate(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Snapshots written before the Policy Gate (or the undo window) have no such fields; leaving
        # them out when empty keeps those files' content hashes (their names) valid.
        data: dict[str, Any] = handler(self)
        if data.get("gate_result") is None and not data.get("gate_reasons"):
            data.pop("gate_result", None)
            data.pop("gate_reasons", None)
        if data.get("undo_window_s") is None:
            data.pop("undo_window_s", None)
        return data


class PolicySnapshot(_SnapshotFile):
    kind: Literal["task_governance_policy"] = "task_governance_policy"
    table_version: int
    tenant_id: str
    worker_id: str
    inputs: PolicyInputs
    decision: PolicyDecisionRecord


class ContractSnapshot(_SnapshotFile):
    kind: Literal["duty_contract"] = "duty_contract"
    tenant_id: str
    worker_id: str
    duty_id: str
    duty_file: str | None = None
    contract_version: str
    contract: dict[str, Any]
    process_step: dict[str, Any] | None = None


def _canonical(model: BaseModel) -> bytes:
    data = model.model_dump(mode="json")
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def digest(model: BaseModel) -> str:
    """First 12 hex digits of the SHA-256 of the model's canonical JSON."""
    return hashlib.sha256(_canonical(model)).hexdigest()[:12]


def policy_ref(snapshot: PolicySnapshot) -> str:
    return f"{POLICY_REF_PREFIX}{digest(snapshot)}"


def _version_token(version: str) -> str:
    token = _UNSAFE.sub("_", version).replace("..", "_").strip(".") or "unversioned"
    return token[:64]


class SnapshotStore:
    def __init__(self, workspace_root: Path, files: DurableFiles = DIRECT) -> None:
        self._root = workspace_root
        self.files = files  # how writes are made durable (write_journal.py)

    def worker_dir(self, tenant_id: str, worker_id: str) -> Path:
        return safe_join(self._root, "tenants", tenant_id, "workers", worker_id)

    # -- writing ----------------------------------------------------------------------------

    def save_policy(self, snapshot: PolicySnapshot) -> tuple[str, str]:
        """Write once; return (worker-relative path, "snapshot:policy:{sha}")."""
        sha = digest(snapshot)
        rel = f"{POLICY_DIR}/{sha}.json"
        self._write_once(snapshot.tenant_id, snapshot.worker_id, rel, snapshot)
        return rel, f"{POLICY_REF_PREFIX}{sha}"

    def save_contract(self, snapshot: ContractSnapshot) -> str:
        """Write once; return the worker-relative path."""
        rel = f"{CONTRACT_DIR}/{snapshot.duty_id}/{_version_token(snapshot.contract_version)}-{digest(snapshot)}.json"
        self._write_once(snapshot.tenant_id, snapshot.worker_id, rel, snapshot)
        return rel

    def _write_once(self, tenant_id: str, worker_id: str, rel: str, model: BaseModel) -> None:
        path = self._path(tenant_id, worker_id, rel)
        if path.is_file():
            return
        data = json.dumps(model.model_dump(mode="json"), sort_keys=True, indent=2, ensure_ascii=False) + "\n"
        # a racing writer of the same name writes the same bytes: whoever links first wins
        self.files.create_exclusive(path, data.encode("utf-8"), mode=0o644)

    # -- reading ----------------------------------------------------------------------------

    def load_policy(self, tenant_id: str, worker_id: str, ref: str) -> PolicySnapshot:
        """By "snapshot:policy:{sha}" or by its worker-relative path."""
        sha = ref.removeprefix(POLICY_REF_PREFIX) if ref.startswith(POLICY_REF_PREFIX) else _sha_of(ref)
        return self._load(tenant_id, worker_id, f"{POLICY_DIR}/{sha}.json", sha, PolicySnapshot)

    def load_contract(self, tenant_id: str, worker_id: str, rel: str) -> ContractSnapshot:
        if not rel.startswith(f"{CONTRACT_DIR}/"):
            raise SnapshotError(rel, f"a contract snapshot ref starts with {CONTRACT_DIR}/")
        return self._load(tenant_id, worker_id, rel, _sha_of(rel), ContractSnapshot)

    def _load(self, tenant_id: str, worker_id: str, rel: str, sha: str, model: type[M]) -> M:
        if not _SHA12.match(sha):
            raise SnapshotError(rel, "not a snapshot reference (expected 12 lowercase hex digits)")
        path = self._path(tenant_id, worker_id, rel)
        try:
            snapshot = model.model_validate_json(path.read_bytes())
        except FileNotFoundError:
            raise SnapshotError(rel, "no such snapshot") from None
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(file)'}: {e['msg']}" for e in exc.errors())
            raise SnapshotError(rel, problems) from None
        if digest(snapshot) != sha:
            raise SnapshotError(rel, "content does not match its name (changed after it was written)")
        return snapshot

    def _path(self, tenant_id: str, worker_id: str, rel: str) -> Path:
        try:
            return safe_join(self.worker_dir(tenant_id, worker_id), *rel.split("/"))
        except (InvalidIdError, PathEscapeError) as exc:
            raise SnapshotError(rel, str(exc)) from None


def _sha_of(rel: str) -> str:
    stem = rel.rsplit("/", 1)[-1].removesuffix(".json")
    return stem.rsplit("-", 1)[-1]
