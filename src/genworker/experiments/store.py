"""Where experiments are kept: `tenants/<t>/workers/<w>/runtime/experiments/<id>.json` (schema_version
1, written atomically), and a winner's candidate file beside it, `<id>/candidate.md`. This module is the
package's only writer, and it writes only under the worker's `runtime/experiments/`
(tests/structural/test_experiments_boundaries.py)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from genworker.experiments.errors import ExperimentFileError, ExperimentNotFound
from genworker.experiments.models import SCHEMA_VERSION, Experiment
from genworker.fsutil import create_exclusive, write_atomic
from genworker.ids import safe_join, validate_id

__all__ = ["ExperimentStore"]

FOLDER = ("runtime", "experiments")


class ExperimentStore:
    """Blocking file operations; the service calls them in threads."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def folder(self, tenant_id: str, worker_id: str) -> Path:
        return safe_join(self.root, "tenants", tenant_id, "workers", worker_id).joinpath(*FOLDER)

    def path(self, tenant_id: str, worker_id: str, experiment_id: str) -> Path:
        return self.folder(tenant_id, worker_id) / f"{validate_id(experiment_id, 'experiment id')}.json"

    def create(self, experiment: Experiment) -> bool:
        """Store a new experiment; False when one with its id exists."""
        path = self.path(experiment.tenant_id, experiment.worker_id, experiment.experiment_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        return create_exclusive(path, _encode(experiment))

    def save(self, experiment: Experiment) -> None:
        path = self.path(experiment.tenant_id, experiment.worker_id, experiment.experiment_id)
        write_atomic(path, _encode(experiment))

    def get(self, tenant_id: str, worker_id: str, experiment_id: str) -> Experiment:
        path = self.path(tenant_id, worker_id, experiment_id)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raise ExperimentNotFound(experiment_id) from None
        return _decode(path, raw)

    def listed(self, tenant_id: str, worker_id: str) -> list[Experiment]:
        """The worker's experiments, newest first; a file that cannot be read is left out."""
        found = []
        for path in sorted(self.folder(tenant_id, worker_id).glob("*.json")):
            try:
                found.append(_decode(path, path.read_bytes()))
            except (OSError, ExperimentFileError):
                continue
        return sorted(found, key=lambda e: e.created_at, reverse=True)

    def all_running(self) -> list[Experiment]:
        """Every tenant's running experiments (what a restart looks at)."""
        found = []
        for path in sorted(self.root.glob("tenants/*/workers/*/runtime/experiments/*.json")):
            try:
                experiment = _decode(path, path.read_bytes())
            except (OSError, ExperimentFileError):
                continue
            if experiment.state == "running":
                found.append(experiment)
        return found

    def write_candidate(self, experiment: Experiment, text: str) -> str:
        """The winner's candidate file; its path relative to the worker folder."""
        folder = self.folder(experiment.tenant_id, experiment.worker_id) / validate_id(experiment.experiment_id)
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(folder / "candidate.md", text.encode("utf-8"), mode=0o644)
        return "/".join((*FOLDER, experiment.experiment_id, "candidate.md"))


def _encode(experiment: Experiment) -> bytes:
    return json.dumps(experiment.model_dump(mode="json"), ensure_ascii=False, indent=1).encode("utf-8")


def _decode(path: Path, raw: bytes) -> Experiment:
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise ExperimentFileError(f"{path}: not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        version = data.get("schema_version") if isinstance(data, dict) else None
        raise ExperimentFileError(f"{path}: schema_version: {version!r} is not supported (only {SCHEMA_VERSION})")
    try:
        return Experiment.model_validate_json(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise ExperimentFileError(f"{path}: {field}: {first['msg']}") from None
