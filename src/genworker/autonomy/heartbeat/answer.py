"""The summary turn's answer: one JSON object ``{"attention": bool, "message": str}``, validated.

Silence is a field, not a phrase: ``attention: false`` is the explicit "nothing to report", and no
free text is ever searched for words like "nothing". An answer that is not that object is
`Unreadable`, which the runner treats as a failed turn (the items are retried), never as a message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from pydantic import BaseModel, ConfigDict, StrictBool, ValidationError, model_validator

__all__ = [
    "ANSWER_SHAPE",
    "HeartbeatAnswer",
    "NeedsAttention",
    "NothingToReport",
    "ParsedAnswer",
    "Unreadable",
    "parse_answer",
]

ANSWER_SHAPE: Final = '{"attention": true or false, "message": "..."}'
_FENCE: Final = re.compile(r"```(?:json)?\s*(.*?)\s*```", re.DOTALL)


class HeartbeatAnswer(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    attention: StrictBool
    message: str = ""

    @model_validator(mode="after")
    def _speaks_when_it_asks_for_attention(self) -> HeartbeatAnswer:
        if self.attention and not self.message.strip():
            raise ValueError("attention is true but message is empty")
        return self


@dataclass(frozen=True, slots=True)
class NeedsAttention:
    message: str


@dataclass(frozen=True, slots=True)
class NothingToReport:
    pass


@dataclass(frozen=True, slots=True)
class Unreadable:
    error: str


ParsedAnswer = NeedsAttention | NothingToReport | Unreadable


def parse_answer(text: str) -> ParsedAnswer:
    """The answer in `text`: the bare JSON object, or the object alone inside one ``` fence."""
    body = text.strip()
    fenced = _FENCE.fullmatch(body)
    if fenced is not None:
        body = fenced.group(1)
    try:
        answer = HeartbeatAnswer.model_validate_json(body)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "answer"
        return Unreadable(f"the answer is not {ANSWER_SHAPE}: {where}: {first['msg']}")
    return NeedsAttention(answer.message.strip()) if answer.attention else NothingToReport()
