"""Secrets never leave the pipeline: the scope's secret values and well-known token shapes are masked.

Applied to what the model sees (result content, JSON-like `data`, error and denial texts) and to
the arguments written to the audit log.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from functools import lru_cache
from typing import Any, assert_never

from genworker.tools.context import ToolContext
from genworker.tools.middlewares.chain import CallNext
from genworker.tools.outcomes import ToolCompleted, ToolDenied, ToolFailed, ToolNeedsApproval, ToolOutcome

__all__ = ["MASK", "MIN_SECRET_LENGTH", "Redactor", "redaction", "redactor_for"]

MASK = "[REDACTED]"
MIN_SECRET_LENGTH = 4  # shorter "secrets" would mask ordinary text everywhere

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S), MASK),
    (re.compile(r"\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=-]{8,}", re.I), rf"\1\2{MASK}"),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"), MASK),  # OpenAI / Anthropic style keys
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), MASK),  # Slack
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}"), MASK),  # GitHub
    (re.compile(r"\bAKIA[0-9A-Z]{16}\b"), MASK),  # AWS access key id
)
_SECRET_KEY = re.compile(r"pass(word|wd)?|secret|token|api[_-]?key|authorization|credential|private[_-]?key", re.I)


class Redactor:
    def __init__(self, secrets: tuple[str, ...] = ()) -> None:
        values = sorted({s for s in secrets if len(s) >= MIN_SECRET_LENGTH}, key=len, reverse=True)
        self._secrets = re.compile("|".join(map(re.escape, values))) if values else None

    def text(self, text: str) -> str:
        if self._secrets is not None:
            text = self._secrets.sub(MASK, text)
        for pattern, replacement in _PATTERNS:
            text = pattern.sub(replacement, text)
        return text

    def value(self, value: Any) -> Any:
        """Redact strings inside JSON-like values; mask whole values under secret-looking keys."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {
                k: MASK if isinstance(k, str) and _SECRET_KEY.search(k) and v else self.value(v)
                for k, v in value.items()
            }
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        return value

    def outcome(self, outcome: ToolOutcome) -> ToolOutcome:
        match outcome:
            case ToolCompleted(result=result):
                return ToolCompleted(replace(result, content=self.text(result.content), data=self.value(result.data)))
            case ToolFailed():
                return replace(outcome, error=self.text(outcome.error))
            case ToolDenied() | ToolNeedsApproval():
                return replace(outcome, reason=self.text(outcome.reason))
            case _:
                assert_never(outcome)


@lru_cache(maxsize=128)
def redactor_for(secrets: tuple[str, ...]) -> Redactor:
    return Redactor(secrets)


async def redaction(ctx: ToolContext, call_next: CallNext) -> ToolOutcome:
    return redactor_for(ctx.scope.secrets).outcome(await call_next(ctx))
