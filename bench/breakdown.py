"""Where `load_all` spends its time, without a profiler's distortion.

cProfile charges every Python call, which inflates the pure-Python YAML constructor and
pydantic validators unevenly. Here a handful of loader functions are wrapped with a
timer for one load (a few microseconds per call in all) and the rest is the remainder.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from genworker.workspace import documents, scan, skills, tenant_loader, worker_loader
from genworker.workspace.registry import WorkspaceRegistry

__all__ = ["breakdown"]

# (label, module or class, attribute): each attribute is replaced by a timed wrapper.
# Labels starting with spaces are parts of the rows above them and are not summed.
_READ = "read + YAML/JSON parse (read_markdown, read_json)"
_VALIDATE = "validate(): pydantic model_validate"
_UNKNOWN = "validate(): unknown_fields walk"
_PARTS: list[tuple[str, Any, str]] = [
    (_READ, worker_loader, "read_markdown"),
    (_READ, skills, "read_markdown"),
    (_READ, tenant_loader, "read_json"),
    (_VALIDATE, worker_loader, "validate"),
    (_VALIDATE, skills, "validate"),
    (_VALIDATE, tenant_loader, "validate"),
    (_UNKNOWN, documents, "unknown_fields"),
    ("folder listing: Scope.entries", scan.Scope, "entries"),
    ("symlink check of fixed names: Scope.check", scan.Scope, "check"),
    ("  is_inside, in the two rows above", scan, "is_inside"),
]


class _Clock:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self._active: set[str] = set()

    def wrap(self, label: str, fn: Callable[..., Any], *, generator: bool) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            if label in self._active:  # recursion (unknown_fields): count the outer call only
                return fn(*args, **kwargs)
            self._active.add(label)
            start = time.perf_counter()
            try:
                result = fn(*args, **kwargs)
                if generator:
                    result = iter(list(result))
                return result
            finally:
                self._active.discard(label)
                self.seconds[label] = self.seconds.get(label, 0.0) + time.perf_counter() - start
                self.calls[label] = self.calls.get(label, 0) + 1

        return timed


@contextmanager
def _patched(clock: _Clock) -> Iterator[None]:
    with ExitStack() as undo:
        for label, owner, name in _PARTS:
            original = getattr(owner, name, None)
            if original is None:  # the loader changed shape; time what still exists
                continue
            wrapped = clock.wrap(label, original, generator=name in ("entries", "unknown_fields"))
            setattr(owner, name, wrapped)
            undo.callback(setattr, owner, name, original)
        yield


def breakdown(root: Path, markdown: Sequence[Path], repeats: int = 2) -> dict[str, Any]:
    """Best of `repeats` instrumented loads: seconds per part, and the unexplained rest."""
    best: dict[str, Any] | None = None
    for _ in range(repeats):
        clock = _Clock()
        gc.collect()
        with _patched(clock):
            start = time.perf_counter()
            WorkspaceRegistry(root, product_skills=None).load_all()
            total = time.perf_counter() - start
        if best is None or total < best["total_s"]:
            best = {"total_s": total, "seconds": dict(clock.seconds), "calls": dict(clock.calls)}
    assert best is not None
    seconds, calls = best["seconds"], best["calls"]
    seconds[_VALIDATE] -= seconds.get(_UNKNOWN, 0.0)  # nested inside
    counted = sum(v for k, v in seconds.items() if not k.startswith("  "))
    labels = [label for label in dict.fromkeys(label for label, _, _ in _PARTS) if label in seconds]
    parts = [
        {
            "part": label,
            "seconds": seconds[label],
            "calls": calls[label],
            "share": seconds[label] / best["total_s"],
        }
        for label in labels
    ]
    rest = best["total_s"] - counted
    parts.append({"part": "everything else", "seconds": rest, "calls": 0, "share": rest / best["total_s"]})
    cycle = _cycle_check_seconds(markdown)
    if cycle is not None:
        parts.insert(
            1,
            {
                "part": "  of which _has_cycle (YAML alias check)",
                "seconds": cycle,
                "calls": len(markdown),
                "share": cycle / best["total_s"],
            },
        )
    return {"load_all_s": best["total_s"], "parts": parts, "gc": gc_cost(root)}


def gc_cost(root: Path, repeats: int = 2) -> dict[str, float]:
    """Best `load_all` with the cyclic GC on and off. Collections run inside whichever
    part allocates (mostly YAML construction), so the rows above include them."""
    on: list[float] = []
    off: list[float] = []
    for _ in range(repeats):
        for samples, enabled in ((on, True), (off, False)):
            gc.collect()
            if not enabled:
                gc.disable()
            try:
                start = time.perf_counter()
                WorkspaceRegistry(root, product_skills=None).load_all()
                samples.append(time.perf_counter() - start)
            finally:
                gc.enable()
    return {"gc_on_s": min(on), "gc_off_s": min(off), "gc_s": min(on) - min(off)}


def _cycle_check_seconds(markdown: Sequence[Path]) -> float | None:
    """`_has_cycle` is recursive through its module name, so it is timed on its own."""
    check = getattr(documents, "_has_cycle", None)
    if check is None:
        return None
    data = [documents.read_markdown(path, path.name).data for path in markdown]
    gc.collect()
    start = time.perf_counter()
    for item in data:
        check(item, set(), set())
    return time.perf_counter() - start
