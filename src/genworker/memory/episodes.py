"""EpisodeStore: one folder of episode Markdown files, the source of truth of episodic memory.

Writes are atomic (temp file + fsync + rename); a file that cannot be parsed is reported with its
path and skipped by `scan`, never deleted. Archived episodes move to `memory/archive/episodes/`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from genworker.fsutil import file_lock
from genworker.ids import safe_join, validate_id
from genworker.memory.errors import MemoryFileError
from genworker.memory.models import Episode, parse_episode, render_episode
from genworker.write_journal import DIRECT, DurableFiles

__all__ = ["EpisodeStore", "ScanIssue", "tenant_memory_dir", "worker_memory_dir", "worker_runtime_dir"]

log = logging.getLogger(__name__)


def worker_memory_dir(root: Path, tenant_id: str, worker_id: str) -> Path:
    return (
        safe_join(root, "tenants", tenant_id, kind="tenant id")
        / "workers"
        / validate_id(worker_id, "worker id")
        / "memory"
    )


def worker_runtime_dir(root: Path, tenant_id: str, worker_id: str) -> Path:
    return worker_memory_dir(root, tenant_id, worker_id).parent / "runtime"


def tenant_memory_dir(root: Path, tenant_id: str) -> Path:
    return safe_join(root, "tenants", tenant_id, kind="tenant id") / "memory"


@dataclass(frozen=True, slots=True)
class ScanIssue:
    path: Path
    error: str


class EpisodeStore:
    """Episodes of one owner (a worker or a tenant) under `memory_dir/episodes/`."""

    def __init__(self, memory_dir: Path, files: DurableFiles = DIRECT) -> None:
        self.memory_dir = memory_dir
        self.files = files  # how writes are made durable (write_journal.py)
        self.folder = memory_dir / "episodes"
        self.archive = memory_dir / "archive" / "episodes"

    def path_of(self, episode_id: str) -> Path:
        return self.folder / f"{validate_id(episode_id, 'episode id')}.md"

    def write(self, episode: Episode) -> Path:
        path = self.path_of(episode.episode_id)
        self.files.write_atomic(path, render_episode(episode).encode("utf-8"), mode=0o644)
        return path

    def read(self, episode_id: str) -> Episode:
        path = self.path_of(episode_id)
        return parse_episode(path.read_text(encoding="utf-8"), path)

    def exists(self, episode_id: str) -> bool:
        return self.path_of(episode_id).is_file()

    def reinforce(self, episode_id: str, *, boost: float, now: datetime | None = None) -> Episode | None:
        """Raise an episode's weight after it was recalled and used; None if it is gone."""
        with file_lock(self.memory_dir / ".episodes.lock"):
            try:
                episode = self.read(episode_id)
            except FileNotFoundError:
                return None
            updated = episode.model_copy(
                update={
                    "weight": episode.weight + boost,
                    "reinforced_at": now or datetime.now(UTC),
                    "recall_count": episode.recall_count + 1,
                }
            )
            self.write(updated)
            return updated

    def archive_episode(self, episode_id: str) -> Path:
        target = self.archive / f"{validate_id(episode_id, 'episode id')}.md"
        self.archive.mkdir(parents=True, exist_ok=True)
        self.files.move_file(self.path_of(episode_id), target)
        return target

    def scan(self, issues: list[ScanIssue] | None = None) -> Iterator[Episode]:
        """Every readable episode, oldest id first; unreadable files go to `issues` (and the log)."""
        if not self.folder.is_dir():
            return
        for path in sorted(self.folder.glob("ep_*.md")):
            try:
                yield parse_episode(path.read_text(encoding="utf-8"), path)
            except (MemoryFileError, OSError, UnicodeDecodeError) as exc:
                log.warning("memory: skipping episode %s", exc)
                if issues is not None:
                    issues.append(ScanIssue(path, str(exc)))
