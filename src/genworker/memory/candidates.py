"""Memory candidates (GoodBuddy §11.2): what a run proposes for worker or tenant scope waits here,
`proposed`, until an evaluation or a person approves it. A rejected candidate keeps only its
fingerprint, so the same thing is never suggested again and its text never reaches a context."""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from genworker.memory.jsonl import JsonlFile
from genworker.memory.models import Provenance

__all__ = ["Candidate", "CandidateStore", "fingerprint"]


def fingerprint(text: str) -> str:
    normal = re.sub(r"\W+", " ", text.casefold()).strip()
    return hashlib.sha256(normal.encode("utf-8")).hexdigest()[:32]


class Candidate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    candidate_id: str
    kind: Literal["fact", "rule", "preference", "summary"] = "fact"
    text: str  # emptied when rejected
    title: str = ""
    target: Literal["worker", "tenant"] = "worker"
    status: Literal["proposed", "approved", "rejected"] = "proposed"
    fingerprint: str
    created_at: datetime
    provenance: Provenance = Provenance()
    decided_by: str | None = None
    decided_at: datetime | None = None
    reason: str = ""


class CandidateStore:
    def __init__(self, memory_dir: Path) -> None:
        self.file: JsonlFile[Candidate] = JsonlFile(memory_dir / "candidates.jsonl", Candidate)

    def all(self) -> list[Candidate]:
        return self.file.load()

    def pending(self) -> list[Candidate]:
        return [c for c in self.all() if c.status == "proposed"]

    def get(self, candidate_id: str) -> Candidate:
        for c in self.all():
            if c.candidate_id == candidate_id:
                return c
        raise LookupError(f"no memory candidate {candidate_id!r}")

    def propose(
        self,
        text: str,
        *,
        kind: Literal["fact", "rule", "preference", "summary"] = "fact",
        title: str = "",
        target: Literal["worker", "tenant"] = "worker",
        provenance: Provenance | None = None,
        now: datetime | None = None,
    ) -> Candidate | None:
        """A new `proposed` candidate, or None when the same text was already proposed or rejected."""
        now = now or datetime.now(UTC)
        mark = fingerprint(text)
        made: list[Candidate] = []

        def change(records: list[Candidate]) -> None:
            if any(c.fingerprint == mark and c.target == target for c in records):
                return
            made.append(
                Candidate(
                    candidate_id=f"cand_{now:%Y%m%d%H%M%S}_{secrets.token_hex(4)}",
                    kind=kind,
                    text=text.strip(),
                    title=title,
                    target=target,
                    fingerprint=mark,
                    created_at=now,
                    provenance=provenance or Provenance(),
                )
            )
            records.append(made[0])

        self.file.update(change)
        return made[0] if made else None

    def decide(
        self, candidate_id: str, decision: Literal["approve", "reject"], by: str, *, reason: str = ""
    ) -> Candidate:
        """Approve or reject a pending candidate. Unknown id: LookupError; already decided: ValueError."""
        if not by.strip():
            raise ValueError("a memory candidate is decided by someone: 'by' must not be empty")
        decided: list[Candidate] = []

        def change(records: list[Candidate]) -> None:
            for c in records:
                if c.candidate_id != candidate_id:
                    continue
                if c.status != "proposed":
                    raise ValueError(f"memory candidate {candidate_id!r} was already {c.status}")
                c.status = "approved" if decision == "approve" else "rejected"
                c.decided_by, c.decided_at, c.reason = by, datetime.now(UTC), reason
                if c.status == "rejected":
                    c.text, c.title = "", ""  # keep only the fingerprint
                decided.append(c.model_copy())
                return
            raise LookupError(f"no memory candidate {candidate_id!r}")

        self.file.update(change)
        return decided[0]

    def rejected_fingerprints(self) -> Sequence[str]:
        return [c.fingerprint for c in self.all() if c.status == "rejected"]
