"""Where the model configuration comes from: environment variables or configs/litellm_local.json.

This is the one seam for non-local environments: a provider injected at start-up replaces
`detect_model_config`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from genworker.settings import Settings

__all__ = ["TIERS", "ModelConfigState", "detect_model_config"]

TIERS = ("fast", "standard", "strong", "reasoning")
LITELLM_FILE = "litellm_local.json"


@dataclass(frozen=True, slots=True)
class ModelConfigState:
    configured: bool
    source: str  # "environment", a file path, or "" when nothing is configured
    reason: str = ""
    error: bool = False  # a configuration exists but is unusable


def detect_model_config(settings: Settings) -> ModelConfigState:
    env_keys = ["GENWORKER_LLM_MODEL", *(f"GENWORKER_LLM_{t.upper()}_MODEL" for t in TIERS)]
    if any(settings.get(key) for key in env_keys):
        return ModelConfigState(True, "environment")
    path = settings.configs_dir / LITELLM_FILE
    if path.is_file():
        return _from_file(path)
    return ModelConfigState(
        False,
        "",
        f"no model configured: set GENWORKER_LLM_MODEL (and GENWORKER_LLM_API_KEY) in "
        f"{settings.configs_dir / 'config_local.env'}, or copy {path}.example to {path}",
    )


def _from_file(path: Path) -> ModelConfigState:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        return ModelConfigState(False, str(path), f"{path}:{exc.lineno}: invalid JSON: {exc.msg}", error=True)
    except OSError as exc:
        return ModelConfigState(False, str(path), f"{path}: cannot read: {exc.strerror}", error=True)
    models = data.get("model_list") if isinstance(data, dict) else None
    if not isinstance(models, list) or not models:
        return ModelConfigState(False, str(path), f"{path}: model_list must be a non-empty list", error=True)
    for index, entry in enumerate(models):
        if (
            not isinstance(entry, dict)
            or not entry.get("model_name")
            or not isinstance(entry.get("litellm_params"), dict)
        ):
            return ModelConfigState(
                False,
                str(path),
                f"{path}: model_list[{index}] needs model_name and litellm_params",
                error=True,
            )
    return ModelConfigState(True, str(path))
