"""The worker dashboard: the aggregator behind `GET /api/v1/workers/{w}/dashboard`, its blocks, the
session cookie the page logs in with, and the static page itself (`static/`, no build step)."""

from __future__ import annotations

from importlib.resources import files
from importlib.resources.abc import Traversable

from genworker.dashboard import blocks_outbox, blocks_spaces, blocks_work, blocks_worker
from genworker.dashboard.aggregator import Block, BlockContext, BlockUnavailable, DashboardAggregator

__all__ = ["Block", "BlockContext", "BlockUnavailable", "DashboardAggregator", "default_aggregator", "static_dir"]


def default_aggregator(timeout_s: float = 5.0) -> DashboardAggregator:
    """Every block of the page, in page order."""
    return DashboardAggregator(
        [
            Block("load_errors", blocks_worker.load_errors),
            Block("workers", blocks_worker.workers),
            Block("profile", blocks_worker.profile),
            Block("pending", blocks_work.pending),
            Block("outbox", blocks_outbox.outbox),
            Block("suggestions", blocks_work.suggestions),
            Block("tasks", blocks_work.tasks),
            Block("calendar", blocks_worker.calendar),
            Block("goals", blocks_worker.goals),
            Block("activity", blocks_work.activity),
            Block("runs", blocks_work.runs),
            Block("capabilities", blocks_worker.capabilities),
            Block("channels", blocks_worker.channels),
            Block("briefs", blocks_worker.briefs),
            Block("decisions", blocks_work.decisions),
            Block("spaces", blocks_spaces.spaces),
        ],
        timeout_s=timeout_s,
    )


def static_dir() -> Traversable:
    return files("genworker.dashboard").joinpath("static")
