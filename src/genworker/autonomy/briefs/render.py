"""Brief text in Steward's layout: header, budget line, numbered sections, options under each item."""

from __future__ import annotations

from zoneinfo import ZoneInfo

from genworker.autonomy.briefs.models import SECTION_TITLES, SECTIONS, Brief, BriefItem

__all__ = ["render_brief", "render_item"]


def _tag(item: BriefItem) -> str:
    parts = [p.replace("_", " ").title() for p in (item.risk, item.reversibility) if p]
    if item.section == "waiting":
        parts.insert(0, "Waiting")
    return "".join(f"[{p}]" for p in parts)


def render_item(item: BriefItem) -> str:
    line = f"- {_tag(item)} {item.title}".replace("-  ", "- ", 1)
    lines = [line]
    if item.detail:
        lines.append(f"  {item.detail}")
    if item.options:
        lines.append(
            "  Options: " + " | ".join(f"`{o.command}` ({o.label})" if o.command else o.label for o in item.options)
        )
    return "\n".join(lines)


def render_brief(brief: Brief) -> str:
    zone = ZoneInfo(brief.timezone)
    end = brief.period_end.astimezone(zone)
    start = brief.period_start.astimezone(zone).strftime("%H:%M") if brief.period_start else "(first brief)"
    lines = [
        f"Brief | {end:%Y-%m-%d %H:%M} ({brief.timezone})",
        f"Period: {start} - {end:%H:%M}",
        f"Interruption budget: {brief.budget_used} / {brief.budget_limit} (today)",
    ]
    for number, section in enumerate(SECTIONS, start=1):
        items = brief.sections.get(section, ())
        lines.append("")
        lines.append(f"{number}) {SECTION_TITLES[section]} ({len(items)})")
        lines.extend(render_item(item) for item in items)
    return "\n".join(lines) + "\n"
