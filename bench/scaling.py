"""`make bench`: throughput scaling of the P1 chat turn (bench/chat_http.py) from 1 to 64 concurrent
streams. The same servers in the same run — genworker, the bare FastAPI + LiteLLM endpoint that closes
its streams early, and the same endpoint with the `openai` client — each take, at every level and in
each of `--rounds` rounds, `max(32, 4 x streams)` turns from that many clients at once (servers
rotated): requests/s (the median round) and the p95 of the turns' total time (all rounds' turns).
Writes bench/results/scaling.json and the plot docs/img/scaling.png; docs/benchmarks.md has the table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from chat_http import CLOSED_EARLY, OPENAI, Servers, burst, http_client, launched, rotated, warm_up

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "scaling.json"
PLOT = HERE.parent / "docs" / "img" / "scaling.png"
LEVELS = (1, 2, 4, 8, 16, 32, 64)
BARE = (CLOSED_EARLY, OPENAI)


def p95(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]  # nearest rank


async def scale(servers: Servers, levels: tuple[int, ...], rounds: int) -> dict[str, Any]:
    names = list(servers.targets)
    rows: dict[str, dict[int, dict[str, float]]] = {name: {} for name in names}
    async with http_client(2 * max(levels)) as client:
        await warm_up(client, servers)
        for streams in levels:
            requests = max(32, 4 * streams)
            rates: dict[str, list[float]] = {name: [] for name in names}
            totals: dict[str, list[float]] = {name: [] for name in names}
            for i in range(rounds):
                for name in rotated(names, i):
                    seconds, took = await burst(client, servers.targets[name], requests, streams)
                    rates[name].append(requests / seconds)
                    totals[name] += took
            for name in names:
                rows[name][streams] = {"requests_per_s": statistics.median(rates[name]), "p95_ms": p95(totals[name])}
            print(
                f"  {streams:>3} streams: "
                + ", ".join(f"{n} {rows[n][streams]['requests_per_s']:.1f} req/s" for n in names),
                flush=True,
            )
    return {"levels": list(levels), "rounds": rounds, "ours": servers.genworkers[0], "servers": rows}


def table(result: dict[str, Any]) -> str:
    rows = result["servers"]
    ours, base = rows[result["ours"]], rows[CLOSED_EARLY]
    lines = [
        "| streams | ours req/s | bare req/s | ratio | ours p95 ms | bare p95 ms | ratio | openai client req/s, p95 |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for streams in result["levels"]:
        o, b, limit = ours[streams], base[streams], rows[OPENAI][streams]
        lines.append(
            f"| {streams} | {o['requests_per_s']:.1f} | {b['requests_per_s']:.1f} | "
            f"{o['requests_per_s'] / b['requests_per_s']:.2f}x | {o['p95_ms']:.0f} | {b['p95_ms']:.0f} | "
            f"{o['p95_ms'] / b['p95_ms']:.2f}x | {limit['requests_per_s']:.1f}, {limit['p95_ms']:.0f} ms |"
        )
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    labels = {
        result["ours"]: "genworker",
        CLOSED_EARLY: "bare FastAPI + LiteLLM (closed early)",
        OPENAI: "bare + openai client",
    }
    levels = result["levels"]
    figure, (rate, latency) = plt.subplots(1, 2, figsize=(10, 4), dpi=100)
    for name, rows in result["servers"].items():
        rate.plot(levels, [rows[n]["requests_per_s"] for n in levels], marker="o", label=labels.get(name, name))
        latency.plot(levels, [rows[n]["p95_ms"] for n in levels], marker="o", label=labels.get(name, name))
    for axes, title in ((rate, "requests/s"), (latency, "p95 latency (ms)")):
        axes.set_xscale("log", base=2)
        axes.set_xticks(levels, [str(n) for n in levels])
        axes.set_xlabel("concurrent streams")
        axes.set_title(title)
        axes.grid(True, alpha=0.3)
    rate.set_ylim(bottom=0)
    latency.set_yscale("log")
    rate.legend(fontsize=8)
    figure.suptitle("P1 chat turn (tool call + answer), one process each, same run")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, metadata={"Software": None})
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", type=int, nargs="+", default=list(LEVELS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rev", metavar="REV", help="genworker as it was at this git revision, not the working tree's")
    parser.add_argument("--plot", type=Path, default=PLOT, help="where the PNG goes")
    args = parser.parse_args(argv)
    print("throughput scaling of the P1 chat turn", flush=True)
    with (
        tempfile.TemporaryDirectory(prefix="genworker-scaling-") as tmp,
        launched(Path(tmp), tree=not args.rev, revisions=[args.rev] if args.rev else [], bare=BARE) as servers,
    ):
        result = asyncio.run(scale(servers, tuple(args.levels), args.rounds))
    print(table(result))
    plot(result, args.plot)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2), encoding="utf-8")
    print(f"wrote {RESULTS} and {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
