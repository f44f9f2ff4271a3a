"""Usage over time, for the console's charts: runs and failures per day, tokens and cost per day and
per model tier, and latency percentiles, from the run records of the workers a key may use.

The API layer names the tenant (the key's) and the workers; nothing here reads a request."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any

from genworker.dashboard.blocks_work import router_of
from genworker.dashboard.run_view import model_calls
from genworker.runtime.composition import Runtime
from genworker.worker.task import RunRecord, RunState

__all__ = ["FAILED_STATES", "MAX_DAYS", "RUNS_PER_WORKER", "percentile", "usage", "window_runs"]

MAX_DAYS = 90
RUNS_PER_WORKER = 2000  # newest runs read per worker for one chart request
FAILED_STATES = frozenset({RunState.FAILED, RunState.BUDGET_EXCEEDED, RunState.INTERRUPTED})
PERCENTILES = (50, 90, 99)


def percentile(values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile; None without values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return round(ordered[rank - 1], 1)


async def window_runs(runtime: Runtime, tenant_id: str, workers: Iterable[str], since: datetime) -> list[RunRecord]:
    """Runs of `workers` queued at or after `since`, newest first per worker."""
    tasks = router_of(runtime).tasks
    found: list[RunRecord] = []
    for worker_id in workers:
        runs = await tasks.list_runs(tenant_id, worker_id, limit=RUNS_PER_WORKER)
        found += [r for r in runs if r.timings.queued_at >= since]
    return found


def _day(run: RunRecord) -> date:
    return run.timings.queued_at.astimezone(UTC).date()


def usage(runs: Iterable[RunRecord], *, days: int, now: datetime) -> dict[str, Any]:
    """Per-day series (UTC days, oldest first, every day of the window present) and percentiles."""
    today = now.astimezone(UTC).date()
    day_list = [today - timedelta(days=n) for n in range(days - 1, -1, -1)]
    per_day: dict[date, dict[str, Any]] = {
        d: {"runs": 0, "failed": 0, "tokens": 0, "cost_usd": 0.0, "model_calls": 0} for d in day_list
    }
    per_tier: dict[str, dict[date, dict[str, float]]] = defaultdict(
        lambda: {d: {"tokens": 0, "cost_usd": 0.0} for d in day_list}
    )
    latency: dict[str, list[float]] = defaultdict(list)
    run_ms: list[float] = []
    costed = False
    for run in runs:
        day = per_day.get(_day(run))
        if day is None:
            continue
        day["runs"] += 1
        day["failed"] += run.state in FAILED_STATES
        if run.timings.run_ms is not None:
            run_ms.append(run.timings.run_ms)
        for call in model_calls(run):
            tokens = call.prompt_tokens + call.completion_tokens
            tier = per_tier[call.tier or "unknown"][_day(run)]
            day["tokens"] += tokens
            day["model_calls"] += 1
            tier["tokens"] += tokens
            if call.cost_usd is not None:
                costed = True
                day["cost_usd"] += call.cost_usd
                tier["cost_usd"] += call.cost_usd
            if not call.error:
                latency[call.tier or "unknown"].append(call.latency_ms)
    all_latency = [v for values in latency.values() for v in values]
    return {
        "days": [d.isoformat() for d in day_list],
        "cost_known": costed,  # no model call reported a cost: the cost series are zeros, not "free"
        "per_day": [{"day": d.isoformat(), **v, "cost_usd": round(v["cost_usd"], 6)} for d, v in per_day.items()],
        "per_tier": {
            tier: [
                {"day": d.isoformat(), "tokens": v["tokens"], "cost_usd": round(v["cost_usd"], 6)}
                for d, v in by_day.items()
            ]
            for tier, by_day in sorted(per_tier.items())
        },
        "latency_ms": {
            "model_calls": _percentiles(all_latency),
            "per_tier": {tier: _percentiles(values) for tier, values in sorted(latency.items())},
            "runs": _percentiles(run_ms),
        },
        "totals": {
            "runs": sum(v["runs"] for v in per_day.values()),
            "failed": sum(v["failed"] for v in per_day.values()),
            "tokens": sum(v["tokens"] for v in per_day.values()),
            "model_calls": sum(v["model_calls"] for v in per_day.values()),
            "cost_usd": round(sum(v["cost_usd"] for v in per_day.values()), 6) if costed else None,
        },
    }


def _percentiles(values: Sequence[float]) -> dict[str, Any]:
    return {"count": len(values), **{f"p{p}": percentile(values, p) for p in PERCENTILES}}
