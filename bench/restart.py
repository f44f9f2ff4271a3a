"""`make bench`: a restart of 1,000 unchanged workers from the load cache, against a bare parse.

Four ways to get the same synthetic workspace into memory, measured in the same run:

- baseline: `frontmatter.load` of every `.md` and `json.load` of every TENANT.json, nothing kept;
- cold: `WorkspaceRegistry.load_all()` without the load cache;
- first start: `load_all()` with the cache, whose file was deleted first (parse + write it);
- restart: `load_all()` with the cache file of the previous start (workspace/load_cache.py).

Then RSS per 100 loaded workers (a fresh process per mode), and how fast other serialisations
of the same loaded models read back (`--formats`). Results go to bench/results/restart.json;
docs/benchmarks.md explains them.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cache_formats import compare_formats
from genworker.workspace.load_cache import SETTLE_NS, LoadCache
from genworker.workspace.registry import WorkspaceRegistry
from measure import baseline_parse, stats, warm_page_cache, write_results
from synthetic import Workspace, generate

RESTART_TARGET_RATIO = 0.25
RESULTS = Path(__file__).resolve().parent / "results" / "restart.json"


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.rss_child:
        return _rss_child(Path(args.rss_child[0]), args.rss_child[1])
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="genworker-bench-restart-") as tmp:
        ws = generate(Path(tmp) / "workspace", args.tenants, args.workers, args.seed)
        print(f"generated {len(ws.workers)} workers under {ws.root}", flush=True)
        _wait_settled(ws.root)
        registry = WorkspaceRegistry(ws.root, product_skills=None)
        cache = LoadCache(registry.root, registry.limits)
        print("timing baseline, cold, first start, restart ...", flush=True)
        timings = _timings(ws, cache, args.repeats)
        check = _check(ws, cache)
        print("RSS per 100 workers ...", flush=True)
        rss = {mode: _rss(ws.root, mode) for mode in ("cold", "restart")}
        if args.formats:
            print("serialisation formats ...", flush=True)
            registry.load_all()
        formats = compare_formats(registry, args.repeats) if args.formats else None
    results = {
        "timestamp": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "params": vars(args) | {"out": str(args.out)},
        "workspace": {"workers": len(ws.workers), "markdown_files": len(ws.markdown)},
        "check": check,
        "timings": timings,
        "rss": rss,
        "formats": formats,
        "target": {"restart_ratio_max": RESTART_TARGET_RATIO},
        "bench_wall_s": time.perf_counter() - started,
    }
    print(_table(results))
    write_results(args.out, results)
    return 0


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", type=int, default=10)
    parser.add_argument("--workers", type=int, default=100, help="workers per tenant")
    parser.add_argument("--repeats", type=int, default=5, help="samples of each way to load")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--formats", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--rss-child", nargs=2, metavar=("ROOT", "MODE"), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def _wait_settled(root: Path) -> None:
    """The cache keeps no load of a file changed within SETTLE_NS: wait until the new files are older."""
    newest = max(p.stat().st_ctime_ns for p in root.rglob("*"))
    wait_s = (newest + SETTLE_NS - time.time_ns()) / 1e9 + 0.1
    if wait_s > 0:
        print(f"waiting {wait_s:.1f} s until every file is older than the cache's settle time", flush=True)
        time.sleep(wait_s)


def _timings(ws: Workspace, cache: LoadCache, repeats: int) -> dict[str, Any]:
    """Each load builds a new registry, released after the clock stops (a restart has no old one)."""
    warm_page_cache(ws)

    def load(with_cache: bool) -> WorkspaceRegistry:
        loaded = WorkspaceRegistry(ws.root, product_skills=None, cache=cache if with_cache else False)
        loaded.load_all()
        return loaded

    def first_start() -> WorkspaceRegistry:
        cache.clear()
        return load(True)

    ways: dict[str, Callable[[], object]] = {
        "baseline": lambda: baseline_parse(ws.markdown, ws.tenant_files),
        "cold": lambda: load(False),
        "first_start": first_start,
        "restart": lambda: load(True),
    }
    for way in ways.values():  # imports, pydantic and yaml warm-up; leaves a cache file
        way()
    samples: dict[str, dict[str, list[float]]] = {name: {"wall_s": [], "cpu_s": []} for name in ways}
    order = list(ways)
    for i in range(repeats):
        for name in order[i % len(order) :] + order[: i % len(order)]:  # rotate which goes first
            wall, cpu = _timed(ways[name])
            samples[name]["wall_s"].append(wall)
            samples[name]["cpu_s"].append(cpu)
    out: dict[str, Any] = {name: {k: stats(v) | {"samples": v} for k, v in s.items()} for name, s in samples.items()}
    for name in ("cold", "first_start", "restart"):
        out[name]["ratio"] = {k: out[name][k]["median"] / out["baseline"][k]["median"] for k in ("wall_s", "cpu_s")}
    out["cache_file_bytes"] = cache.path.stat().st_size
    return out


def _timed(fn: Callable[[], object]) -> tuple[float, float]:
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    kept = fn()
    done = time.perf_counter() - wall, time.process_time() - cpu
    del kept
    return done


def _check(ws: Workspace, cache: LoadCache) -> dict[str, Any]:
    """The restart must serve every worker from the cache, and exactly what a cold load gives."""
    cold = WorkspaceRegistry(ws.root, product_skills=None)
    summary = cold.load_all()
    if cold.issues() or summary.workers != len(ws.workers):
        raise SystemExit(f"generated workspace does not load cleanly ({summary}): {cold.issues()[:5]}")
    restarted = WorkspaceRegistry(ws.root, product_skills=None, cache=cache)
    restarted.load_all()
    last = cache.last
    if last is None or last.cached != len(ws.workers):
        raise SystemExit(f"the restart did not serve every worker from the cache: {last}")
    if restarted.workers() != cold.workers() or restarted.issues() != cold.issues():
        raise SystemExit("a worker loaded from the cache differs from the same worker parsed")
    return {"cached": last.cached, "equal_to_cold": True}


def _rss(root: Path, mode: str) -> dict[str, Any]:
    if mode == "restart":
        _run_child(root, "first_start")  # writes the cache file the restart reads
    return _run_child(root, mode)


def _run_child(root: Path, mode: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--rss-child", str(root), mode],
        check=True,
        capture_output=True,
        text=True,
        encoding="utf-8",
    ).stdout
    found: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return found


def _rss_child(root: Path, mode: str) -> int:
    """In a fresh process: RSS after the imports and after `load_all`, per 100 loaded workers."""
    registry = WorkspaceRegistry(root, product_skills=None, cache=mode != "cold")
    if mode == "first_start" and registry.cache is not None:
        registry.cache.clear()
    before = _rss_kib()
    summary = registry.load_all()
    gc.collect()
    after = _rss_kib()
    cached = registry.cache.last.cached if registry.cache and registry.cache.last else 0
    per_100 = (after - before) / 1024 / (summary.workers / 100)
    print(json.dumps({"workers": summary.workers, "cached": cached, "before_mib": before / 1024,
                      "after_mib": after / 1024, "mib_per_100_workers": per_100}))  # fmt: skip
    return 0


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _table(r: dict[str, Any]) -> str:
    t = r["timings"]
    lines = [
        "",
        f"genworker restart bench: {r['workspace']['workers']} workers, {r['workspace']['markdown_files']} .md, "
        f"cache file {t['cache_file_bytes'] / 1e6:.1f} MB",
        f"{'':40}{'wall median':>12}{'ratio':>8}{'cpu median':>12}{'ratio':>8}",
    ]
    labels = {
        "baseline": "baseline: frontmatter + json",
        "cold": "cold load_all(), no cache",
        "first_start": "first start (parse + write the cache)",
        "restart": "restart from the cache",
    }
    for name, label in labels.items():
        wall, cpu = t[name]["wall_s"]["median"], t[name]["cpu_s"]["median"]
        ratios = t[name].get("ratio", {"wall_s": 1.0, "cpu_s": 1.0})
        lines.append(f"{label:40}{wall:>11.3f}s{ratios['wall_s']:>7.2f}x{cpu:>11.3f}s{ratios['cpu_s']:>7.2f}x")
    ratio = t["restart"]["ratio"]["wall_s"]
    ok = "ok" if ratio <= RESTART_TARGET_RATIO else "MISSED"
    lines.append(f"restart target <= {RESTART_TARGET_RATIO}x the baseline: {ok}")
    for mode, rss in r["rss"].items():
        lines.append(
            f"RSS {mode}: {rss['before_mib']:.0f} -> {rss['after_mib']:.0f} MiB for {rss['workers']} workers "
            f"({rss['cached']} from the cache): {rss['mib_per_100_workers']:.1f} MiB per 100 workers"
        )
    if r["formats"]:
        lines.append("\nreading the loaded models back (all workers; cpu, best of the samples; ratio: to the cache)")
        for row in r["formats"]["rows"]:
            lines.append(f"    {row['way']:58}{row['cpu_s']:>8.3f} s{row['ratio']:>7.2f}x  {row['note']}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
