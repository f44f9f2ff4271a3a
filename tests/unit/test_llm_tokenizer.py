"""Token counting uses LiteLLM's gpt-4 tokenizer (cl100k_base, from the tables LiteLLM ships) without
importing LiteLLM; it counts exactly as `litellm.encode(model="gpt-4")` does."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from genworker.llm.tokenizer import cl100k

TEXTS = [
    "",
    "hello world",
    "你好, how are you today? 😀",
    "special tokens are text here: <|endoftext|> <|fim_prefix|>",
    "  leading and trailing spaces\n\n\ttabs ",
    "x" * 5000,
]


@pytest.mark.parametrize("text", TEXTS, ids=range(len(TEXTS)))
def test_the_same_tokens_as_litellm(text: str) -> None:
    import litellm

    assert list(cl100k()(text)) == list(litellm.encode(model="gpt-4", text=text))


def test_counting_tokens_does_not_import_litellm() -> None:
    code = (
        "import json, sys\n"
        "from genworker.worker.context.tokens import count_tokens, load_tokenizer\n"
        "load_tokenizer()\n"
        "print(json.dumps([count_tokens('hello world'), 'litellm' in sys.modules]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, encoding="utf-8", timeout=300, check=True
    )
    assert json.loads(result.stdout) == [2, False]


def test_the_python_copy_of_the_ranks_is_not_kept() -> None:
    """The Rust encoder has its own copy; the Python dict (about 16 MB of an idle server) is dropped,
    and counting (and LiteLLM's counting, which shares the registry's encoding) is unchanged."""
    import litellm
    import tiktoken

    encode = cl100k()
    assert tiktoken.get_encoding("cl100k_base")._mergeable_ranks == {}
    assert list(encode("hello world")) == list(litellm.encode(model="gpt-4", text="hello world")) == [15339, 1917]
    assert tiktoken.get_encoding("cl100k_base").decode([15339, 1917]) == "hello world"
