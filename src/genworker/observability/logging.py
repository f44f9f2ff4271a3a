"""Structured logs: correlation ids from contextvars, secret redaction, one line per decision.

`bind(tenant_id=..., run_id=...)` sets ids for everything logged inside it (tasks started
inside inherit them). `configure_logging(fmt, level)` installs one root handler: `json` writes one
JSON object per line, `text` a human line with the same ids appended. Both redact secrets: API
keys, bearer tokens, `SecretStr` values and the values of password/secret/token-like fields.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, Literal, TextIO

from pydantic import SecretBytes, SecretStr

__all__ = [
    "ID_FIELDS",
    "JsonFormatter",
    "LogFormat",
    "TextFormatter",
    "bind",
    "configure_logging",
    "current_ids",
    "internal_error_message",
    "log_decision",
    "log_internal_error",
    "redact",
    "redact_text",
]

LogFormat = Literal["text", "json"]
ID_FIELDS = ("request_id", "tenant_id", "worker_id", "run_id", "task_id")
_IDS: ContextVar[Mapping[str, str]] = ContextVar("genworker_log_ids", default=MappingProxyType({}))

REDACTED = "***"
_SECRET_KEY = re.compile(
    r"pass(word|wd|phrase)?|secret|token|api[_-]?key|authorization|credential|private[_-]?key|cookie|signature",
    re.IGNORECASE,
)
_SECRET_TEXT = (
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}"), r"\1 " + REDACTED),
    (re.compile(r"\bgwk_[0-9a-f]{12}_[A-Za-z0-9_-]+"), "gwk_" + REDACTED),  # genworker API keys
    (re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"), "sk-" + REDACTED),  # OpenAI / Anthropic style
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), "xox-" + REDACTED),  # Slack
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), "AKIA" + REDACTED),  # AWS access key ids
    (re.compile(r"(?i)([?&](?:api[_-]?key|token|access_token|secret|sig|signature)=)[^&\s\"']+"), r"\1" + REDACTED),
    (
        re.compile(r"(?i)([\"']?\b(?:password|passwd|secret|token|api[_-]?key)[\"']?\s*[:=]\s*[\"']?)[^\s\"',}]+"),
        r"\1" + REDACTED,
    ),
)
_RESERVED = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}
_NOISE = frozenset({"color_message", "litellm_redacted"})  # set on records by uvicorn and LiteLLM


@contextmanager
def bind(**ids: str | None) -> Iterator[None]:
    """Add correlation ids (request_id, tenant_id, worker_id, run_id, task_id) for this context."""
    unknown = set(ids) - set(ID_FIELDS)
    if unknown:
        raise ValueError(f"unknown log id field(s): {', '.join(sorted(unknown))}; expected {', '.join(ID_FIELDS)}")
    merged = {**_IDS.get(), **{k: v for k, v in ids.items() if v}}
    token = _IDS.set(MappingProxyType(merged))
    try:
        yield
    finally:
        _IDS.reset(token)


def current_ids() -> dict[str, str]:
    return dict(_IDS.get())


def redact_text(text: str) -> str:
    for pattern, replacement in _SECRET_TEXT:
        text = pattern.sub(replacement, text)
    return text


def redact(value: Any, key: str | None = None) -> Any:
    """A JSON-ready copy of `value` with secrets replaced by '***'."""
    if isinstance(value, SecretStr | SecretBytes):
        return REDACTED
    if key is not None and _SECRET_KEY.search(key) and value not in (None, "", False):
        return REDACTED
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        return {str(k): redact(v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [redact(v) for v in value]
    if value is None or isinstance(value, bool | int | float):
        return value
    return redact_text(str(value))


def log_decision(logger: logging.Logger, decision: str, outcome: str, **fields: Any) -> None:
    """One INFO line for one decision (gate result, routing, retry, dead letter), fields kept structured."""
    logger.info("%s: %s", decision, outcome, extra={"decision": decision, "outcome": outcome, **fields})


def log_internal_error(logger: logging.Logger, what: str, exc: BaseException) -> str:
    """Log an unexpected error with its traceback under a new error id, and return the id: the
    caller is told that (`internal_error_message`), never the error's text."""
    error_id = f"err_{secrets.token_hex(8)}"
    logger.error("%s (error id %s)", what, error_id, exc_info=exc)
    return error_id


def internal_error_message(error_id: str) -> str:
    return f"internal error; quote error id {error_id} when reporting it"


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _RESERVED and k not in ID_FIELDS and k not in _NOISE}


def _ids(record: logging.LogRecord) -> dict[str, str]:
    ids = dict(_IDS.get())
    for name in ID_FIELDS:  # explicit extra={"run_id": ...} wins over the context
        value = getattr(record, name, None)
        if value:
            ids[name] = str(value)
    return ids


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, the ids, extra fields, exc."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": redact_text(record.getMessage()),
            **_ids(record),
        }
        for key, value in _extras(record).items():
            line.setdefault(key, redact(value, key))
        if record.exc_info:
            line["exc"] = redact_text(self.formatException(record.exc_info))
        return json.dumps(line, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """The human format, with the ids and decision fields appended as key=value."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        base = redact_text(super().format(record))
        pairs = {**_ids(record), **{k: redact(v, k) for k, v in _extras(record).items()}}
        if not pairs:
            return base
        tail = " ".join(f"{k}={v}" for k, v in pairs.items())
        head, sep, rest = base.partition("\n")  # keep a traceback below the line
        return f"{head} [{tail}]{sep}{rest}"


def configure_logging(fmt: str = "text", level: str = "INFO", stream: TextIO | None = None) -> logging.Handler:
    """Replace the root handlers with one writing `fmt` ("text" or "json") to `stream` (stderr)."""
    if fmt not in ("text", "json"):
        raise ValueError(f"GENWORKER_LOG_FORMAT={fmt!r}: expected text or json")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):  # one format for every line
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
    return handler
