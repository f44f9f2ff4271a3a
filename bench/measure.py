"""The measurements: cold load vs a bare parse, and edit -> live reload through the watcher."""

from __future__ import annotations

import asyncio
import cProfile
import gc
import json
import math
import pstats
import random
import re
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import frontmatter

from genworker.workspace.registry import ReloadOutcome, WorkspaceRegistry
from genworker.workspace.watcher import WorkspaceWatcher
from synthetic import WorkerFiles, Workspace, role_line

__all__ = [
    "EditSample",
    "baseline_parse",
    "cold_load",
    "load_registry",
    "measure_edits",
    "profile_load",
    "stats",
    "time_calls",
    "write_results",
]

LIVE_TIMEOUT_S = 30.0  # generous: these only bound a hang, the figures do not depend on them
EDIT_TIMEOUT_S = 10.0
_PREFIX = re.compile(r"^.*/(site-packages|src|lib/python3\.\d+)/")


def stats(samples: Sequence[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p90 = ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]  # nearest rank
    return {"median": statistics.median(ordered), "min": ordered[0], "p90": p90, "max": ordered[-1]}


def load_registry(root: Path) -> WorkspaceRegistry:
    registry = WorkspaceRegistry(root, product_skills=None)
    registry.load_all()
    return registry


def baseline_parse(markdown: Sequence[Path], json_files: Sequence[Path] = ()) -> None:
    """The floor: the same files through python-frontmatter (CSafeLoader) and json, no more."""
    for path in markdown:
        frontmatter.load(path)
    for path in json_files:
        with path.open(encoding="utf-8") as f:
            json.load(f)


def _timed(fn: Callable[[], object]) -> float:
    gc.collect()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def warm_page_cache(ws: Workspace) -> None:
    for path in [*ws.tenant_files, *ws.markdown]:
        path.read_bytes()


def cold_load(ws: Workspace, repeats: int) -> dict[str, Any]:
    """Time `load_all` and the baseline `repeats` times each, alternating which goes first."""
    warm_page_cache(ws)
    load = lambda: load_registry(ws.root)  # noqa: E731
    base = lambda: baseline_parse(ws.markdown, ws.tenant_files)  # noqa: E731
    load(), base()  # imports, pydantic and yaml warm-up
    loads: list[float] = []
    bases: list[float] = []
    for i in range(repeats):
        if i % 2 == 0:
            loads.append(_timed(load))
            bases.append(_timed(base))
        else:
            bases.append(_timed(base))
            loads.append(_timed(load))
    load_stats, base_stats = stats(loads), stats(bases)
    return {
        "load_all_s": load_stats,
        "baseline_s": base_stats,
        "ratio_median": load_stats["median"] / base_stats["median"],
        "ratio_min": load_stats["min"] / base_stats["min"],
        "samples": {"load_all_s": loads, "baseline_s": bases},
    }


def write_results(out: Path, results: dict[str, Any]) -> None:
    """`results` as JSON to `out` (its folder made), and a line saying so with the run's wall time."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"\nwrote {out} (whole run {results['bench_wall_s']:.0f} s)")


def time_calls(fn: Callable[[], object], repeats: int) -> list[float]:
    fn()
    return [_timed(fn) for _ in range(repeats)]


@dataclass(slots=True)
class EditSample:
    target: str
    latency_s: float
    reloads: int  # reload callbacks for this target until the new value was live
    rejected: int  # of which rejected (e.g. a half-written file seen by the watcher)


@dataclass(slots=True)
class _Expectation:
    registry: WorkspaceRegistry
    tenant_id: str = ""
    worker_id: str = ""
    role: str = ""
    seen: asyncio.Event = field(default_factory=asyncio.Event)
    seen_at: float = 0.0
    outcomes: list[ReloadOutcome] = field(default_factory=list)

    def expect(self, files: WorkerFiles, role: str) -> None:
        self.tenant_id, self.worker_id, self.role = files.tenant_id, files.worker_id, role
        self.seen.clear()
        self.outcomes.clear()

    def on_reload(self, outcome: ReloadOutcome) -> None:
        if outcome.target == f"{self.tenant_id}/{self.worker_id}":
            self.outcomes.append(outcome)
        worker = self.registry.worker(self.tenant_id, self.worker_id)
        if not self.seen.is_set() and worker is not None and worker.persona.identity.role == self.role:
            self.seen_at = time.perf_counter()
            self.seen.set()


def _write(path: Path, text: str) -> float:
    """Rewrite `path` in place, as an editor saving the file does; returns when it started."""
    start = time.perf_counter()
    path.write_text(text, encoding="utf-8")
    return start


async def _wait_live(watcher: WorkspaceWatcher, root: Path) -> float:
    """Touch a probe file until the watcher reports a change; returns seconds it took."""
    probe = root / ".probe"
    start = time.perf_counter()
    for i in range(math.ceil(LIVE_TIMEOUT_S / 0.2)):
        await asyncio.to_thread(probe.write_text, str(i), encoding="utf-8")
        try:
            await asyncio.wait_for(watcher.saw_changes.wait(), timeout=0.2)
        except TimeoutError:
            continue
        return time.perf_counter() - start
    raise RuntimeError(f"the watcher did not report the probe file within {LIVE_TIMEOUT_S:.0f} s")


async def measure_edits(registry: WorkspaceRegistry, ws: Workspace, edits: int, seed: int) -> dict[str, Any]:
    """Edit identity.role of `edits` PERSONA.md files; time write -> new value served."""
    expectation = _Expectation(registry)
    watcher = WorkspaceWatcher(registry, on_reload=expectation.on_reload)
    stop = asyncio.Event()
    task = asyncio.create_task(watcher.run(stop))
    samples: list[EditSample] = []
    try:
        live_s = await _wait_live(watcher, ws.root)
        for i, files in enumerate(random.Random(seed).sample(ws.workers, edits)):
            text = await asyncio.to_thread(files.persona.read_text, encoding="utf-8")
            new_role = f"{files.role} (edit {i})"
            edited = text.replace(role_line(files.role), role_line(new_role), 1)
            if edited == text:
                raise RuntimeError(f"identity.role line not found in {files.persona}")
            expectation.expect(files, new_role)
            started = await asyncio.to_thread(_write, files.persona, edited)
            try:
                await asyncio.wait_for(expectation.seen.wait(), timeout=EDIT_TIMEOUT_S)
            except TimeoutError:
                raise RuntimeError(f"edit of {files.persona} not live after {EDIT_TIMEOUT_S:.0f} s") from None
            files.role = new_role
            rejected = sum(not o.ok for o in expectation.outcomes)
            target = f"{files.tenant_id}/{files.worker_id}"
            samples.append(EditSample(target, expectation.seen_at - started, len(expectation.outcomes), rejected))
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=30.0)
    return {
        "debounce_ms": watcher.debounce_ms,
        "watch_live_s": live_s,
        "latency_s": stats([s.latency_s for s in samples]),
        "rejected_reloads": sum(s.rejected for s in samples),
        "samples": [
            {
                "target": s.target,
                "latency_s": s.latency_s,
                "reloads": s.reloads,
                "rejected": s.rejected,
            }
            for s in samples
        ],
    }


def profile_load(root: Path, top: int) -> dict[str, Any]:
    """cProfile one `load_all`: top functions by own time, and genworker functions by total time."""
    profiler = cProfile.Profile()
    gc.collect()
    profiler.enable()
    load_registry(root)
    profiler.disable()
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, Any]] = pstats.Stats(profiler).stats
    total = sum(tt for _, _, tt, _, _ in raw.values())
    rows = [
        {"function": _name(key), "calls": nc, "tottime_s": tt, "cumtime_s": ct}
        for key, (_, nc, tt, ct, _) in raw.items()
    ]
    own = [r for r in rows if "genworker/" in str(r["function"])]
    return {
        "profiled_total_s": total,
        "by_tottime": sorted(rows, key=lambda r: -r["tottime_s"])[:top],
        "genworker_by_cumtime": sorted(own, key=lambda r: -r["cumtime_s"])[:top],
    }


def _name(key: tuple[str, int, str]) -> str:
    filename, line, func = key
    if filename == "~":
        return func  # a builtin, e.g. "<method 'validate_python' ...>"
    return f"{_PREFIX.sub('', filename)}:{line}({func})"
