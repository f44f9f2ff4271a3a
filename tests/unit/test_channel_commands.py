"""IM commands: parsing, who may decide, and the answers for unknown / already decided ids.

The backend here is a hand-written recorder: the real AutonomyCommandBackend needs the whole
router and autonomy stores and is tested by its own suite; this file tests the command layer."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from genworker.channels.base import ChannelMessage
from genworker.channels.commands import CommandBackend, approvers, handle_command, parse
from genworker.workspace.registry import WorkspaceRegistry
from genworker.workspace.snapshot import Worker

PERSONA = """---
identity: {name: W, worker_id: w}
channels:
  - {type: slack, features: {approvers: [U_LEAD]}}
contacts:
  - person_id: boss
    name: The Boss
    tags: [owner]
    identities: [{channel: slack, handle: U_BOSS}, {channel: feishu, handle: ou_boss}]
  - person_id: peer
    name: A Peer
    identities: [{channel: slack, handle: U_PEER}]
---
Be helpful.
"""


class RecordingBackend:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def confirmations(self, tenant_id: str, worker_id: str) -> list[dict[str, Any]]:
        return [{"id": "cf_1", "text": "send the invoice", "created_at": "2026-01-01T00:00:00Z", "reasons": []}]

    async def decide_confirmation(
        self, tenant_id: str, worker_id: str, confirmation_id: str, decision: str, by: str
    ) -> dict[str, Any]:
        if confirmation_id == "gone":
            raise LookupError(confirmation_id)
        if confirmation_id == "done":
            raise ValueError("confirmation done is already approved")
        self.calls.append(("confirmation", confirmation_id, decision, by))
        return {"id": confirmation_id, "status": decision}

    def suggestions(self, tenant_id: str, worker_id: str) -> list[dict[str, Any]]:
        return []

    def decide_suggestion(
        self, tenant_id: str, worker_id: str, suggestion_id: str, decision: str, by: str
    ) -> dict[str, Any]:
        self.calls.append(("suggestion", suggestion_id, decision, by))
        return {"id": suggestion_id}

    def feedback(self, tenant_id: str, worker_id: str, text: str, by: str) -> None:
        self.calls.append(("feedback", text, by))

    def status(self, tenant_id: str, worker_id: str) -> dict[str, Any]:
        return {"runs_active": 0, "goals": 2}

    async def deferred(self, tenant_id: str, worker_id: str) -> list[dict[str, Any]]:
        return [{"id": "undo_1", "tool": "mail__notify", "execute_at": "2026-01-01T00:01:00+00:00"}]

    async def undo(self, tenant_id: str, worker_id: str, undo_id: str, by: str) -> dict[str, Any]:
        if undo_id == "undo_sent":
            raise ValueError("undo_sent is already executed: too late to undo")
        self.calls.append(("undo", undo_id, by))
        return {"id": undo_id, "state": "undone"}

    async def waits(self, tenant_id: str, worker_id: str) -> list[dict[str, Any]]:
        return [
            {"id": "wait_1", "match_key": "github:pr:42:merged", "state": "waiting",
             "expires_at": "2026-01-02T00:00:00+00:00", "title": "the merge first"},
            {"id": "wait_2", "match_key": "ci:build:7:passed", "state": "gated",
             "expires_at": "2026-01-01T00:00:00+00:00", "title": ""},
        ]  # fmt: skip

    async def cancel_wait(self, tenant_id: str, worker_id: str, plan_id: str, by: str) -> dict[str, Any]:
        return self._wait("cancel_wait", plan_id, by)

    async def resume_wait(self, tenant_id: str, worker_id: str, plan_id: str, by: str) -> dict[str, Any]:
        return self._wait("resume_wait", plan_id, by)

    async def conflicts(self, tenant_id: str, worker_id: str) -> list[dict[str, Any]]:
        return [{"id": "cc_1", "resource_key": "github:issue:42", "detail": "plans a and b both change it"}]

    async def resolve_conflict(
        self, tenant_id: str, worker_id: str, conflict_id: str, decision: str, by: str
    ) -> dict[str, Any]:
        if conflict_id == "cc_done":
            raise ValueError("conflict cc_done is already resolved (proceed)")
        self.calls.append(("conflict", conflict_id, decision, by))
        return {"id": conflict_id, "decision": decision}

    async def policy(self, tenant_id: str, worker_id: str) -> dict[str, Any]:
        versions = [
            {"version": 1, "status": "rolled_back", "changes": [{"action": "label_issue", "gate": "confirm"}]},
            {"version": 2, "status": "active", "changes": [{"action": "close_issue", "gate": "auto"}]},
        ]
        return {"policy_version": 2, "frozen": None, "rules": {"close_issue": "auto"}, "versions": versions}

    async def rollback_policy(self, tenant_id: str, worker_id: str, by: str) -> dict[str, Any]:
        self.calls.append(("rollback_policy", by))
        return {"version": 2, "status": "rolled_back", "changes": "close_issue -> auto"}

    async def unfreeze_learning(self, tenant_id: str, worker_id: str, by: str) -> None:
        raise ValueError("learning is not frozen")

    def _wait(self, action: str, plan_id: str, by: str) -> dict[str, Any]:
        if plan_id == "wait_gone":
            raise LookupError(plan_id)
        if plan_id == "wait_done":
            raise ValueError("plan wait_done is done: only waiting or gated plans can be cancelled")
        self.calls.append((action, plan_id, by))
        return {"id": plan_id}


@pytest.fixture
def worker(write_tree: Callable[[Mapping[str, str]], Path]) -> Worker:
    root = write_tree(
        {
            "tenants/acme/TENANT.json": '{"tenant_id": "acme", "name": "acme", "trust_level": 2}',
            "tenants/acme/workers/w/PERSONA.md": PERSONA,
        }
    )
    registry = WorkspaceRegistry(root, product_skills=None)
    registry.load_all()
    loaded = registry.worker("acme", "w")
    assert loaded is not None, registry.issues()
    return loaded


def message(text: str, sender: str) -> ChannelMessage:
    return ChannelMessage(
        "slack", "acme~w~slack", "acme", "w", "C1:1", "C1", "group", sender, text, "2026-01-01T00:00:00+00:00"
    )


def run(text: str, sender: str, worker: Worker, backend: CommandBackend | None) -> str:
    command = parse(text)
    assert command is not None
    allowed = approvers(worker, "slack", {"approvers": ["U_LEAD"]})
    return asyncio.run(handle_command(command, message(text, sender), allowed, backend)).text


def test_parse_only_known_commands() -> None:
    assert parse("/help") is not None
    cmd = parse("  /APPROVE_CONFIRMATION@genworker   cf_1  ")
    assert cmd is not None and (cmd.name, cmd.argument) == ("approve_confirmation", "cf_1")
    assert parse("/tmp is full again") is None  # an unknown /word is a normal message
    assert parse("please /help me") is None


def test_approvers_come_from_channel_features_and_owner_contacts(worker: Worker) -> None:
    assert approvers(worker, "slack", {"approvers": ["U_LEAD"]}) == {"U_LEAD", "U_BOSS"}
    assert approvers(worker, "feishu", {}) == {"ou_boss"}


def test_only_approvers_decide(worker: Worker) -> None:
    backend = RecordingBackend()
    assert "only this worker's owner" in run("/approve_confirmation cf_1", "U_PEER", worker, backend)
    assert "only this worker's owner" in run("/confirmations", "U_PEER", worker, backend)
    assert backend.calls == []
    assert run("/approve_confirmation cf_1", "U_BOSS", worker, backend) == "Confirmation cf_1 approved."
    assert run("/reject_suggestion sg_2", "U_LEAD", worker, backend) == "Suggestion sg_2 rejected."
    assert backend.calls == [
        ("confirmation", "cf_1", "approve", "slack:U_BOSS"),
        ("suggestion", "sg_2", "reject", "slack:U_LEAD"),
    ]


def test_listing_unknown_and_decided_ids(worker: Worker) -> None:
    backend = RecordingBackend()
    assert "cf_1: send the invoice" in run("/confirmations", "U_BOSS", worker, backend)
    assert run("/suggestions", "U_BOSS", worker, backend) == "Pending suggestions: none."
    assert "No item with id 'gone'" in run("/approve_confirmation gone", "U_BOSS", worker, backend)
    assert "already approved" in run("/approve_confirmation done", "U_BOSS", worker, backend)
    assert run("/approve_confirmation", "U_BOSS", worker, backend).startswith("Usage: /approve_confirmation")


def test_undo_commands_are_for_approvers(worker: Worker) -> None:
    backend = RecordingBackend()
    assert "only this worker's owner" in run("/undo undo_1", "U_PEER", worker, backend)
    assert "undo_1: mail__notify at 2026-01-01T00:01:00+00:00" in run("/deferred", "U_BOSS", worker, backend)
    assert run("/undo undo_1", "U_LEAD", worker, backend) == "Deferred action undo_1 undone: it will not execute."
    assert "too late to undo" in run("/undo undo_sent", "U_BOSS", worker, backend)
    assert run("/undo", "U_BOSS", worker, backend).startswith("Usage: /undo <id>")
    assert backend.calls == [("undo", "undo_1", "slack:U_LEAD")]


def test_wait_commands_are_for_approvers(worker: Worker) -> None:
    backend = RecordingBackend()
    for text in ("/waits", "/cancel_wait wait_1", "/resume_wait wait_1"):
        assert "only this worker's owner" in run(text, "U_PEER", worker, backend)
    listing = run("/waits", "U_BOSS", worker, backend)
    assert listing.splitlines() == [
        "Waiting plans (2):",
        "- wait_1: github:pr:42:merged, times out at 2026-01-02T00:00:00+00:00 - the merge first",
        "- wait_2: ci:build:7:passed, times out at 2026-01-01T00:00:00+00:00 (held: resume or cancel it)",
    ]
    assert run("/cancel_wait wait_1", "U_LEAD", worker, backend) == "Wait wait_1 cancelled."
    assert run("/resume_wait wait_2", "U_BOSS", worker, backend) == "Wait wait_2 resumed: its work continues now."
    assert "No item with id 'wait_gone'; see /confirmations, /suggestions, /deferred, /waits or /conflicts." in run(
        "/cancel_wait wait_gone", "U_BOSS", worker, backend
    )
    assert "Cannot do that: plan wait_done is done" in run("/resume_wait wait_done", "U_BOSS", worker, backend)
    assert run("/cancel_wait", "U_BOSS", worker, backend).startswith("Usage: /cancel_wait <id>")
    assert backend.calls == [("cancel_wait", "wait_1", "slack:U_LEAD"), ("resume_wait", "wait_2", "slack:U_BOSS")]


def test_conflict_commands_are_for_approvers(worker: Worker) -> None:
    backend = RecordingBackend()
    for text in ("/conflicts", "/resolve_conflict cc_1 proceed"):
        assert "only this worker's owner" in run(text, "U_PEER", worker, backend)
    assert run("/conflicts", "U_BOSS", worker, backend).splitlines() == [
        "Conflicts waiting for you (1):",
        "- cc_1: plans a and b both change it",
    ]
    assert run("/resolve_conflict cc_1 proceed", "U_BOSS", worker, backend) == "Conflict cc_1 settled: it proceeds."
    assert run("/resolve_conflict cc_2 drop", "U_LEAD", worker, backend) == "Conflict cc_2 dropped."
    assert run("/resolve_conflict cc_3 maybe", "U_BOSS", worker, backend).startswith("Usage: /resolve_conflict <id>")
    assert "Cannot do that: conflict cc_done is already resolved" in run(
        "/resolve_conflict cc_done drop", "U_BOSS", worker, backend
    )
    assert backend.calls == [
        ("conflict", "cc_1", "proceed", "slack:U_BOSS"),
        ("conflict", "cc_2", "drop", "slack:U_LEAD"),
    ]


def test_learning_commands_are_for_approvers(worker: Worker) -> None:
    backend = RecordingBackend()
    for text in ("/policy", "/rollback_policy", "/unfreeze_learning"):
        assert "only this worker's owner" in run(text, "U_PEER", worker, backend)
    assert run("/policy", "U_BOSS", worker, backend).splitlines() == [
        "Policy version 2 decides",
        "- v1 rolled_back: label_issue -> confirm",
        "- v2 active: close_issue -> auto",
    ]
    assert run("/rollback_policy", "U_LEAD", worker, backend) == (
        "Policy version 2 rolled back (close_issue -> auto): the worker decides as before it."
    )
    assert run("/unfreeze_learning", "U_BOSS", worker, backend) == "Cannot do that: learning is not frozen"
    assert backend.calls == [("rollback_policy", "slack:U_LEAD")]


def test_open_commands(worker: Worker) -> None:
    backend = RecordingBackend()
    assert "/approve_confirmation" in run("/help", "U_PEER", worker, backend)
    assert "goals: 2" in run("/status", "U_PEER", worker, backend)
    assert run("/feedback too verbose", "U_PEER", worker, backend) == "Thanks, feedback recorded."
    assert backend.calls == [("feedback", "too verbose", "slack:U_PEER")]
    assert "not available" in run("/status", "U_PEER", worker, None)
