"""Small workspaces on disk, written from text, for the workspace loader tests."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from genworker.workspace.errors import Issue, WorkspaceError
from genworker.workspace.models import Tenant
from genworker.workspace.registry import WorkspaceRegistry
from genworker.workspace.scan import Scope
from genworker.workspace.snapshot import Skill, Worker
from genworker.workspace.worker_loader import load_worker


def text(value: str) -> str:
    """Dedent a triple-quoted file body so that `---` starts the file."""
    return textwrap.dedent(value).lstrip("\n")


class WorkspaceFiles:
    """Writes workspace files under `root`; paths are relative to it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def write(self, rel: str, body: str) -> Path:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text(body), encoding="utf-8")
        return path

    def files(self, files: Mapping[str, str]) -> None:
        for rel, body in files.items():
            self.write(rel, body)

    def tenant(self, tenant_id: str = "acme", **fields: Any) -> Path:
        data = {"tenant_id": tenant_id, **fields}
        return self.write(f"tenants/{tenant_id}/TENANT.json", json.dumps(data, indent=2))

    def worker_dir(self, tenant_id: str = "acme", worker_id: str = "w") -> Path:
        return self.root / "tenants" / tenant_id / "workers" / worker_id

    def persona(
        self, tenant_id: str = "acme", worker_id: str = "w", extra: str = "", body: str = "Be helpful."
    ) -> Path:
        """PERSONA.md with an identity; `extra` is more top-level YAML (dedented)."""
        front = f"identity:\n  name: {worker_id.title()}\n  worker_id: {worker_id}\n" + text(extra)
        return self.write(f"tenants/{tenant_id}/workers/{worker_id}/PERSONA.md", f"---\n{front}---\n{body}\n")

    def duty(
        self,
        duty_id: str,
        extra: str = "",
        body: str = "Do the work.",
        *,
        tenant_id: str = "acme",
        worker_id: str = "w",
        file: str | None = None,
    ) -> Path:
        front = f"duty_id: {duty_id}\ntitle: {duty_id} duty\n" + text(extra)
        name = file or f"{duty_id}.md"
        return self.write(f"tenants/{tenant_id}/workers/{worker_id}/duties/{name}", f"---\n{front}---\n{body}\n")

    def skill(self, folder: str, name: str | None = None, extra: str = "", body: str = "Use it well.") -> Path:
        """A SKILL.md in `folder` (relative to the root, or absolute)."""
        front = f"name: {name or Path(folder).name}\ndescription: The {Path(folder).name} skill.\n" + text(extra)
        path = Path(folder) if Path(folder).is_absolute() else self.root / folder
        path.mkdir(parents=True, exist_ok=True)
        (path / "SKILL.md").write_text(f"---\n{front}---\n{body}\n", encoding="utf-8")
        return path / "SKILL.md"

    def registry(self, product_skills: Path | None = None) -> WorkspaceRegistry:
        registry = WorkspaceRegistry(self.root, product_skills=product_skills)
        registry.load_all()
        return registry

    def load_worker(
        self, tenant_id: str = "acme", worker_id: str = "w", inherited: Mapping[str, Skill] | None = None
    ) -> tuple[Worker, list[Issue]]:
        scope = Scope(self.root.resolve())
        folder = scope.root / "tenants" / tenant_id / "workers" / worker_id
        return load_worker(scope, Tenant(tenant_id=tenant_id), folder, inherited or {})

    def worker_errors(self, tenant_id: str = "acme", worker_id: str = "w") -> list[Issue]:
        with pytest.raises(WorkspaceError) as caught:
            self.load_worker(tenant_id, worker_id)
        return [i for i in caught.value.issues if i.severity == "error"]


@pytest.fixture
def ws(tmp_path: Path) -> WorkspaceFiles:
    return WorkspaceFiles(tmp_path / "ws")


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder next to the workspace, for symlinks that must be refused."""
    path = tmp_path / "outside"
    path.mkdir()
    return path
