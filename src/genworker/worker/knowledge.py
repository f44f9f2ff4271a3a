"""Knowledge sources of a service worker (PERSONA `service.knowledge_sources`): files and folders in
its worker folder, searched for each message and offered to the context next to recalled memory.

A source names paths (`path`, `paths`, or a plain relative path; `knowledge_paths`). Text files
under them are cut into passages (a paragraph, with the heading above it); a passage scores one
point per distinct word of the message it contains (CJK text: per character pair), and the best
few go into the prompt as `knowledge:<file>` items. Files are re-read only when they change.
Anything outside the worker folder (a symlink out of it, a URL such as wiki://...) is not read.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from genworker.ids import is_inside
from genworker.memory.models import MemoryItem
from genworker.workspace.models.persona import knowledge_paths
from genworker.workspace.snapshot import Worker

__all__ = ["KnowledgeSearch", "Passage"]

log = logging.getLogger("genworker.worker.knowledge")

TEXT_SUFFIXES = frozenset({".md", ".markdown", ".txt", ".rst", ".csv", ".json", ".yaml", ".yml", ".html"})
MAX_FILES = 500  # per worker, across its sources
MAX_FILE_BYTES = 512_000
MAX_PASSAGE_CHARS = 800
HITS = 3
_WORD = re.compile(r"[0-9a-z]+(?:['-][0-9a-z]+)*")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]+")
_STOP = frozenset(
    (
        "a", "an", "and", "are", "as", "at", "be", "but", "by", "can", "could", "did", "do", "does", "for", "from",
        "had", "has", "have", "how", "i", "if", "in", "into", "is", "it", "its", "me", "my", "no", "not", "of",
        "on", "or", "our", "so", "than", "that", "the", "their", "them", "then", "there", "these", "they", "this",
        "to", "us", "was", "we", "were", "what", "when", "where", "which", "who", "why", "will", "with", "would",
        "you", "your",
    )
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Passage:
    path: str  # relative to the worker folder
    text: str


def terms(text: str) -> frozenset[str]:
    """The words of `text` a passage is scored on: lower-cased words of two or more letters (not stop
    words; a hyphenated word also as its parts), and each pair of neighbouring CJK characters."""
    lowered = text.lower()
    found = _WORD.findall(lowered)
    found += [part for w in found if "-" in w for part in w.split("-")]  # sign-in: also sign
    words = {w for w in found if len(w) > 1 and w not in _STOP}
    for run in _CJK.findall(lowered):
        words.update(run[i : i + 2] for i in range(max(1, len(run) - 1)))
    return frozenset(words)


def passages(text: str) -> list[str]:
    """Paragraphs, each Markdown heading joined to the paragraph under it, cut to MAX_PASSAGE_CHARS."""
    found: list[str] = []
    heading = ""
    for block in re.split(r"\n\s*\n", text):
        block = block.strip()
        if not block:
            continue
        if block.startswith("#") and "\n" not in block:
            heading = block.lstrip("#").strip()
            continue
        body = f"{heading}: {block}" if heading else block
        found.append(body[:MAX_PASSAGE_CHARS])
    return found


class KnowledgeSearch:
    """Searches a worker's knowledge files; thread-safe enough for `asyncio.to_thread` (the cache
    maps a file's path and stat to its passages, and replacing an entry is atomic)."""

    def __init__(self, workspace_root: Path) -> None:
        self.root = workspace_root
        self._cache: dict[Path, tuple[int, int, tuple[tuple[str, frozenset[str]], ...]]] = {}

    def search(self, worker: Worker, text: str, limit: int = HITS) -> list[MemoryItem]:
        """The best `limit` passages of the worker's knowledge sources for `text` (blocking I/O)."""
        wanted = terms(text)
        sources = worker.persona.service.knowledge_sources
        if not wanted or not sources:
            return []
        folder = self.root / "tenants" / worker.tenant_id / "workers" / worker.worker_id
        scored: list[tuple[int, int, Passage]] = []
        for order, (rel, path) in enumerate(self._files(folder, sources)):
            for body, words in self._passages(path):
                score = len(wanted & words)
                if score:
                    scored.append((score, -order, Passage(rel, body)))
        scored.sort(key=lambda s: (s[0], s[1]), reverse=True)
        return [MemoryItem(f"[knowledge] {p.text}", f"knowledge:{p.path}") for _, _, p in scored[:limit]]

    def _files(self, folder: Path, sources: tuple[object, ...]) -> Iterator[tuple[str, Path]]:
        seen: set[Path] = set()
        for source in sources:
            for rel in knowledge_paths(source):  # type: ignore[arg-type]
                start = folder / rel
                if not start.exists() or not is_inside(folder, start):
                    continue
                for path in _walk(start):
                    if len(seen) >= MAX_FILES:
                        log.warning(
                            "%s: knowledge sources hold over %d files; the rest is not searched", folder, MAX_FILES
                        )
                        return
                    if path not in seen and is_inside(folder, path):
                        seen.add(path)
                        yield path.relative_to(folder).as_posix(), path

    def _passages(self, path: Path) -> tuple[tuple[str, frozenset[str]], ...]:
        try:
            stat = path.stat()
        except OSError:
            return ()
        cached = self._cache.get(path)
        if cached is not None and cached[:2] == (stat.st_mtime_ns, stat.st_size):
            return cached[2]
        if stat.st_size > MAX_FILE_BYTES:
            log.warning("knowledge file %s is over %d bytes: not searched", path, MAX_FILE_BYTES)
            found: tuple[tuple[str, frozenset[str]], ...] = ()
        else:
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError as exc:
                log.warning("knowledge file %s cannot be read: %s", path, exc)
                return ()
            found = tuple((p, terms(p)) for p in passages(text))
        self._cache[path] = (stat.st_mtime_ns, stat.st_size, found)
        return found


def _walk(start: Path) -> Iterator[Path]:
    """Text files at or under `start`, in name order; hidden files and folders are skipped."""
    if start.is_file():
        if start.suffix.lower() in TEXT_SUFFIXES:
            yield start
        return
    for dirpath, dirnames, filenames in os.walk(start):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if not name.startswith(".") and Path(name).suffix.lower() in TEXT_SUFFIXES:
                yield Path(dirpath) / name
