"""Typed runtime settings, loaded from layered env files exactly once.

Precedence, lowest first (seed §5.6):
  1. configs/config.env
  2. the env file chosen by ENVIRONMENT / ENV (configs/config_{env}.env; default "local")
  3. configs/config_local.env, when step 2 was not already it
  4. the process environment
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

__all__ = ["Settings", "SettingsError", "load_layered_env", "load_settings", "parse_env_file"]

_LINE = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class SettingsError(ValueError):
    """A setting or env file is invalid; the message names the key and where it came from."""


def parse_env_file(path: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if match is None:
            raise SettingsError(f"{path}:{number}: expected KEY=VALUE, got {raw!r}")
        key, value = match.groups()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        elif " #" in value:
            value = value.split(" #", 1)[0].rstrip()
        values[key] = value
    return values


def load_layered_env(
    configs_dir: Path, environ: Mapping[str, str] | None = None
) -> tuple[dict[str, str], dict[str, str]]:
    """Merge the layers; return (values, source of each key)."""
    environ = os.environ if environ is None else environ
    values: dict[str, str] = {}
    sources: dict[str, str] = {}

    def layer(path: Path) -> None:
        if path.is_file():
            for key, value in parse_env_file(path).items():
                values[key] = value
                sources[key] = str(path)

    layer(configs_dir / "config.env")
    environment = environ.get("ENVIRONMENT") or environ.get("ENV") or values.get("ENVIRONMENT") or "local"
    if not re.fullmatch(r"[A-Za-z0-9_-]+", environment):
        raise SettingsError(f"ENVIRONMENT={environment!r}: use letters, digits, '_' or '-'")
    chosen = configs_dir / f"config_{environment}.env"
    layer(chosen)
    if chosen.name != "config_local.env":
        layer(configs_dir / "config_local.env")
    for key, value in environ.items():
        values[key] = value
        sources[key] = "environment"
    values["ENVIRONMENT"] = environment
    sources.setdefault("ENVIRONMENT", "default")
    return values, sources


@dataclass(frozen=True, slots=True)
class Settings:
    environment: str = "local"
    profile: Literal["local", "shared"] = "local"
    http_host: str = "127.0.0.1"
    http_port: int = 8000
    workspace: Path = Path("workspace")
    configs_dir: Path = Path("configs")
    log_level: str = "INFO"
    redis_url: str | None = None
    default_tenant: str | None = None
    governance_required: bool = False
    hot_reload: bool = True
    hot_reload_debounce_ms: int = 150
    admin_token: str | None = field(default=None, repr=False)
    cors_origins: tuple[str, ...] = ()
    values: Mapping[str, str] = field(default_factory=dict, repr=False)
    sources: Mapping[str, str] = field(default_factory=dict, repr=False)
    warnings: tuple[str, ...] = ()

    def get(self, key: str, default: str | None = None) -> str | None:
        """A raw merged value, for settings owned by other components (e.g. GENWORKER_LLM_*)."""
        value = self.values.get(key)
        return default if value in (None, "") else value

    def number(self, key: str, default: float, low: float, high: float) -> float:
        """A numeric setting owned by another component; SettingsError naming the key when it is not
        a number in [low, high]."""
        raw = self.get(key)
        if raw is None:
            return default
        try:
            value = float(raw)
        except ValueError:
            raise SettingsError(f"{key}={raw!r}: must be a number") from None
        if not low <= value <= high:
            raise SettingsError(f"{key}={raw!r}: must be between {_plain(low)} and {_plain(high)}")
        return value

    def flag(self, key: str, default: bool) -> bool:
        """A true / false setting owned by another component; SettingsError naming the key otherwise."""
        if self.get(key) is None:
            return default
        return _Reader(self.values, self.sources).boolean(key, default)


def load_settings(
    configs_dir: Path | None = None,
    environ: Mapping[str, str] | None = None,
    **overrides: object,
) -> Settings:
    environ = os.environ if environ is None else environ
    configs_dir = (configs_dir or Path(environ.get("GENWORKER_CONFIG_DIR") or "configs")).resolve()
    values, sources = load_layered_env(configs_dir, environ)
    reader = _Reader(values, sources)
    home = configs_dir.parent
    redis_url = reader.text("REDIS_URL")
    profile = reader.choice("GENWORKER_PROFILE", ("local", "shared"), "shared" if redis_url else "local")
    warnings = []
    if profile == "shared" and not redis_url:
        warnings.append("GENWORKER_PROFILE=shared but REDIS_URL is not set: running with local file backends")
    if profile == "local" and redis_url:
        warnings.append("REDIS_URL is set but GENWORKER_PROFILE=local: Redis is not used")
    settings = Settings(
        environment=values["ENVIRONMENT"],
        profile=profile,  # type: ignore[arg-type]
        http_host=reader.text("HTTP_HOST") or "127.0.0.1",
        http_port=reader.integer("HTTP_PORT", 8000, 1, 65535),
        workspace=_path(home, reader.text("GENWORKER_WORKSPACE") or "workspace"),
        configs_dir=configs_dir,
        log_level=reader.choice("LOG_LEVEL", ("DEBUG", "INFO", "WARNING", "ERROR"), "INFO", upper=True),
        redis_url=redis_url if profile == "shared" else None,
        default_tenant=reader.text("GENWORKER_DEFAULT_TENANT"),
        governance_required=reader.boolean("WORKER_GOVERNANCE_REQUIRED", False),
        hot_reload=reader.boolean("GENWORKER_HOT_RELOAD", True),
        hot_reload_debounce_ms=reader.integer("GENWORKER_HOT_RELOAD_DEBOUNCE_MS", 150, 1, 60000),
        admin_token=reader.text("GENWORKER_ADMIN_TOKEN"),
        cors_origins=reader.origins("GENWORKER_CORS_ORIGINS"),
        values=values,
        sources=sources,
        warnings=tuple(warnings),
    )
    return replace(settings, **overrides) if overrides else settings  # type: ignore[arg-type]


def _path(home: Path, value: str) -> Path:
    path = Path(value).expanduser()
    return (path if path.is_absolute() else home / path).resolve()


@dataclass(frozen=True, slots=True)
class _Reader:
    values: Mapping[str, str]
    sources: Mapping[str, str]

    def _where(self, key: str) -> str:
        return f"{key}={self.values[key]!r} (from {self.sources.get(key, 'default')})"

    def text(self, key: str) -> str | None:
        value = self.values.get(key, "").strip()
        return value or None

    def integer(self, key: str, default: int, low: int, high: int) -> int:
        raw = self.text(key)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise SettingsError(f"{self._where(key)}: must be an integer") from None
        if not low <= value <= high:
            raise SettingsError(f"{self._where(key)}: must be between {low} and {high}")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        raw = self.values.get(key)
        if raw is None:
            return default
        lowered = raw.strip().lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise SettingsError(f"{self._where(key)}: must be true or false")

    def origins(self, key: str) -> tuple[str, ...]:
        """Comma-separated browser origins (scheme://host[:port]); empty: none."""
        origins = tuple(o.strip().rstrip("/") for o in (self.text(key) or "").split(",") if o.strip())
        for origin in origins:
            if not re.fullmatch(r"https?://[^/\s*]+", origin):
                raise SettingsError(f"{self._where(key)}: {origin!r} is not an origin like https://app.example.com")
        return origins

    def choice(self, key: str, allowed: tuple[str, ...], default: str, *, upper: bool = False) -> str:
        raw = self.text(key)
        if raw is None:
            return default
        value = raw.upper() if upper else raw.lower()
        if value not in allowed:
            raise SettingsError(f"{self._where(key)}: must be one of {', '.join(allowed)}")
        return value


def _plain(value: float) -> str:
    """2592000, not 2.592e+06; 0.5 stays 0.5."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
