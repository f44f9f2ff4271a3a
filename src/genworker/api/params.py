"""Path parameters that name something on disk, declared once with their OpenAPI pattern and length.

FastAPI checks them before a route runs: an invalid id is a 422 naming the parameter and never reaches
a store, a lock file or the filesystem.
"""

from __future__ import annotations

from typing import Annotated, Any, Final

from fastapi import Path

from genworker.channels.registry import SEPARATOR

__all__ = [
    "ID_MAX_LENGTH",
    "ID_RULE",
    "ID_SCHEMA_PATTERN",
    "MATCH_KEY_PATTERN",
    "THREAD_ID_PATTERN",
    "AdapterId",
    "BriefId",
    "ConfirmationId",
    "DutyId",
    "GoalId",
    "InboxItemId",
    "MetricName",
    "MilestoneId",
    "PlanId",
    "RunId",
    "SuggestionId",
    "TaskId",
    "TenantId",
    "ThreadId",
    "UndoId",
    "WorkerId",
    "id_path",
    "path_rule",
]

# genworker.ids.validate_id as one regular expression without look-ahead (which neither pydantic's
# regex engine nor every client's supports): a letter or digit, then letters, digits, '_', '-' and
# '.', never two dots in a row; with ID_MAX_LENGTH the same strings validate_id accepts.
ID_SCHEMA_PATTERN: Final = r"^[A-Za-z0-9](?:\.?[A-Za-z0-9_-])*\.?$"
ID_MAX_LENGTH: Final = 128
ID_RULE: Final = "1-128 letters, digits, '_', '-' or '.', starting with a letter or digit, with no '..'"

_ID = r"[A-Za-z0-9](?:\.?[A-Za-z0-9_-])*\.?"
ADAPTER_SCHEMA_PATTERN: Final = f"^{_ID}{SEPARATOR}{_ID}{SEPARATOR}{_ID}$"
# worker_metrics.check_name
METRIC_SCHEMA_PATTERN: Final = r"^[a-z0-9][a-z0-9_.:-]{0,63}$"
# ids.validate_match_key, with its 256 characters as maxLength
MATCH_KEY_PATTERN: Final = r"^[A-Za-z0-9_.\-/#@]+(:[A-Za-z0-9_.\-/#@]+)+$"


def _thread_id_pattern() -> str:
    """conversation.models.validate_thread_id: an id of 1-64 letters, digits, '_' and '-' (no '.'),
    and not `main` (the main session's), spelt out without look-ahead."""
    first, rest = "[A-Za-z0-9]", "[A-Za-z0-9_-]"
    not_main = "|".join(  # four characters other than m-a-i-n
        [
            f"[A-Za-ln-z0-9]{rest}{{3}}",
            f"m[A-Zb-z0-9_-]{rest}{{2}}",
            f"ma[A-Za-hj-z0-9_-]{rest}",
            "mai[A-Za-mo-z0-9_-]",
        ]
    )
    return f"^(?:{first}{rest}{{0,2}}|{first}{rest}{{4,63}}|{not_main})$"


THREAD_ID_PATTERN: Final = _thread_id_pattern()
_RULES: Final = {
    "adapter_id": f"an adapter id is tenant{SEPARATOR}worker{SEPARATOR}key, each part {ID_RULE}",
    "name": "a metric name is 1-64 of a-z 0-9 _ . : - starting with a letter or digit",
    "file_path": "an editable file is PERSONA.md, duties/<name>.md, goals/<name>.md or a text file under skills/",
}


def path_rule(parameter: str) -> str | None:
    """What a valid value of this path parameter looks like, for the 422 that refuses one."""
    if parameter in _RULES:
        return _RULES[parameter]
    return f"{parameter.replace('_', ' ')} must be {ID_RULE}" if parameter.endswith("_id") else None


def id_path(kind: str) -> Any:
    return Path(
        min_length=1,
        max_length=ID_MAX_LENGTH,
        pattern=ID_SCHEMA_PATTERN,
        description=f"the {kind}: {ID_RULE}",
        examples=["assistant"] if kind == "worker id" else None,
    )


TenantId = Annotated[str, id_path("tenant id")]
WorkerId = Annotated[str, id_path("worker id")]
GoalId = Annotated[str, id_path("goal id")]
MilestoneId = Annotated[str, id_path("milestone id")]
TaskId = Annotated[str, id_path("goal task id")]
DutyId = Annotated[str, id_path("duty id")]
RunId = Annotated[str, id_path("run id")]
ThreadId = Annotated[str, id_path("thread id")]
ConfirmationId = Annotated[str, id_path("confirmation id")]
SuggestionId = Annotated[str, id_path("suggestion id")]
BriefId = Annotated[str, id_path("brief id")]
PlanId = Annotated[str, id_path("waiting plan id")]
InboxItemId = Annotated[str, id_path("inbox item id")]
UndoId = Annotated[str, id_path("deferred action id")]
AdapterId = Annotated[
    str,
    Path(
        max_length=3 * ID_MAX_LENGTH + 2,
        pattern=ADAPTER_SCHEMA_PATTERN,
        description=f"`tenant{SEPARATOR}worker{SEPARATOR}key`, each part {ID_RULE}",
    ),
]
MetricName = Annotated[
    str,
    Path(
        pattern=METRIC_SCHEMA_PATTERN,
        description="1-64 of a-z 0-9 _ . : - starting with a letter or digit; `inbox.*` are built in (read-only)",
    ),
]
