"""The re-send schedule of undelivered IM answers, its settings, and journal entries written before it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from genworker.channels.ingest import redelivery_policy
from genworker.channels.ingest.journal import EventJournal
from genworker.delivery.redelivery import RedeliveryPolicy
from genworker.settings import SettingsError, load_settings


def test_the_backoff_doubles_to_an_hour_and_gives_up_after_three_days() -> None:
    policy = RedeliveryPolicy()
    assert [policy.delay(n) for n in (1, 2, 3, 4, 8, 20)] == [30, 60, 120, 240, 3600, 3600]
    assert not policy.gives_up(first_failed_at=0, now=3 * 86_400 - 1)
    assert policy.gives_up(first_failed_at=0, now=3 * 86_400)


def test_the_schedule_comes_from_settings_and_a_bad_value_names_its_key(tmp_path: Path) -> None:
    env = {"GENWORKER_CHANNEL_RETRY_BASE_S": "5", "GENWORKER_CHANNEL_RETRY_HORIZON_S": "600"}
    policy = redelivery_policy(load_settings(tmp_path, env).number)
    assert (policy.base_s, policy.max_s, policy.horizon_s) == (5, 3600, 600)
    with pytest.raises(SettingsError, match="GENWORKER_CHANNEL_RETRY_MAX_S"):
        redelivery_policy(load_settings(tmp_path, {"GENWORKER_CHANNEL_RETRY_MAX_S": "soon"}).number)


def test_entries_of_schema_1_are_read_and_unknown_versions_refused(tmp_path: Path) -> None:
    folder = tmp_path / "tenants/acme/workers/w/runtime/channels/journal"
    folder.mkdir(parents=True)
    message = {
        "platform": "slack", "adapter_id": "acme~w~slack", "tenant_id": "acme", "worker_id": "w", "event_id": "D1:1",
        "chat_id": "D1", "chat_type": "p2p", "sender_id": "U1", "text": "hi", "received_at": "2026-01-01T00:00:00Z",
    }  # fmt: skip
    old = folder / "00000000000000000001-aaaaaaaa.json"
    old.write_text(json.dumps({"schema_version": 1, "attempts": 1, "answer": "Hi.", "message": message}), "utf-8")
    entry = EventJournal(tmp_path).read(old)
    assert (entry.attempts, entry.answer, entry.delivery, entry.message.event_id) == (1, "Hi.", None, "D1:1")
    future = folder / "00000000000000000002-bbbbbbbb.json"
    future.write_text(json.dumps({"schema_version": 9, "message": message}), "utf-8")
    with pytest.raises(ValueError, match="unknown schema_version 9"):
        EventJournal(tmp_path).read(future)
