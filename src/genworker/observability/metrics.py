"""Prometheus metrics: one process-wide registry and the plain functions code calls to update it.

Callers never touch prometheus_client: they call `record_*` with small, bounded label values
(states, tiers, model names, tool names, platforms). Tenant and worker ids are never labels, so
the `/metrics` page shows counts only. Gauges that describe stored state (inbox backlog, waiting
plans) are read at scrape time by a collector registered with `register_collector`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

__all__ = [
    "CHANNEL_UNDELIVERED",
    "COMPONENT_STATUS",
    "CONTENT_TYPE",
    "CONTEXT_SPACES",
    "INBOX_ITEMS",
    "LONG_CONNECTIONS",
    "LONG_CONNECTION_LAST_EVENT",
    "READY",
    "REGISTRY",
    "SCRAPE_TIME_GAUGES",
    "WORKERS",
    "GaugeSample",
    "record_channel_delivery",
    "record_channel_redelivery",
    "record_dead_letter",
    "record_gate_result",
    "record_heartbeat",
    "record_llm_call",
    "record_long_connection_reconnect",
    "record_run_state",
    "record_space_created",
    "record_space_route",
    "record_space_route_error",
    "record_space_task",
    "record_tool_call",
    "record_waiting_plan",
    "record_webhook_verification_failure",
    "register_collector",
    "render",
    "unregister_collector",
]

log = logging.getLogger("genworker.observability")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# the *_created series would double the page, and nothing alerts on them
disable_created_metrics()  # type: ignore[no-untyped-call]
REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)
GCCollector(registry=REGISTRY)

_LLM_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0, 120.0)

RUNS = Counter("genworker_runs", "Task runs entering each state.", ["state"], registry=REGISTRY)
GATE_RESULTS = Counter(
    "genworker_gate_results",
    "Governance gate decisions (auto, brief, confirm, blocked).",
    ["result"],
    registry=REGISTRY,
)
LLM_CALLS = Counter(
    "genworker_llm_calls",
    "Model calls by tier, model and outcome (ok, error).",
    ["tier", "model", "outcome"],
    registry=REGISTRY,
)
LLM_SECONDS = Histogram(
    "genworker_llm_call_duration_seconds",
    "Model call latency, first byte to last chunk included.",
    ["tier", "model"],
    buckets=_LLM_BUCKETS,
    registry=REGISTRY,
)
LLM_TOKENS = Counter("genworker_llm_tokens", "Tokens used (prompt + completion).", ["tier", "model"], registry=REGISTRY)
LLM_COST = Counter(
    "genworker_llm_cost_usd", "Model cost in USD where the price is known.", ["tier", "model"], registry=REGISTRY
)
TOOL_CALLS = Counter("genworker_tool_calls", "Tool calls by tool and outcome.", ["tool", "outcome"], registry=REGISTRY)
CHANNEL_DELIVERIES = Counter(
    "genworker_channel_deliveries",
    "Outbound channel messages by platform and outcome (ok, failed).",
    ["platform", "outcome"],
    registry=REGISTRY,
)
CHANNEL_REDELIVERIES = Counter(
    "genworker_channel_redeliveries",
    "IM answers the vendor would not take: scheduled again, delivered late, given up, re-sent by a person.",
    ["platform", "outcome"],
    registry=REGISTRY,
)
WEBHOOK_VERIFICATION_FAILURES = Counter(
    "genworker_webhook_verification_failures",
    "Inbound webhooks rejected by a verification check.",
    ["platform", "check"],
    registry=REGISTRY,
)
LONG_CONNECTION_RECONNECTS = Counter(
    "genworker_channel_long_connection_reconnects",
    "IM long connections (Slack Socket Mode, Feishu/Lark, DingTalk Stream) made again after one was lost.",
    ["platform"],
    registry=REGISTRY,
)
HEARTBEATS = Counter(
    "genworker_heartbeat_runs", "Heartbeat ticks by outcome (ran, silent, failed).", ["outcome"], registry=REGISTRY
)
DEAD_LETTERS = Counter("genworker_dead_letters", "Inbox items moved to the dead-letter state.", registry=REGISTRY)
WAITING_PLANS = Counter(
    "genworker_waiting_plans",
    "Waiting plans by event (started, resumed, timed_out, cancelled).",
    ["event"],
    registry=REGISTRY,
)
CONTEXT_SPACE_ROUTES = Counter(
    "genworker_context_space_routes",
    "Sensed facts routed into context spaces, by path (anchor, model, new, new_pending, resurrected).",
    ["path"],
    registry=REGISTRY,
)
CONTEXT_SPACE_ROUTE_SECONDS = Histogram(
    "genworker_context_space_route_duration_seconds",
    "Time to route one fact into a context space, the model's answer included.",
    ["path"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0),
    registry=REGISTRY,
)
CONTEXT_SPACE_ROUTE_ERRORS = Counter(
    "genworker_context_space_route_errors",
    "Context-space routes the model did not answer usably (unusable_answer) or could not (model_unavailable).",
    ["kind"],
    registry=REGISTRY,
)
CONTEXT_SPACES_CREATED = Counter(
    "genworker_context_space_creations", "Context spaces created (their growth rate).", registry=REGISTRY
)
CONTEXT_SPACE_TASKS = Counter(
    "genworker_context_space_tasks", "Task candidates context spaces handed to the task path.", registry=REGISTRY
)

_HEARTBEAT_OUTCOMES = frozenset({"ran", "silent", "failed"})
_SPACE_PATHS = frozenset({"anchor", "model", "new", "new_pending", "resurrected"})
_SPACE_ERRORS = frozenset({"unusable_answer", "model_unavailable"})
_REDELIVERY_OUTCOMES = frozenset({"scheduled", "delivered", "given_up", "resent"})


def record_run_state(state: str) -> None:
    RUNS.labels(state=state).inc()


def record_gate_result(result: str) -> None:
    GATE_RESULTS.labels(result=result).inc()


def record_llm_call(tier: str, model: str, seconds: float, ok: bool, tokens: int, cost: float) -> None:
    model = model or "unknown"
    LLM_CALLS.labels(tier=tier, model=model, outcome="ok" if ok else "error").inc()
    LLM_SECONDS.labels(tier=tier, model=model).observe(max(seconds, 0.0))
    if tokens > 0:
        LLM_TOKENS.labels(tier=tier, model=model).inc(tokens)
    if cost > 0:
        LLM_COST.labels(tier=tier, model=model).inc(cost)


def record_tool_call(tool: str, outcome: str) -> None:
    TOOL_CALLS.labels(tool=tool, outcome=outcome).inc()


def record_channel_delivery(platform: str, ok: bool) -> None:
    CHANNEL_DELIVERIES.labels(platform=platform, outcome="ok" if ok else "failed").inc()


def record_channel_redelivery(platform: str, outcome: str) -> None:
    if outcome not in _REDELIVERY_OUTCOMES:
        raise ValueError(f"redelivery outcome {outcome!r}: expected one of {', '.join(sorted(_REDELIVERY_OUTCOMES))}")
    CHANNEL_REDELIVERIES.labels(platform=platform, outcome=outcome).inc()


def record_webhook_verification_failure(platform: str, check: str) -> None:
    WEBHOOK_VERIFICATION_FAILURES.labels(platform=platform, check=check).inc()


def record_long_connection_reconnect(platform: str) -> None:
    LONG_CONNECTION_RECONNECTS.labels(platform=platform).inc()


def record_heartbeat(outcome: str) -> None:
    if outcome not in _HEARTBEAT_OUTCOMES:
        raise ValueError(f"heartbeat outcome {outcome!r}: expected one of {', '.join(sorted(_HEARTBEAT_OUTCOMES))}")
    HEARTBEATS.labels(outcome=outcome).inc()


def record_dead_letter() -> None:
    DEAD_LETTERS.inc()


def record_waiting_plan(event: str) -> None:
    WAITING_PLANS.labels(event=event).inc()


def record_space_route(path: str, seconds: float) -> None:
    if path not in _SPACE_PATHS:
        raise ValueError(f"space route path {path!r}: expected one of {', '.join(sorted(_SPACE_PATHS))}")
    CONTEXT_SPACE_ROUTES.labels(path=path).inc()
    CONTEXT_SPACE_ROUTE_SECONDS.labels(path=path).observe(max(seconds, 0.0))


def record_space_route_error(kind: str) -> None:
    if kind not in _SPACE_ERRORS:
        raise ValueError(f"space route error {kind!r}: expected one of {', '.join(sorted(_SPACE_ERRORS))}")
    CONTEXT_SPACE_ROUTE_ERRORS.labels(kind=kind).inc()


def record_space_created() -> None:
    CONTEXT_SPACES_CREATED.inc()


def record_space_task() -> None:
    CONTEXT_SPACE_TASKS.inc()


# --- scrape-time gauges -------------------------------------------------------------------------

GaugeSample = tuple[str, str, tuple[tuple[str, str], ...], float]  # (name, help, labels, value)
# computed by the /metrics route from the running runtime at each scrape
INBOX_ITEMS = "genworker_inbox_items"
WORKERS = "genworker_workers"
COMPONENT_STATUS = "genworker_component_status"
READY = "genworker_ready"
CHANNEL_UNDELIVERED = "genworker_channel_replies_undelivered"  # from the channel processor
LONG_CONNECTIONS = "genworker_channel_long_connections"  # from the long connections' states
LONG_CONNECTION_LAST_EVENT = "genworker_channel_long_connection_last_event_timestamp_seconds"
CONTEXT_SPACES = "genworker_context_spaces"  # context_space_count_by_state, from the spaces service
SCRAPE_TIME_GAUGES: dict[str, tuple[str, ...]] = {  # name: label names
    INBOX_ITEMS: ("state",),
    CHANNEL_UNDELIVERED: ("state", "platform"),
    LONG_CONNECTIONS: ("platform", "status"),
    LONG_CONNECTION_LAST_EVENT: ("platform",),
    CONTEXT_SPACES: ("state",),
    WORKERS: ("status",),
    COMPONENT_STATUS: ("component", "status"),
    READY: (),
}
_sources: dict[str, Callable[[], Iterable[GaugeSample]]] = {}
_sources_lock = threading.Lock()


def _families(samples: Iterable[GaugeSample]) -> list[Metric]:
    families: dict[str, GaugeMetricFamily] = {}
    for name, help_text, labels, value in samples:
        family = families.get(name)
        if family is None:
            family = families[name] = GaugeMetricFamily(name, help_text, labels=[k for k, _ in labels])
        family.add_metric([v for _, v in labels], value)
    return list(families.values())


class _ScrapeTimeGauges(Collector):
    """Gauges computed at scrape time from whatever sources are registered."""

    def collect(self) -> Iterator[Metric]:
        with _sources_lock:
            sources = list(_sources.items())
        samples: list[GaugeSample] = []
        for key, source in sources:
            try:
                samples.extend(source())
            except Exception:  # a failing store must not fail the whole scrape
                log.exception("[Metrics] collector %s failed", key)
        yield from _families(samples)

    def describe(self) -> Iterator[Metric]:
        return iter(())


class _Extra(Collector):
    def __init__(self, samples: Iterable[GaugeSample]) -> None:
        self._metrics = _families(samples)

    def collect(self) -> Iterator[Metric]:
        yield from self._metrics


REGISTRY.register(_ScrapeTimeGauges())


def register_collector(key: str, source: Callable[[], Iterable[GaugeSample]]) -> None:
    """Add (or replace) a scrape-time gauge source; samples of one name must share label names."""
    with _sources_lock:
        _sources[key] = source


def unregister_collector(key: str) -> None:
    with _sources_lock:
        _sources.pop(key, None)


def render(extra: Iterable[GaugeSample] = ()) -> bytes:
    """The Prometheus text exposition of every metric, plus `extra` gauges computed by the caller
    (async stores are read by the /metrics route before it renders)."""
    page = generate_latest(REGISTRY)
    samples = list(extra)
    if not samples:
        return page
    scratch = CollectorRegistry(auto_describe=False)
    scratch.register(_Extra(samples))
    return page + generate_latest(scratch)
