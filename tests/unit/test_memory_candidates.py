"""Candidates: proposals wait for a decision; a rejected one leaves only a fingerprint and is never
suggested again; unknown ids and second decisions are clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from genworker.memory.candidates import CandidateStore, fingerprint


def test_a_rejected_candidate_keeps_only_its_fingerprint_and_is_not_suggested_again(tmp_path: Path) -> None:
    store = CandidateStore(tmp_path)
    made = store.propose("Always CC finance on invoices over 10k", kind="rule")
    assert made is not None and made.status == "proposed"
    rejected = store.decide(made.candidate_id, "reject", "owner@acme")
    assert (rejected.status, rejected.text, rejected.decided_by) == ("rejected", "", "owner@acme")
    assert "finance" not in store.file.path.read_text(encoding="utf-8")
    assert store.propose("always cc Finance on invoices over 10k!", kind="rule") is None
    assert store.rejected_fingerprints() == [fingerprint("Always CC finance on invoices over 10k")]


def test_a_pending_duplicate_is_not_proposed_twice(tmp_path: Path) -> None:
    store = CandidateStore(tmp_path)
    assert store.propose("Prefers short answers") is not None
    assert store.propose("prefers short answers.") is None
    assert store.propose("prefers short answers", target="tenant") is not None
    assert len(store.pending()) == 2


def test_decisions_on_unknown_or_decided_candidates_are_clear_errors(tmp_path: Path) -> None:
    store = CandidateStore(tmp_path)
    made = store.propose("A fact")
    assert made is not None
    with pytest.raises(LookupError, match="no memory candidate 'nope'"):
        store.decide("nope", "approve", "me")
    store.decide(made.candidate_id, "approve", "me")
    with pytest.raises(ValueError, match="already approved"):
        store.decide(made.candidate_id, "reject", "me")
    with pytest.raises(ValueError, match="'by' must not be empty"):
        store.decide(made.candidate_id, "reject", " ")
