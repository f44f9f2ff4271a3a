"""The tokenizer LiteLLM counts `gpt-4` with (tiktoken's cl100k_base), read from the tables LiteLLM
ships, without importing LiteLLM: counting tokens costs 0.1 s of imports, not the seconds LiteLLM
takes, and works offline. `litellm.encode(model="gpt-4", ...)` gives the same tokens
(tests/unit/test_context_config.py)."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = ["cl100k"]


def cl100k() -> Callable[[str], Sequence[int]]:
    """An encoder for cl100k_base; its tables are read now (about 250 ms: call it once)."""
    _use_bundled_tables()
    import tiktoken

    encoding = tiktoken.get_encoding("cl100k_base")

    def encode(text: str) -> Sequence[int]:
        return encoding.encode(text, disallowed_special=())  # as litellm.encode: special tokens are text

    return encode


def _use_bundled_tables() -> None:
    """Point tiktoken at LiteLLM's copy of the tables, as importing LiteLLM does (it also honours
    CUSTOM_TIKTOKEN_CACHE_DIR), so nothing is downloaded."""
    custom = os.environ.get("CUSTOM_TIKTOKEN_CACHE_DIR")
    if custom:
        Path(custom).mkdir(parents=True, exist_ok=True)
        os.environ["TIKTOKEN_CACHE_DIR"] = custom
        return
    spec = importlib.util.find_spec("litellm")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return  # no LiteLLM: tiktoken's own cache (or download) applies
    package = Path(spec.submodule_search_locations[0])
    os.environ["TIKTOKEN_CACHE_DIR"] = str(package / "litellm_core_utils" / "tokenizers")
