"""The answer a model gave through a forced function call (the structured output path of the goal
evaluator and the context-space router): the call's arguments — or, from a provider that ignored the
force, a JSON text — validated by a pydantic model, or a ValueError naming what is wrong."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from genworker.llm.client import ModelToolCall

__all__ = ["forced_answer"]

M = TypeVar("M", bound=BaseModel)


def forced_answer(calls: Sequence[ModelToolCall], text: str, tool: str, model: type[M]) -> M:
    raw = next((c.arguments for c in calls if c.name == tool), None)
    if raw is None:
        if calls:
            raise ValueError(f"it called {calls[0].name!r}, not {tool!r}")
        raw = text.strip()
        if not raw:
            raise ValueError("it was empty")
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"not JSON ({exc})") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "answer"
        raise ValueError(f"{where}: {first['msg']}") from None
