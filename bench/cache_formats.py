"""Why the load cache pickles: how fast the loaded models of every worker read back from pickle
against JSON (orjson, msgspec when installed) of `model_dump()` followed by pydantic's
`model_validate` (validators run again) or `model_construct` (no validation, and nested models
stay dicts: a lower bound, not a usable result)."""

from __future__ import annotations

import gc
import pickle
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import orjson
from pydantic import BaseModel

from genworker.workspace import load_cache
from genworker.workspace.models import SkillLevel
from genworker.workspace.registry import WorkspaceRegistry
from genworker.workspace.snapshot import Worker, frozen_map

__all__ = ["compare_formats"]


def compare_formats(registry: WorkspaceRegistry, repeats: int) -> dict[str, Any]:
    workers = [_own(w) for w in registry.workers()]
    models = [m for w in workers for m in _models(w)]
    kinds = [type(m) for m in models]
    dumped = [m.model_dump(mode="json") for m in models]
    as_json = orjson.dumps(dumped)
    cache_blob = load_cache._dumps(workers)

    def validate(data: list[Any]) -> list[BaseModel]:
        return [kind.model_validate(d) for kind, d in zip(kinds, data, strict=True)]

    def construct(data: list[Any]) -> list[BaseModel]:
        return [kind.model_construct(**d) for kind, d in zip(kinds, data, strict=True)]

    ways: list[tuple[str, Callable[[], object], str]] = [
        ("pickle, restricted unpickler (the load cache)", lambda: load_cache._loads(cache_blob), "exact"),
        ("pickle, plain unpickler", lambda: pickle.loads(cache_blob), "exact; any class"),
        ("orjson.loads alone (dicts, no models)", lambda: orjson.loads(as_json), "not a result: the decode's share"),
        ("orjson + model_validate", lambda: validate(orjson.loads(as_json)), _same(models, validate(dumped))),
        ("orjson + model_construct", lambda: construct(orjson.loads(as_json)), "shallow: nested models stay dicts"),
    ]
    try:
        import msgspec  # not a dependency: measured when installed
    except ImportError:
        msgspec = None
    if msgspec is not None:
        encoded = msgspec.msgpack.encode(dumped)
        ways.append(("msgspec msgpack decode alone", lambda: msgspec.msgpack.decode(encoded), "not a result"))
        ways.append(("msgspec msgpack + model_validate", lambda: validate(msgspec.msgpack.decode(encoded)), ""))
    rows = []
    for way, fn, note in ways:
        rows.append({"way": way, "cpu_s": _best(fn, repeats), "note": note})
    base = rows[0]["cpu_s"]
    for row in rows:
        row["ratio"] = row["cpu_s"] / base
    return {
        "models": len(models),
        "bytes": {"pickle": len(cache_blob), "json": len(as_json)},
        "msgspec": "installed" if msgspec is not None else "not installed",
        "rows": rows,
    }


def _own(worker: Worker) -> Worker:
    own = {name: s for name, s in worker.skills.items() if s.level is SkillLevel.WORKER}
    return replace(worker, skills=frozen_map(own), version=0)


def _models(worker: Worker) -> Iterator[BaseModel]:
    yield worker.persona
    yield from worker.duties.values()
    yield from worker.goals.values()
    yield from worker.rules
    yield from worker.contacts.values()
    yield from (s.spec for s in worker.skills.values())


def _same(models: list[BaseModel], again: list[BaseModel]) -> str:
    equal = sum(a == b for a, b in zip(models, again, strict=True))
    return f"{equal} of {len(models)} equal to the loaded models"


def _best(fn: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(max(repeats, 1)):
        gc.collect()
        gc.disable()
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
        gc.enable()
    return best
