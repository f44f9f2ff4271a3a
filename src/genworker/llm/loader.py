"""LiteLLM, imported once and set up for genworker: when the first model client is built, or ahead of
it (`genworker run` loads it in its start-up thread, after the server listens).

Importing LiteLLM takes seconds (about 60 % of a server start-up on 2 cores), so no genworker module
imports it at module level: commands and code paths that make no model call never pay for it
(tests/structural/test_lazy_imports.py).
"""

from __future__ import annotations

import logging
import os
import threading

__all__ = ["litellm_loaded", "load_litellm"]

_lock = threading.Lock()
_loaded = False


def litellm_loaded() -> bool:
    return _loaded


def load_litellm() -> None:
    """Import LiteLLM (once; safe from several threads) without telemetry or its debug banner, its
    log lines going through ours."""
    global _loaded
    if _loaded:
        return
    with _lock:
        if _loaded:
            return
        import litellm

        litellm.telemetry = False
        litellm.suppress_debug_info = True
        _logs_through_ours()
        _loaded = True


def _logs_through_ours() -> None:
    """LiteLLM's loggers write through their own handler, and propagate to the root's too: every
    line came out twice, once in LiteLLM's format with colour codes. Their records now go to the
    root handler only (one format, the run's ids attached), and their per-call INFO lines ("200
    OK") are left out unless LITELLM_LOG sets a level."""
    from litellm._logging import handler

    for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy"):
        logger = logging.getLogger(name)
        logger.removeHandler(handler)
        logger.propagate = True
        if "LITELLM_LOG" not in os.environ:
            logger.setLevel(logging.WARNING)
