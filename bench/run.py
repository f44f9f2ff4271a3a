"""`make bench`: cold load and edit -> live reload of a synthetic 1,000-worker workspace.

Each figure is set against a bare baseline measured in the same run (python-frontmatter
parsing the same files), so the ratios hold across machines. Results go to
bench/results/latest.json; docs/benchmarks.md explains them.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import platform
import random
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

from breakdown import breakdown
from genworker.workspace.registry import WorkspaceRegistry
from measure import (
    baseline_parse,
    cold_load,
    load_registry,
    measure_edits,
    profile_load,
    stats,
    time_calls,
    write_results,
)
from synthetic import Workspace, generate

LOAD_TARGET_RATIO = 2.0
RELOAD_TARGET_S = 1.0
RESULTS = Path(__file__).resolve().parent / "results" / "latest.json"


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="genworker-bench-") as tmp:
        ws = generate(Path(tmp) / "workspace", args.tenants, args.workers, args.seed)
        generated_s = time.perf_counter() - started
        print(
            f"generated {len(ws.workers)} workers in {generated_s:.1f} s under {ws.root}",
            flush=True,
        )
        summary = _check(ws)
        print("cold load ...", flush=True)
        cold = cold_load(ws, args.repeats)
        print("edit -> live reload ...", flush=True)
        registry = load_registry(ws.root)
        live = asyncio.run(measure_edits(registry, ws, args.edits, args.seed))
        direct = _direct_reload(registry, ws, args.edits, args.seed)
        profile = None
        if args.profile:
            print("profiling load_all ...", flush=True)
            profile = profile_load(ws.root, args.top) | {"breakdown": breakdown(ws.root, ws.markdown)}
        workspace = {
            **summary,
            "markdown_files": len(ws.markdown),
            "json_files": len(ws.tenant_files),
            "bytes": ws.total_bytes,
        }
    results: dict[str, Any] = {
        "timestamp": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": _machine(),
        "params": vars(args) | {"out": str(args.out)},
        "workspace": workspace,
        "cold_load": cold,
        "reload": {"watcher": live, **direct},
        "targets": {"load_ratio_max": LOAD_TARGET_RATIO, "reload_latency_max_s": RELOAD_TARGET_S},
        "profile": profile,
        "bench_wall_s": time.perf_counter() - started,
    }
    print(_table(results))
    if profile is not None:
        print(_profile_table(profile))
    write_results(args.out, results)
    return 0


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", type=int, default=10)
    parser.add_argument("--workers", type=int, default=100, help="workers per tenant")
    parser.add_argument("--repeats", type=int, default=5, help="cold loads (and baselines) to time")
    parser.add_argument("--edits", type=int, default=10, help="PERSONA.md edits to time")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--profile", action="store_true", help="also cProfile one load_all")
    parser.add_argument("--top", type=int, default=25, help="profile rows to keep")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.edits > args.tenants * args.workers:
        parser.error("--edits cannot exceed the number of workers")
    return args


def _check(ws: Workspace) -> dict[str, int]:
    """The generated workspace must load completely, with no issue at all."""
    registry = WorkspaceRegistry(ws.root, product_skills=None)
    summary = registry.load_all()
    issues = registry.issues()
    if issues or summary.workers != len(ws.workers):
        shown = "\n".join(str(i) for i in issues[:20])
        raise SystemExit(f"generated workspace does not load cleanly ({summary}):\n{shown}")
    return {
        "tenants": summary.tenants,
        "workers": summary.workers,
        "duties": summary.duties,
        "goals": summary.goals,
        "skills": summary.skills,
    }


def _direct_reload(registry: WorkspaceRegistry, ws: Workspace, edits: int, seed: int) -> dict[str, Any]:
    """`reload_worker` called directly, against parsing that worker's files with frontmatter."""
    reloads: list[float] = []
    bases: list[float] = []
    for files in random.Random(seed).sample(ws.workers, edits):
        reloads += time_calls(lambda f=files: registry.reload_worker(f.tenant_id, f.worker_id), 3)
        bases += time_calls(lambda f=files: baseline_parse(f.markdown), 3)
    reload_stats, base_stats = stats(reloads), stats(bases)
    return {
        "reload_worker_s": reload_stats,
        "baseline_worker_parse_s": base_stats,
        "ratio_median": reload_stats["median"] / base_stats["median"],
    }


