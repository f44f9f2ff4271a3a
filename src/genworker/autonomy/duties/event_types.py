"""Event types as upstream genworker names them, for event triggers written for it.

Upstream's event trigger `source` is an event-type pattern (`*` everything, `x.*` one level below
`x`, else exact) and its sensors publish `external.email_received`, `external.git_commit`,
`external.webhook`, `external.feishu_doc_updated` and `local.file_changed`. Ours publish
`email.received`, `git.commit`, `webhook.fact` and `file.{created,modified,deleted}`: an event
of ours also matches under its upstream name.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

__all__ = ["UPSTREAM_NAMES", "type_matches", "upstream_pattern_matches"]

UPSTREAM_NAMES: Final[Mapping[str, str]] = MappingProxyType(
    {
        "email.received": "external.email_received",
        "git.commit": "external.git_commit",
        "webhook.fact": "external.webhook",
        "file.created": "local.file_changed",
        "file.modified": "local.file_changed",
        "file.deleted": "local.file_changed",
    }
)


def upstream_pattern_matches(pattern: str, event_type: str) -> bool:
    """Upstream genworker's rule: `*` matches everything, `x.*` exactly one level below `x`, else equality."""
    if pattern in ("*", event_type):
        return True
    if pattern.endswith(".*"):
        rest = event_type.removeprefix(pattern[:-1])
        return rest != event_type and rest != "" and "." not in rest
    return False


def type_matches(pattern: str, event_type: str) -> bool:
    """`pattern` (upstream's rule) matches the event type or its upstream name."""
    upstream = UPSTREAM_NAMES.get(event_type)
    return upstream_pattern_matches(pattern, event_type) or (
        upstream is not None and upstream_pattern_matches(pattern, upstream)
    )
