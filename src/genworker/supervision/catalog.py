"""A worker's supervisor policy files as the API sees them: list (each file, or its error), write one,
attach one to a conversation, a duty or an experiment. Blocking; callers run it in a thread."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from genworker.fsutil import write_atomic
from genworker.ids import validate_id
from genworker.supervision.errors import PolicyError
from genworker.supervision.policy import SUPERVISORS_DIR, SupervisorPolicy, parse_policy

__all__ = ["AttachKind", "PolicyNotFound", "attach", "list_policies", "save_policy"]

AttachKind = Literal["conversation", "duty", "experiment", "all"]
_FIELD: dict[str, str] = {"conversation": "conversations", "duty": "duties", "experiment": "experiments"}


class PolicyNotFound(LookupError):
    pass


def list_policies(worker_dir: Path) -> list[dict[str, Any]]:
    """Each policy file: `{"file", "policy"}`, or `{"file", "error"}` for one that cannot be used."""
    folder = worker_dir / SUPERVISORS_DIR
    if not folder.is_dir():
        return []
    out: list[dict[str, Any]] = []
    for path in sorted(p for p in folder.iterdir() if p.suffix in (".json", ".md") and p.is_file()):
        rel = f"{SUPERVISORS_DIR}/{path.name}"
        try:
            out.append({"file": rel, "policy": parse_policy(path, path.read_text(encoding="utf-8")).model_dump()})
        except PolicyError as exc:
            out.append({"file": rel, "error": str(exc).replace(str(path), rel)})
    return out


def save_policy(worker_dir: Path, name: str, data: dict[str, Any]) -> SupervisorPolicy:
    """Write `supervisors/<name>.json` after validating it (PolicyError naming the field)."""
    path = worker_dir / SUPERVISORS_DIR / f"{validate_id(name, 'policy name')}.json"
    text = json.dumps({**data, "name": name}, ensure_ascii=False, indent=1)
    policy = parse_policy(path, text)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text.encode())
    return policy


def attach(worker_dir: Path, name: str, kind: AttachKind, target: str | None) -> SupervisorPolicy:
    """Attach policy `name` (a .json file) to `target` of `kind`; PolicyNotFound without that file."""
    path = worker_dir / SUPERVISORS_DIR / f"{validate_id(name, 'policy name')}.json"
    if not path.is_file():
        raise PolicyNotFound(f"no supervisor policy file {SUPERVISORS_DIR}/{name}.json")
    policy = parse_policy(path, path.read_text(encoding="utf-8"))
    attached = policy.attach.model_dump()
    if kind == "all":
        attached["all"] = True
    else:
        if not target:
            raise PolicyError(f"{SUPERVISORS_DIR}/{name}.json: attach.{_FIELD[kind]}: a {kind} id is required")
        attached[_FIELD[kind]] = list(dict.fromkeys([*attached[_FIELD[kind]], target]))
    return save_policy(worker_dir, name, {**policy.model_dump(), "attach": attached})
