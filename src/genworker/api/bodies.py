"""The base of every JSON request body: checked as strictly as its OpenAPI schema reads, so what the
schema refuses the route refuses too (no `"1"` for 1, no 0 for false, no unknown field).

FastAPI validates a parsed body as Python data, where strict mode would also refuse a date or an enum
written as the string JSON has for it: `JsonDate` and `json_enum` take exactly that string.
"""

from __future__ import annotations

import datetime as dt
import re
from enum import Enum
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Strict

__all__ = ["JsonDate", "RequestBody", "json_enum", "json_integer"]

E = TypeVar("E", bound=Enum)


class RequestBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


def _string(value: Any) -> Any:
    if not isinstance(value, str):
        raise ValueError("must be a string")
    return value


def _full_date(value: Any) -> Any:
    if not re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", _string(value)):
        raise ValueError("must be a date as YYYY-MM-DD")
    return value


JsonDate = Annotated[dt.date, Strict(False), BeforeValidator(_full_date)]


def json_integer(value: Any) -> Any:
    """An integer as JSON Schema has it: 3 or 3.0, never a bool or a string. Use it after the bounds:
    `Annotated[int, Field(ge=1), Strict(False), BeforeValidator(json_integer)]`, so the schema reads
    minimum/maximum."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("must be an integer")
    return value


def json_enum(enum: type[E]) -> Any:
    """`enum` taken from its value as a JSON string."""
    return Annotated[enum, Strict(False), BeforeValidator(_string)]
