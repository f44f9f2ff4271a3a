"""Where the model configuration comes from: environment variables or configs/litellm_local.json.

This is the one seam for non-local environments: a provider injected at start-up
(`ModelConfigProvider`) replaces `load_model_config`.

Environment (one step): GENWORKER_LLM_MODEL / _API_BASE / _API_KEY serve every tier;
GENWORKER_LLM_<TIER>_MODEL / _API_BASE / _API_KEY override one tier.
File: a LiteLLM Router `model_list` whose `model_name`s are the tier groups, plus an optional
`tier_aliases` {tier: group} when the groups are named differently.

When the model layer loads (GENWORKER_LLM_LOAD): `start` (the default) imports LiteLLM and builds
the groups while the server starts, so a ready server's first turn pays nothing; `first_use` defers
that to the first model call, for small always-on deployments that would rather idle with less
memory (LiteLLM holds about 180 MB) and pay a few seconds once (docs/configuration.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from genworker.llm.intent import Tier
from genworker.settings import Settings, SettingsError

__all__ = [
    "LITELLM_FILE",
    "LOAD_MODES",
    "TIERS",
    "ModelConfig",
    "ModelConfigProvider",
    "ModelConfigState",
    "load_model_config",
]

TIERS = tuple(t.value for t in Tier)
LITELLM_FILE = "litellm_local.json"
LOAD_MODES = ("start", "first_use")


@dataclass(frozen=True, slots=True)
class ModelConfigState:
    configured: bool
    source: str  # "environment", a file path, or "" when nothing is configured
    reason: str = ""
    error: bool = False  # a configuration exists but is unusable


@dataclass(frozen=True, slots=True)
class ModelConfig:
    state: ModelConfigState
    model_list: tuple[Mapping[str, Any], ...] = field(default=(), repr=False)
    tier_groups: Mapping[Tier, str] = field(default_factory=lambda: MappingProxyType({}))
    timeout_s: float = 60.0
    load_on_first_use: bool = False  # GENWORKER_LLM_LOAD=first_use: LiteLLM loads with the first call


ModelConfigProvider = Callable[[Settings], ModelConfig]


def load_model_config(settings: Settings) -> ModelConfig:
    """The configuration; SettingsError naming GENWORKER_LLM_LOAD when it is not one of LOAD_MODES."""
    load = settings.get("GENWORKER_LLM_LOAD", "start")
    if load not in LOAD_MODES:
        raise SettingsError(f"GENWORKER_LLM_LOAD={load!r}: must be one of {', '.join(LOAD_MODES)}")
    return replace(_configured(settings), load_on_first_use=load == "first_use")


def _configured(settings: Settings) -> ModelConfig:
    timeout = float(settings.get("GENWORKER_LLM_TIMEOUT", "60") or 60)
    if any(settings.get(f"GENWORKER_LLM{_tier_part(t)}_MODEL") for t in (None, *Tier)):
        return _from_env(settings, timeout)
    path = settings.configs_dir / LITELLM_FILE
    if path.is_file():
        return _from_file(path, timeout)
    reason = (
        f"no model configured: set GENWORKER_LLM_MODEL (and GENWORKER_LLM_API_KEY) in "
        f"{settings.configs_dir / 'config_local.env'}, or copy {path}.example to {path}"
    )
    return ModelConfig(ModelConfigState(False, "", reason))


_ENV_PARAMS = {"MODEL": "model", "API_BASE": "api_base", "API_KEY": "api_key"}
_DEFAULT_GROUP = "default"


def _tier_part(tier: Tier | None) -> str:
    return "" if tier is None else f"_{tier.value.upper()}"


def _from_env(settings: Settings, timeout: float) -> ModelConfig:
    """One deployment per distinct model: tiers left to the generic variables share the group
    `default`, and a fallback only ever moves to a different model. (LiteLLM's per-call pricing
    also slows down when one model is registered twice.)"""
    model_list: list[dict[str, Any]] = []
    groups: dict[Tier, str] = {}
    for tier in Tier:
        specific = {name: settings.get(f"GENWORKER_LLM{_tier_part(tier)}_{name}") for name in _ENV_PARAMS}
        values = {name: specific[name] or settings.get(f"GENWORKER_LLM_{name}") for name in _ENV_PARAMS}
        if not values["MODEL"]:
            continue
        params: dict[str, Any] = {"model": values["MODEL"], "timeout": timeout}
        params.update({_ENV_PARAMS[name]: value for name, value in values.items() if value and name != "MODEL"})
        same = next((m for m in model_list if m["litellm_params"] == params), None)
        if same is None:
            same = {"model_name": tier.value if any(specific.values()) else _DEFAULT_GROUP, "litellm_params": params}
            model_list.append(same)
        groups[tier] = same["model_name"]
    return ModelConfig(ModelConfigState(True, "environment"), tuple(model_list), MappingProxyType(groups), timeout)


def _from_file(path: Path, timeout: float) -> ModelConfig:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        return _broken(path, f"{path}:{exc.lineno}: invalid JSON: {exc.msg}")
    except OSError as exc:
        return _broken(path, f"{path}: cannot read: {exc.strerror}")
    try:
        models = _check_model_list(data)
        groups = _tier_groups(data, {str(m["model_name"]) for m in models})
    except ValueError as exc:
        return _broken(path, f"{path}: {exc}")
    return ModelConfig(ModelConfigState(True, str(path)), tuple(models), MappingProxyType(groups), timeout)


def _broken(path: Path, reason: str) -> ModelConfig:
    return ModelConfig(ModelConfigState(False, str(path), reason, error=True))


def _check_model_list(data: Any) -> list[dict[str, Any]]:
    models = data.get("model_list") if isinstance(data, dict) else None
    if not isinstance(models, list) or not models:
        raise ValueError("model_list must be a non-empty list")
    for index, entry in enumerate(models):
        if (
            not isinstance(entry, dict)
            or not entry.get("model_name")
            or not isinstance(entry.get("litellm_params"), dict)
        ):
            raise ValueError(f"model_list[{index}] needs model_name and litellm_params")
        if not entry["litellm_params"].get("model"):
            raise ValueError(f"model_list[{index}].litellm_params.model is required")
    return models


def _tier_groups(data: dict[str, Any], names: set[str]) -> dict[Tier, str]:
    aliases = data.get("tier_aliases") or {}
    if not isinstance(aliases, dict):
        raise ValueError("tier_aliases must be an object {tier: model group}")
    unknown = sorted(set(aliases) - set(TIERS))
    if unknown:
        raise ValueError(f"tier_aliases: unknown tiers {unknown} (use {', '.join(TIERS)})")
    groups: dict[Tier, str] = {}
    for tier in Tier:
        group = str(aliases.get(tier.value, tier.value))
        if group in names:
            groups[tier] = group
        elif tier.value in aliases:
            raise ValueError(f"tier_aliases.{tier.value}: no model group named {group!r} in model_list")
    if not groups:
        raise ValueError(f"no model group is named after a tier ({', '.join(TIERS)}); add tier_aliases")
    return groups
