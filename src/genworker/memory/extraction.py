"""Preference and decision extraction after a run: one fast-tier model call asking for JSON,
validated before anything is stored. Off unless enabled (GENWORKER_MEMORY_EXTRACT=1); a bad or
failed answer stores nothing."""

from __future__ import annotations

import json
import logging
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from genworker.llm.client import LLMClient
from genworker.llm.intent import LLMCallIntent, Purpose

__all__ = ["EXTRACTION_PROMPT", "Extracted", "Extraction", "extract_statements"]

log = logging.getLogger(__name__)

EXTRACTION_PROMPT = (
    "You extract durable memory from one exchange between a person and an AI worker.\n"
    'Return JSON only, no prose: {"items": [{"kind": "preference" | "decision", "key": short topic, '
    '"value": the preference or decision in one sentence, "replaces_previous": true when the person '
    'explicitly changes an earlier one, "quote": the person\'s words that show it}]}.\n'
    "Only what the person stated or decided; nothing guessed, no secrets, no errors. "
    'Return {"items": []} when there is nothing.'
)
_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$", re.S)


class Extracted(BaseModel):
    model_config = ConfigDict(extra="ignore")

    kind: Literal["preference", "decision"]
    key: str = Field(min_length=1, max_length=120)
    value: str = Field(min_length=1, max_length=1_000)
    replaces_previous: bool = False
    quote: str = ""


class Extraction(BaseModel):
    model_config = ConfigDict(extra="ignore")

    items: list[Extracted] = []


async def extract_statements(llm: LLMClient, user_text: str, answer: str) -> Extraction:
    """The statements in one exchange; empty when the model fails or answers something invalid."""
    messages = [
        {"role": "system", "content": EXTRACTION_PROMPT},
        {"role": "user", "content": f"Person:\n{user_text}\n\nWorker:\n{answer}"},
    ]
    try:
        completion = await llm.complete(LLMCallIntent(Purpose.EXTRACT), messages)
    except Exception as exc:  # extraction is best effort: the run already succeeded
        log.warning("memory extraction failed: %s", exc)
        return Extraction()
    try:
        return Extraction.model_validate(json.loads(_FENCE.sub("", completion.text.strip())))
    except (json.JSONDecodeError, ValidationError) as exc:
        log.warning("memory extraction answer is not the expected JSON, nothing stored: %s", exc)
        return Extraction()
