"""Interruption budget and briefs (Steward): a few real-time interruptions a day, everything else
in a brief every few hours, each item with options. File backend by default, Redis when
REDIS_URL is set. docs/briefs.md describes them."""

from genworker.autonomy.briefs.budget import Admission, in_quiet_hours, local_day
from genworker.autonomy.briefs.done import DoneSource, done_runs, held_calls, held_results, joined
from genworker.autonomy.briefs.file_store import FileBriefStore
from genworker.autonomy.briefs.models import (
    SCHEMA_VERSION,
    SECTIONS,
    Brief,
    BriefError,
    BriefItem,
    BriefNotFound,
    BudgetDay,
    Option,
    Section,
)
from genworker.autonomy.briefs.redis_store import RedisBriefStore
from genworker.autonomy.briefs.render import render_brief, render_item
from genworker.autonomy.briefs.service import BriefService, LearnedBriefs, ListSource, Review
from genworker.autonomy.briefs.sink import BriefSink, ChannelBriefSink
from genworker.autonomy.briefs.store import BriefStore

__all__ = [
    "SCHEMA_VERSION",
    "SECTIONS",
    "Admission",
    "Brief",
    "BriefError",
    "BriefItem",
    "BriefNotFound",
    "BriefService",
    "BriefSink",
    "BriefStore",
    "BudgetDay",
    "ChannelBriefSink",
    "DoneSource",
    "FileBriefStore",
    "LearnedBriefs",
    "ListSource",
    "Option",
    "RedisBriefStore",
    "Review",
    "Section",
    "done_runs",
    "held_calls",
    "held_results",
    "in_quiet_hours",
    "joined",
    "local_day",
    "render_brief",
    "render_item",
]