def _machine() -> dict[str, Any]:
    cpu = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        models = [
            line.split(":", 1)[1].strip()
            for line in cpuinfo.read_text(encoding="utf-8").splitlines()
            if line.startswith("model name")
        ]
        cpu = models[0] if models else ""
    packages = ["pydantic", "pydantic-core", "PyYAML", "python-frontmatter", "watchfiles"]
    return {
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu": cpu,
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "packages": {name: version(name) for name in packages},
    }


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:8.1f} ms" if seconds < 10 else f"{seconds:8.2f} s "


def _table(r: dict[str, Any]) -> str:
    w, cold, rel = r["workspace"], r["cold_load"], r["reload"]
    live = rel["watcher"]
    ok_load = "ok" if cold["ratio_median"] <= LOAD_TARGET_RATIO else "MISSED"
    ok_live = "ok" if live["latency_s"]["max"] <= RELOAD_TARGET_S else "MISSED"
    head = f"{'':34}{'median':>11}{'min':>11}{'p90':>11}{'max':>11}  {'ratio':>6}  target"
    rows = [
        (
            "load_all()",
            cold["load_all_s"],
            f"{cold['ratio_median']:5.2f}x",
            f"<= {LOAD_TARGET_RATIO:.0f}x {ok_load}",
        ),
        ("  baseline: frontmatter + json", cold["baseline_s"], "", ""),
        ("edit -> live (watcher)", live["latency_s"], "", f"<= {RELOAD_TARGET_S:.0f} s {ok_live}"),
        ("reload_worker() direct", rel["reload_worker_s"], f"{rel['ratio_median']:5.2f}x", ""),
        ("  baseline: parse 1 worker", rel["baseline_worker_parse_s"], "", ""),
    ]
    lines = [
        "",
        f"genworker bench: {w['tenants']} tenants x {w['workers'] // w['tenants']} = "
        f"{w['workers']} workers, "
        f"{w['markdown_files']} .md + {w['json_files']} .json ({w['bytes'] / 1e6:.1f} MB), "
        f"{r['machine']['cores']} cores, Python {r['machine']['python']}",
        head,
    ]
    for label, s, ratio, target in rows:
        cells = "".join(f"{_ms(s[k]):>11}" for k in ("median", "min", "p90", "max"))
        lines.append(f"{label:34}{cells}  {ratio:>6}  {target}".rstrip())
    lines.append(
        f"watcher: debounce {live['debounce_ms']} ms, live after {live['watch_live_s']:.2f} s, "
        f"{live['rejected_reloads']} rejected reloads during {len(live['samples'])} edits"
    )
    return "\n".join(lines)


def _profile_table(profile: dict[str, Any]) -> str:
    split = profile["breakdown"]
    lines = [f"\nwhere one load_all goes (timed wrappers, {split['load_all_s']:.2f} s in all)"]
    for part in split["parts"]:
        lines.append(f"    {part['part']:56}{part['calls']:>8}{part['seconds']:>9.3f} s{part['share']:>6.0%}")
    gc_split = split["gc"]
    lines.append(
        f"    cyclic GC, spread over the rows above: load_all {gc_split['gc_on_s']:.2f} s with GC, "
        f"{gc_split['gc_off_s']:.2f} s without ({gc_split['gc_s']:.2f} s)"
    )
    lines += [f"\ncProfile of one load_all ({profile['profiled_total_s']:.2f} s under the profiler)"]
    for title, key in (
        ("own time", "by_tottime"),
        ("genworker, cumulative", "genworker_by_cumtime"),
    ):
        lines.append(f"  {'top by ' + title + ':':60}{'calls':>8}{'tottime':>10}{'cumtime':>10}")
        for row in profile[key][:15]:
            times = f"{row['tottime_s']:>10.3f}{row['cumtime_s']:>10.3f}"
            lines.append(f"    {row['function'][:58]:58}{row['calls']:>8}{times}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
