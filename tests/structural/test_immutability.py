"""Loaded workspace values are immutable: frozen models and dataclasses, no list/dict/set anywhere."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import typing
from collections.abc import Iterator, Mapping
from types import MappingProxyType, ModuleType
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

import genworker.workspace.errors as errors_module
import genworker.workspace.models as models_package
import genworker.workspace.snapshot as snapshot_module
from genworker.workspace.models import DutySpec, Goal, PersonaSpec, SkillSpec, Tenant

MUTABLE = (list, dict, set)


def model_modules() -> list[ModuleType]:
    names = [f"{models_package.__name__}.{m.name}" for m in pkgutil.iter_modules(models_package.__path__)]
    return [models_package, *(importlib.import_module(name) for name in names)]


def model_classes() -> list[type[BaseModel]]:
    found: dict[str, type[BaseModel]] = {}
    for module in model_modules():
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, BaseModel) and cls.__module__.startswith(models_package.__name__):
                found[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return [found[k] for k in sorted(found)]


MODELS = model_classes()


def test_the_walk_finds_the_models() -> None:
    names = {cls.__name__ for cls in MODELS}
    assert {"PersonaSpec", "DutySpec", "ScheduleTrigger", "Goal", "SkillSpec", "Graph", "Tenant"} <= names
    assert {"ChannelCredentials", "SlackCredentials", "Rule", "Contact", "Model"} <= names


def mutable_parts(annotation: Any) -> Iterator[Any]:
    """Every bare list/dict/set (or List[...] etc.) inside an annotation."""
    origin = typing.get_origin(annotation)
    if annotation in MUTABLE or origin in MUTABLE:
        yield annotation
    if origin is typing.Annotated:
        yield from mutable_parts(typing.get_args(annotation)[0])
        return
    for arg in typing.get_args(annotation):
        yield from mutable_parts(arg)


def test_mutable_parts_detects_nested_containers() -> None:
    assert list(mutable_parts(list[int])) == [list[int]]
    assert list(mutable_parts(tuple[dict, ...])) == [dict]
    assert list(mutable_parts(typing.Annotated[typing.Optional[typing.Set[str]], "x"])) == [typing.Set[str]]  # noqa: UP006, UP045
    assert list(mutable_parts(Mapping[str, tuple[int, ...]] | None)) == []


@pytest.mark.parametrize("cls", MODELS, ids=lambda c: c.__name__)
def test_models_are_frozen(cls: type[BaseModel]) -> None:
    assert cls.model_config.get("frozen") is True


@pytest.mark.parametrize("cls", MODELS, ids=lambda c: c.__name__)
def test_no_mutable_container_in_field_annotations(cls: type[BaseModel]) -> None:
    bad = {name: list(mutable_parts(f.annotation)) for name, f in cls.model_fields.items()}
    assert {name: parts for name, parts in bad.items() if parts} == {}


@pytest.mark.parametrize("cls", [c for c in MODELS if c.model_fields], ids=lambda c: c.__name__)
def test_assignment_raises(cls: type[BaseModel]) -> None:
    instance = cls.model_construct()
    name = next(iter(cls.model_fields))
    with pytest.raises(ValidationError, match="frozen"):
        setattr(instance, name, None)


RICH = {
    PersonaSpec: {
        "identity": {"name": "Iris", "worker_id": "iris", "personality": {"traits": ["calm"]}},
        "sensor_configs": [{"source_type": "email", "filter": {"folders": ["INBOX"]}, "routing_rules": []}],
        "mounts": [{"mount_id": "m", "type": "feishu", "source": {"ids": [1, 2]}}],
        "channels": [{"type": "slack", "features": {"x": {"y": [1]}}}],
        "contacts": [{"person_id": "p", "name": "P", "identities": [{"channel": "email", "handle": "h"}]}],
        "service": {"knowledge_sources": [{"kind": "docs", "paths": ["a"]}]},
        "extra_key": {"kept": ["as", "extra"]},
    },
    DutySpec: {
        "duty_id": "d",
        "title": "t",
        "action": "Do.",
        "triggers": [{"id": "e", "type": "event", "source": "s", "filter": {"a": [1]}}],
        "execution_policy": {"overrides": {"e": "deep"}},
        "posture": {"overrides": {"e": "draft"}},
        "contract": {"version": "1", "input_schema": {"type": "object", "required": ["a"]}},
        "duty_defaults": {"status": "active", "quality_criteria": ["x"]},
    },
    Goal: {
        "goal_id": "g",
        "title": "G",
        "external_source": {"issue": {"labels": ["a"]}},
        "milestones": [{"id": "m", "title": "M", "tasks": [{"id": "t", "title": "T", "blocked_by": []}]}],
    },
    SkillSpec: {
        "name": "s",
        "description": "d",
        "metadata": {
            "other": {"free": ["form"]},
            "genworker": {
                "strategy": {
                    "mode": "langgraph",
                    "graph": {
                        "entry": "a",
                        "state_schema": {"k": [1]},
                        "nodes": [{"name": "a", "kind": "tool", "cfg": [1]}],
                    },
                }
            },
        },
    },
    Tenant: {"tenant_id": "t", "credentials": {"k": ["v"]}},
}


def mutable_values(value: Any, path: str = "") -> Iterator[str]:
    if isinstance(value, MUTABLE):
        yield f"{path}: {type(value).__name__}"
        return
    if isinstance(value, BaseModel):
        # declared fields only: extra keys (unknown or free-form) are kept as parsed
        for name in type(value).model_fields:
            yield from mutable_values(getattr(value, name), f"{path}.{name}")
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from mutable_values(item, f"{path}[{key!r}]")
    elif isinstance(value, tuple):
        for i, item in enumerate(value):
            yield from mutable_values(item, f"{path}[{i}]")


@pytest.mark.parametrize("cls", list(RICH), ids=lambda c: c.__name__)
def test_validated_values_hold_no_mutable_containers(cls: type[BaseModel]) -> None:
    instance = cls.model_validate(RICH[cls])
    assert list(mutable_values(instance)) == []


def default_instances() -> list[BaseModel]:
    """Every model that can be built from defaults alone."""
    built = []
    for cls in MODELS:
        try:
            built.append(cls())
        except ValidationError:
            continue
    return built


@pytest.mark.parametrize("instance", default_instances(), ids=lambda m: type(m).__name__)
def test_default_values_hold_no_mutable_containers(instance: BaseModel) -> None:
    assert list(mutable_values(instance)) == []


def test_frozen_maps_reject_writes() -> None:
    duty = DutySpec.model_validate(RICH[DutySpec])
    assert duty.contract is not None
    assert isinstance(duty.contract.input_schema, MappingProxyType)
    with pytest.raises(TypeError):
        duty.contract.input_schema["type"] = "array"  # type: ignore[index]


def dataclasses_of(module: ModuleType) -> list[type]:
    return [
        cls
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if dataclasses.is_dataclass(cls) and cls.__module__ == module.__name__
    ]


SNAPSHOT_CLASSES = dataclasses_of(snapshot_module) + dataclasses_of(errors_module)


def test_snapshot_dataclasses_are_found() -> None:
    assert {c.__name__ for c in SNAPSHOT_CLASSES} >= {"Skill", "Worker", "WorkerFailure", "TenantState", "Issue"}


@pytest.mark.parametrize("cls", SNAPSHOT_CLASSES, ids=lambda c: c.__name__)
def test_snapshot_dataclasses_are_frozen(cls: type) -> None:
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    assert params.frozen is True
    bad = {f.name: list(mutable_parts(f.type)) for f in dataclasses.fields(cls) if not isinstance(f.type, str)}
    assert {name: parts for name, parts in bad.items() if parts} == {}
    hints = typing.get_type_hints(cls)
    assert {name: list(mutable_parts(hint)) for name, hint in hints.items() if list(mutable_parts(hint))} == {}


def test_snapshot_values_reject_assignment() -> None:
    state = snapshot_module.TenantState(tenant=Tenant(tenant_id="t"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        state.issues = ()  # type: ignore[misc]
    assert isinstance(state.workers, MappingProxyType)
    with pytest.raises(TypeError):
        state.workers["w"] = None  # type: ignore[index]
