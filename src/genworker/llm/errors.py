"""Model-layer errors. A provider failure is an error, never content."""

from __future__ import annotations

from typing import Literal

__all__ = ["ContextOverflowError", "LLMError", "ModelNotConfiguredError", "ProviderError", "ProviderErrorKind"]

ProviderErrorKind = Literal["rate_limited", "server_error", "timeout", "connection", "bad_request", "auth", "other"]


class LLMError(Exception):
    """Base of every model-layer failure."""


class ModelNotConfiguredError(LLMError):
    """No model is configured; the message names the files to edit."""


class ProviderError(LLMError):
    def __init__(self, kind: ProviderErrorKind, message: str, *, tried: tuple[str, ...] = ()) -> None:
        self.kind = kind
        self.tried = tried
        super().__init__(message)


class ContextOverflowError(ProviderError):
    """The prompt is larger than the model's context window; compaction may help."""

    def __init__(self, message: str, *, tried: tuple[str, ...] = ()) -> None:
        super().__init__("bad_request", message, tried=tried)
