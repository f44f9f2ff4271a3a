"""OwnerMemory: one owner's (a worker's or a tenant's) episode files plus their derived index.

The one write path: the episode file first (atomic), then the index, best effort — an index
failure is logged and repaired by the next `sync` or `reindex`, never raised to the run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from genworker.memory.episodes import EpisodeStore
from genworker.memory.index import MemoryIndex
from genworker.memory.models import Episode
from genworker.write_journal import DIRECT, DurableFiles

__all__ = ["INDEX_FILE", "OwnerMemory"]

log = logging.getLogger(__name__)

INDEX_FILE = "memory_index.sqlite3"


class OwnerMemory:
    def __init__(
        self,
        memory_dir: Path,
        runtime_dir: Path,
        *,
        half_life_days: float = 30.0,
        embed: Callable[[Sequence[str]], list[list[float]]] | None = None,
        files: DurableFiles = DIRECT,
    ) -> None:
        self.episodes = EpisodeStore(memory_dir, files)
        self.index = MemoryIndex(
            runtime_dir / INDEX_FILE, self.episodes.scan, half_life_days=half_life_days, embed=embed
        )
        self._synced = False

    @property
    def synced(self) -> bool:
        """Whether `sync()` has nothing left to do (it ran in this process, and no write failed since)."""
        return self._synced

    def write(self, episode: Episode) -> Path:
        """File first; then the index, whose failure is logged and left for the next sync."""
        path = self.episodes.write(episode)
        self.index_episode(episode)
        return path

    def index_episode(self, episode: Episode) -> None:
        """Add a written episode to the index; a failure is logged and left for the next sync."""
        try:
            self.index.add([episode])
        except Exception:
            log.exception("memory: episode %s is stored but not indexed; the next sync indexes it", episode.episode_id)
            self._synced = False

    def sync(self) -> int:
        """Bring the index in line with the files (episodes written while indexing failed, files
        removed or added by hand); the number of episodes added. Runs once per process unless a
        write failed since."""
        if self._synced:
            return 0
        on_disk = {p.stem for p in self.episodes.folder.glob("ep_*.md")} if self.episodes.folder.is_dir() else set()
        indexed = self.index.ids()
        missing = sorted(on_disk - indexed)
        gone = sorted(indexed - on_disk)
        if gone:
            self.index.remove(gone)
        added = []
        for episode_id in missing:
            try:
                added.append(self.episodes.read(episode_id))
            except (OSError, ValueError) as exc:
                log.warning("memory: cannot index %s: %s", episode_id, exc)
        if added:
            self.index.add(added)
        self._synced = True
        return len(added)

    def reindex(self, progress: Callable[[int, int], None] | None = None) -> int:
        count = self.index.rebuild(progress)
        self._synced = True
        return count
