"""The tokenizer LiteLLM counts `gpt-4` with (tiktoken's cl100k_base), read from the tables LiteLLM
ships, without importing LiteLLM: counting tokens costs 0.1 s of imports, not the seconds LiteLLM
takes, and works offline. `litellm.encode(model="gpt-4", ...)` gives the same tokens
(tests/unit/test_context_config.py)."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tiktoken

__all__ = ["cl100k"]


def cl100k() -> Callable[[str], Sequence[int]]:
    """An encoder for cl100k_base; its tables are read now (about 250 ms: call it once)."""
    _use_bundled_tables()
    import tiktoken

    encoding = tiktoken.get_encoding("cl100k_base")
    _drop_python_ranks(encoding)

    def encode(text: str) -> Sequence[int]:
        return encoding.encode(text, disallowed_special=())  # as litellm.encode: special tokens are text

    return encode


def _drop_python_ranks(encoding: tiktoken.Encoding) -> None:
    """tiktoken keeps the table it built its Rust encoder from (100,256 bytes -> rank entries, about
    16 MB of an idle server's RSS) only to pickle an unregistered encoding by value; encoding and
    decoding use the Rust copy. The registry's cl100k_base is pickled by name, so the Python copy
    goes (LiteLLM shares this encoding and uses its Rust side too)."""
    if isinstance(getattr(encoding, "_mergeable_ranks", None), dict):
        encoding._mergeable_ranks = {}


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
