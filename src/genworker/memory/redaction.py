"""What never becomes memory: secrets (masked before anything is written), hidden reasoning
(removed), and provider or failure error text (refused outright)."""

from __future__ import annotations

import re

from genworker.tools.middlewares.redaction import MASK, Redactor

__all__ = ["looks_like_error", "redact_for_memory", "strip_reasoning"]

_REASONING = re.compile(r"<(think|thinking|reasoning|scratchpad)>.*?</\1>\s*", re.S | re.I)
_ASSIGNED_SECRET = re.compile(
    r"(?P<key>\b(?:pass(?:word|wd)?|secret|token|api[_-]?key|access[_-]?key|client[_-]?secret|private[_-]?key)\b"
    r"\s*[:=]\s*)(?P<q>['\"]?)(?P<value>[^\s'\",;]{4,})(?P=q)",
    re.I,
)
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")
_ERROR_SHAPES = re.compile(
    r"^\s*(traceback \(most recent call last\)|error:|exception:|\[?error\]?\s|provider ?error|"
    r"litellm\.|openai\.|ratelimiterror|apiconnectionerror|internal server error|"
    r"every model in the fallback chain failed)",
    re.I,
)


def strip_reasoning(text: str) -> str:
    return _REASONING.sub("", text)


def redact_for_memory(text: str, secrets: tuple[str, ...] = ()) -> str:
    """`text` with hidden reasoning removed and secrets masked (known values and common shapes)."""
    text = Redactor(secrets).text(strip_reasoning(text))
    text = _ASSIGNED_SECRET.sub(lambda m: f"{m['key']}{m['q']}{MASK}{m['q']}", text)
    return _JWT.sub(MASK, text)


def looks_like_error(text: str) -> bool:
    """True for text that is a provider error or a stack trace, which must not be remembered."""
    return bool(_ERROR_SHAPES.match(text))
