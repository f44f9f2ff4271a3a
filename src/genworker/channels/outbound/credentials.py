"""Reading and editing a worker's CHANNEL_CREDENTIALS.json for the IM configuration API.

Secrets are write-only: `credentials_view` shows each secret field as "set" or "unset" and
only plain fields (addresses, hosts, ports) as values; `credential_fields` says which is which.
`save_credentials` merges a partial update into the stored file (a field omitted keeps its
stored value, a field or platform set to null is removed), validates the whole result with the
workspace's credential models, and only then replaces the file atomically (0600) under a lock,
so a bad update changes nothing.
"""

from __future__ import annotations

import json
import logging
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, SecretStr, ValidationError

from genworker.fsutil import file_lock, write_atomic
from genworker.workspace.models.credentials import ChannelCredentials

__all__ = [
    "CREDENTIALS_FILE",
    "SCHEMA_VERSION",
    "CredentialsError",
    "credential_fields",
    "credentials_view",
    "save_credentials",
]

log = logging.getLogger("genworker.channels")

CREDENTIALS_FILE = "CHANNEL_CREDENTIALS.json"
SCHEMA_VERSION = 1
_MODELS: dict[str, type[BaseModel]] = {
    name: _model
    for name, info in ChannelCredentials.model_fields.items()
    for _model in get_args(info.annotation)
    if isinstance(_model, type) and issubclass(_model, BaseModel)
}


class CredentialsError(ValueError):
    """The update is invalid; `problems` name each field at fault (never its value)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def _is_secret(annotation: Any) -> bool:
    if annotation is SecretStr:
        return True
    if get_origin(annotation) in (Union, types.UnionType):
        return SecretStr in get_args(annotation)
    return False


def credentials_view(credentials: ChannelCredentials | None) -> dict[str, dict[str, Any]]:
    view: dict[str, dict[str, Any]] = {}
    for platform in _MODELS:
        section = getattr(credentials, platform, None) if credentials is not None else None
        if section is None:
            continue
        fields: dict[str, Any] = {}
        for name, info in type(section).model_fields.items():
            value = getattr(section, name)
            if _is_secret(info.annotation):
                fields[name] = "set" if value is not None else "unset"
            else:
                fields[name] = value
        view[platform] = fields
    return view


def credential_fields() -> dict[str, list[dict[str, Any]]]:
    """Each platform's fields, for a form: name, type, whether it is a secret (write-only) or required."""
    return {
        platform: [
            {
                "name": name,
                "type": "integer" if int in (info.annotation, *get_args(info.annotation)) else "string",
                "secret": _is_secret(info.annotation),
                "required": info.is_required(),
            }
            for name, info in model.model_fields.items()
        ]
        for platform, model in _MODELS.items()
    }


def _check_shape(update: Mapping[str, Any]) -> list[str]:
    problems = []
    for platform, section in update.items():
        model = _MODELS.get(platform)
        if model is None:
            problems.append(f"credentials.{platform}: unknown platform (expected one of {', '.join(_MODELS)})")
        elif section is not None and not isinstance(section, Mapping):
            problems.append(f"credentials.{platform}: must be an object or null")
        elif section is not None:
            problems.extend(
                f"credentials.{platform}.{key}: unknown field" for key in sorted(set(section) - set(model.model_fields))
            )
    return problems


def _merge(stored: dict[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    merged = {k: v for k, v in stored.items() if k in _MODELS and isinstance(v, dict)}
    for platform, section in update.items():
        if section is None:
            merged.pop(platform, None)
            continue
        fields = dict(merged.get(platform) or {})
        for key, value in section.items():
            if value is None:
                fields.pop(key, None)
            else:
                fields[key] = value
        merged[platform] = fields
    return merged


def _read_stored(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        log.warning("[Channels] %s is unreadable (%s): it will be replaced", path, type(exc).__name__)
        return {}
    return data if isinstance(data, dict) else {}


def save_credentials(worker_folder: Path, update: Mapping[str, Any]) -> ChannelCredentials:
    """Merge `update` ({platform: {field: value | None} | None}) into the file; the new credentials.

    Raises CredentialsError (nothing written) when the update or the merged result is invalid.
    Blocking: call it from a thread in async code.
    """
    problems = _check_shape(update)
    if problems:
        raise CredentialsError(problems)
    path = worker_folder / CREDENTIALS_FILE
    with file_lock(worker_folder / "runtime" / "channel-credentials.lock"):
        merged = _merge(_read_stored(path), update)
        try:
            credentials = ChannelCredentials.model_validate(merged)
        except ValidationError as exc:
            raise CredentialsError(
                [f"credentials.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
            ) from None
        body = {"schema_version": SCHEMA_VERSION, **merged}
        write_atomic(path, (json.dumps(body, indent=2, ensure_ascii=False) + "\n").encode("utf-8"), mode=0o600)
    return credentials
