"""JSON lines files are split on "\\n" only: a text holding U+0085, U+2028 or U+2029 (which JSON keeps
unescaped and `str.splitlines()` splits on) reads back whole, in every store that writes JSON lines."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from genworker.autonomy.duties.store import DutyStore, ExecutionRecord
from genworker.autonomy.suggestions.store import FeedbackStore
from genworker.memory.candidates import CandidateStore
from genworker.memory.crosschannel import CrossChannelOffer, OfferStore
from genworker.memory.models import Scope
from genworker.memory.preferences import StatementStore
from genworker.tools.journal import StepJournal

SEPARATORS = ["\u0085", "\u2028", "\u2029"]
T0 = datetime(2026, 5, 1, 9, tzinfo=UTC)


@pytest.fixture(params=SEPARATORS, ids=["NEL", "LS", "PS"])
def text(request: pytest.FixtureRequest) -> str:
    return f"first{request.param}second"


@pytest.mark.parametrize("kind", ["preference", "decision"])
def test_statements(tmp_path: Path, text: str, kind: Any) -> None:
    store = StatementStore(tmp_path, kind)
    store.add("tone", text, Scope.parse("conversation:t1"))
    store.add("format", "tables", Scope.parse("conversation:t1"))
    assert [s.value for s in StatementStore(tmp_path, kind).all()] == [text, "tables"]


def test_candidates(tmp_path: Path, text: str) -> None:
    CandidateStore(tmp_path).propose(text)
    assert [c.text for c in CandidateStore(tmp_path).pending()] == [text]


def test_cross_channel_offers(tmp_path: Path, text: str) -> None:
    offer = CrossChannelOffer(
        offer_id="xco_1",
        thread_id="t1",
        other_thread_id="t2",
        other_channel="slack",
        summary=text,
        question="Bring it in?",
        created_at=T0,
    )
    OfferStore(tmp_path).add(offer)
    assert [o.summary for o in OfferStore(tmp_path).pending("t1")] == [text]


def test_feedback(tmp_path: Path, text: str) -> None:
    store = FeedbackStore(tmp_path)
    store.add("acme", "alice", text, "im:dana")
    store.add("acme", "alice", "Use tables", "key:k1")
    assert [f["text"] for f in store.list("acme", "alice")] == ["Use tables", text]
    assert [f["text"] for f in store.list("acme", "alice", limit=1)] == ["Use tables"]


def test_duty_executions(tmp_path: Path, text: str) -> None:
    store = DutyStore(tmp_path)
    record = ExecutionRecord(
        duty_id="nightly",
        trigger_id="m",
        trigger_type="manual",
        scheduled_for=T0,
        key=text,
        run_id="run-1",
        state="completed",
        fired_at=T0,
    )
    store.append("acme", "alice", record, timedelta(days=30))
    assert [r.key for r in store.executions("acme", "alice", "nightly")] == [text]


def test_step_journal(tmp_path: Path, text: str) -> None:
    journal = StepJournal(tmp_path)
    journal.started("acme", "alice", "run-1", "call-1", text)
    journal.started("acme", "alice", "run-1", "call-2", "web_search")
    assert [(s.call_id, s.tool) for s in journal.unfinished("acme", "alice", "run-1")] == [
        ("call-1", text),
        ("call-2", "web_search"),
    ]


def test_contact_index(ws: Any, text: str) -> None:
    ws.persona()
    ws.write("tenants/acme/workers/w/contacts/configured/dana.md", "---\nperson_id: dana\nname: Dana\n---\n")
    ws.write("tenants/acme/workers/w/contacts/index.jsonl", f'{{"person_id": "dana", "name": "{text}"}}\n')
    worker, _ = ws.load_worker()
    assert list(worker.contacts) == ["dana"]
