"""The metrics functions update the process registry; the page parses with prometheus_client's parser."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from genworker.autonomy.inbox import FileInboxStore, InboxAggregate, new_item
from genworker.observability import metrics
from genworker.observability.metrics import REGISTRY, GaugeSample


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_each_record_function_moves_its_series() -> None:
    cases = [
        (lambda: metrics.record_run_state("completed"), "genworker_runs_total", {"state": "completed"}, 1.0),
        (lambda: metrics.record_gate_result("confirm"), "genworker_gate_results_total", {"result": "confirm"}, 1.0),
        (lambda: metrics.record_tool_call("web_fetch", "denied"), "genworker_tool_calls_total",
         {"tool": "web_fetch", "outcome": "denied"}, 1.0),
        (lambda: metrics.record_channel_delivery("slack", False), "genworker_channel_deliveries_total",
         {"platform": "slack", "outcome": "failed"}, 1.0),
        (lambda: metrics.record_webhook_verification_failure("feishu", "signature"),
         "genworker_webhook_verification_failures_total", {"platform": "feishu", "check": "signature"}, 1.0),
        (lambda: metrics.record_heartbeat("silent"), "genworker_heartbeat_runs_total", {"outcome": "silent"}, 1.0),
        (metrics.record_dead_letter, "genworker_dead_letters_total", {}, 1.0),
        (lambda: metrics.record_waiting_plan("timed_out"), "genworker_waiting_plans_total",
         {"event": "timed_out"}, 1.0),
    ]  # fmt: skip
    for record, name, labels, step in cases:
        before = sample(name, **labels)
        record()
        assert sample(name, **labels) - before == step, name


def test_llm_calls_count_latency_tokens_cost_and_errors() -> None:
    labels = {"tier": "strong", "model": "unit/model-a"}
    before_ok = sample("genworker_llm_calls_total", outcome="ok", **labels)
    before_err = sample("genworker_llm_calls_total", outcome="error", **labels)
    before_tokens = sample("genworker_llm_tokens_total", **labels)
    before_cost = sample("genworker_llm_cost_usd_total", **labels)
    before_slow = sample("genworker_llm_call_duration_seconds_bucket", le="1.0", **labels)
    metrics.record_llm_call("strong", "unit/model-a", 0.3, True, 120, 0.002)
    metrics.record_llm_call("strong", "unit/model-a", 9.0, False, 0, 0.0)
    assert sample("genworker_llm_calls_total", outcome="ok", **labels) - before_ok == 1
    assert sample("genworker_llm_calls_total", outcome="error", **labels) - before_err == 1
    assert sample("genworker_llm_tokens_total", **labels) - before_tokens == 120
    assert sample("genworker_llm_cost_usd_total", **labels) - before_cost == pytest.approx(0.002)
    assert sample("genworker_llm_call_duration_seconds_bucket", le="1.0", **labels) - before_slow == 1


def test_an_unknown_heartbeat_outcome_is_refused_with_the_allowed_ones() -> None:
    with pytest.raises(ValueError, match=r"'ok'.*failed, ran, silent"):
        metrics.record_heartbeat("ok")


@pytest.fixture
def source() -> Iterator[str]:
    key = "unit-test-source"
    yield key
    metrics.unregister_collector(key)


def test_the_page_parses_and_carries_scrape_time_gauges(source: str) -> None:
    def backlog() -> list[GaugeSample]:
        return [
            ("genworker_unit_backlog", "A test gauge.", (("state", "pending"),), 3.0),
            ("genworker_unit_backlog", "A test gauge.", (("state", "dead"),), 1.0),
        ]

    metrics.register_collector(source, backlog)
    extra: list[GaugeSample] = [("genworker_unit_extra", "Computed by the caller.", (), 7.0)]
    page = metrics.render(extra).decode()
    families = {f.name: f for f in text_string_to_metric_families(page)}
    assert {s.labels["state"]: s.value for s in families["genworker_unit_backlog"].samples} == {
        "pending": 3.0,
        "dead": 1.0,
    }
    assert families["genworker_unit_extra"].samples[0].value == 7.0
    assert families["genworker_runs"].type == "counter"
    assert "_created" not in page


def test_a_failing_source_leaves_the_rest_of_the_page(source: str, caplog: pytest.LogCaptureFixture) -> None:
    def broken() -> list[GaugeSample]:
        raise OSError("store unreachable")

    metrics.register_collector(source, broken)
    page = metrics.render().decode()
    assert "genworker_runs_total" in page or "# TYPE genworker_runs_total counter" in page
    assert "collector unit-test-source failed" in caplog.text


def test_dead_letters_are_counted_and_logged_once_by_the_inbox_aggregate(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def go() -> None:
        aggregate = InboxAggregate(FileInboxStore(tmp_path))
        await FileInboxStore(tmp_path).write(new_item("acme", "alice", "webhook", "hooks", "webhook.fact", {}))
        (claimed,) = await aggregate.claim("acme", "alice", "me", limit=1)
        await aggregate.fail(claimed, "me", "the mail server said no", retry=False)

    before = sample("genworker_dead_letters_total")
    with caplog.at_level("INFO", logger="genworker.inbox"):
        asyncio.run(go())
    assert sample("genworker_dead_letters_total") - before == 1
    (line,) = [r for r in caplog.records if getattr(r, "decision", None) == "inbox.dead_letter"]
    assert (line.tenant_id, line.worker_id, line.error) == ("acme", "alice", "the mail server said no")  # type: ignore[attr-defined]


def test_the_metrics_module_is_a_leaf_any_component_can_import() -> None:
    probe = (
        "import sys, genworker.observability.metrics; "
        "print(sorted(m for m in sys.modules if m.startswith('genworker')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, encoding="utf-8", check=True, timeout=60
    ).stdout
    assert out.strip() == "['genworker', 'genworker.observability', 'genworker.observability.metrics']"
