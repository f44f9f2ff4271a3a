"""A winner's candidate version: the production file of the target skill (SKILL.md) or duty with the
winning variant's instructions and settings added at its end. It is written beside the experiment
(store.py), never over the production file; a person adopts it by copying it."""

from __future__ import annotations

import hashlib
from pathlib import Path

from genworker.experiments.errors import SpecError
from genworker.experiments.models import Target, Variant
from genworker.workspace.snapshot import Worker

__all__ = ["candidate_text", "target_file"]


def target_file(worker: Worker, target: Target) -> str:
    """The target's workspace-relative production file; SpecError when the worker has no such target."""
    if target.kind == "skill":
        skill = worker.skills.get(target.id)
        if skill is None:
            raise SpecError(f"target.id: worker {worker.worker_id!r} has no skill {target.id!r}")
        return skill.file
    if target.id not in worker.duties:
        raise SpecError(f"target.id: worker {worker.worker_id!r} has no duty {target.id!r}")
    default = f"tenants/{worker.tenant_id}/workers/{worker.worker_id}/duties/{target.id}.md"
    return worker.files.get(f"duty:{target.id}", default)


def candidate_text(root: Path, production: str, experiment_id: str, name: str, winner: Variant) -> tuple[str, str]:
    """(the candidate file's text, the sha256 of the production file it was made from). Blocking."""
    path = root / production
    base = path.read_text(encoding="utf-8") if path.is_file() else ""
    chosen = (("skill", winner.skill), ("tier", winner.tier), ("tools", winner.tools))
    settings = [f"- {k}: {v}" for k, v in chosen if v is not None]
    section = [
        "",
        f"## Candidate from experiment {experiment_id} (variant {name})",
        "",
        f"A candidate version of `{production}`: nothing here is in production until a person adopts it.",
        *(["", *settings] if settings else []),
        *(["", winner.instructions.strip()] if winner.instructions.strip() else []),
        "",
    ]
    return base.rstrip("\n") + "\n" + "\n".join(section), hashlib.sha256(base.encode("utf-8")).hexdigest()
