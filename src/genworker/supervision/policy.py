"""SupervisorPolicy: a worker's `supervisors/<name>.json` (or `.md` with a YAML front matter), read
with pydantic; a broken file is a PolicyError naming the file and the field."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, StrictFloat, ValidationError

from genworker.supervision.errors import PolicyError

__all__ = [
    "SCHEMA_VERSION",
    "SUPERVISORS_DIR",
    "Attach",
    "Budgets",
    "ModelReview",
    "SupervisorPolicy",
    "load_policies",
    "parse_policy",
]

SCHEMA_VERSION = 1
SUPERVISORS_DIR = "supervisors"

Enforce = Literal["warn", "request_review", "pause", "stop"]


def _not_a_bool(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("Input should be a valid integer, not true or false")
    return value


NOT_A_BOOL = BeforeValidator(_not_a_bool)  # after any bounds: they stay in the JSON schema
JsonInt = Annotated[int, NOT_A_BOOL]  # an integer as JSON has it: 3 or 3.0, never true


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Attach(_Strict):
    """What the policy watches: conversations (thread ids), a duty's runs, an experiment; `all` every run."""

    all: StrictBool = False
    conversations: tuple[str, ...] = ()
    duties: tuple[str, ...] = ()
    experiments: tuple[str, ...] = ()


class Budgets(_Strict):
    tool_calls: Annotated[int, Field(ge=0), NOT_A_BOOL] | None = None
    tokens: Annotated[int, Field(ge=0), NOT_A_BOOL] | None = None
    seconds: Annotated[StrictFloat, Field(gt=0)] | None = None
    output_chars: Annotated[int, Field(ge=0), NOT_A_BOOL] | None = None
    concurrent_tools: Annotated[int, Field(ge=1), NOT_A_BOOL] | None = None


class ModelReview(_Strict):
    """The cheap-tier reviewer: called on `events`, every `sample_every`-th one, at most `max_calls`."""

    enabled: StrictBool = False
    events: tuple[Literal["tool_result", "final"], ...] = ("final",)
    sample_every: JsonInt = Field(1, ge=1)
    max_calls: JsonInt = Field(2, ge=0, le=20)
    tier: Literal["fast", "standard"] = "fast"


class SupervisorPolicy(_Strict):
    schema_version: JsonInt = SCHEMA_VERSION
    name: str = ""
    attach: Attach = Attach()
    tools: tuple[str, ...] | None = None  # allowed tool names (fnmatch patterns); None: any
    directories: tuple[str, ...] | None = None  # allowed path prefixes for path-like arguments
    memory_partitions: tuple[str, ...] | None = None  # allowed memory partitions (memory tools' argument)
    budgets: Budgets = Budgets()
    transitions: dict[str, tuple[str, ...]] | None = None  # tool -> tools allowed next ("start": the first)
    output_schema: dict[str, Any] | None = None  # JSON schema the final answer must meet
    stop_on_tools: tuple[str, ...] = ()  # calling one of these stops the run
    stop_on_text: tuple[str, ...] = ()  # the answer containing one of these stops the run
    # metric threshold: failed or denied tool calls
    max_tool_failures: Annotated[int, Field(ge=1), NOT_A_BOOL] | None = None
    on_violation: Enforce = "stop"  # allow-lists, transitions, memory partitions, stop conditions
    on_budget: Enforce = "pause"  # budgets and metric thresholds
    model: ModelReview = ModelReview()


def parse_policy(path: Path, text: str) -> SupervisorPolicy:
    """The policy in `text` (the contents of `path`); PolicyError `path: field: problem`."""
    try:
        if path.suffix == ".md":
            head, sep, _ = text.removeprefix("---\n").partition("\n---")
            if not text.startswith("---\n") or not sep:
                raise PolicyError(f"{path}: a supervisor .md file starts with a YAML front matter between --- lines")
            data: Any = yaml.safe_load(head)
        else:
            data = json.loads(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise PolicyError(f"{path}: not readable: {exc}") from None
    if not isinstance(data, dict):
        raise PolicyError(f"{path}: the policy is a mapping of fields")
    version = data.get("schema_version", SCHEMA_VERSION)
    if version != SCHEMA_VERSION:
        raise PolicyError(f"{path}: schema_version: {version!r} is not supported (only {SCHEMA_VERSION})")
    data.setdefault("name", path.stem)
    try:
        return SupervisorPolicy.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "(policy)"
        raise PolicyError(f"{path}: {field}: {first['msg']}") from None


def load_policies(worker_dir: Path, on_error: Callable[[PolicyError], None] | None = None) -> list[SupervisorPolicy]:
    """Every policy in `worker_dir/supervisors/`, by file name; blocking. A broken file raises
    PolicyError, or with `on_error` is reported to it and left out (the others still apply)."""
    folder = worker_dir / SUPERVISORS_DIR
    if not folder.is_dir():
        return []
    policies = []
    for path in sorted(p for p in folder.iterdir() if p.suffix in (".json", ".md") and p.is_file()):
        try:
            policies.append(parse_policy(path, path.read_text(encoding="utf-8")))
        except PolicyError as exc:
            if on_error is None:
                raise
            on_error(exc)
    return policies
