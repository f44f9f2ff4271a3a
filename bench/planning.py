"""`make bench`: the planning engine's overhead per plan node against a bare ReAct sub-run.

Ours: one planning run of N chained nodes (`a -> b -> c -> d`) through EngineDispatcher, the plan and
every node state written to a real run record (TaskLifecycle on a temporary workspace, as a routed run
does): the planner's model call, then each node a one-turn ReAct sub-run. Baseline, same process, same
scripted model server answering instantly: N autonomous (ReAct) runs of one turn each through the same
dispatcher, nothing recorded. The ratio is (plan run / N) / (one ReAct run), median / median; the planner
call itself is part of our side. Target: ratio <= 2.0 for 4 nodes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from genworker.engine.base import EngineDeps, EngineRequest
from genworker.engine.dispatcher import EngineDispatcher
from genworker.engine.events import EngineEvent
from genworker.llm.client import LLMClient
from genworker.llm.config_source import load_model_config
from genworker.settings import load_settings
from genworker.testing import Reply, ScriptedModelServer
from genworker.tools.audit import MemoryAuditSink
from genworker.tools.context import ToolScope
from genworker.tools.pipeline import ToolPipeline
from genworker.worker.engine_runs import RunEngineState, checkpoint_stores
from genworker.worker.lifecycle import TaskLifecycle
from genworker.worker.task import TaskManifest
from genworker.workspace.models.skill import SkillLevel, SkillSpec
from genworker.workspace.snapshot import Skill, frozen_map

TARGET = 2.0
RESULTS = Path(__file__).resolve().parent / "results" / "planning.json"


def skill(mode: str) -> Skill:
    spec = SkillSpec.model_validate(
        {"name": "bench", "description": "d", "metadata": {"genworker": {"strategy": {"mode": mode}}}}
    )
    return Skill(spec, SkillLevel.SYSTEM, "bench", "", frozen_map({}))


def plan(nodes: int) -> str:
    ids = [f"n{i}" for i in range(nodes)]
    return json.dumps(
        {"nodes": [{"id": n, "instruction": f"part {n}", "depends_on": ids[i - 1 : i]} for i, n in enumerate(ids)]}
    )


async def emit(event: EngineEvent) -> None:
    return None


class Bench:
    def __init__(self, server: ScriptedModelServer, root: Path, nodes: int, record: bool = True) -> None:
        env = {"GENWORKER_LLM_MODEL": "openai/bench", "GENWORKER_LLM_API_BASE": server.base_url}
        self.llm = LLMClient(load_model_config(load_settings(root, {**env, "GENWORKER_LLM_API_KEY": "k"})))
        self.pipeline = ToolPipeline([], audit=MemoryAuditSink())
        self.server, self.root, self.nodes = server, root, nodes
        self.tasks = TaskLifecycle(root)
        self.runs = 0
        self.record = record  # False: the plan lives in memory only (how much the run record costs)

    async def planning(self) -> None:
        self.runs += 1
        run_id = f"r{self.runs}"
        manifest = TaskManifest(f"t{self.runs}", run_id, "bench", "w", "do it", datetime.now(UTC))
        await self.tasks.persist_initial(manifest, start=True)
        self.server.expect(Reply(plan(self.nodes)), *(Reply(f"part n{i} done") for i in range(self.nodes)))
        scope = ToolScope("bench", "w", run_id, self.root, trust_level=2)
        state = RunEngineState(self.tasks, "bench", "w", checkpoint_stores(self.root))
        deps = EngineDeps(self.llm, self.pipeline, state if self.record else None, self.root)
        result = await EngineDispatcher(deps).run(EngineRequest(run_id, skill("planning"), "do it", scope), emit)
        assert result.status == "completed", result

    async def react(self) -> None:
        self.server.expect(Reply("part done"))
        scope = ToolScope("bench", "w", "bench", self.root, trust_level=2)
        req = EngineRequest("bench", skill("autonomous"), "do it", scope)
        result = await EngineDispatcher(EngineDeps(self.llm, self.pipeline)).run(req, emit)
        assert result.status == "completed", result


async def measure(nodes: int, repeats: int, rounds: int, record: bool = True) -> dict[str, Any]:
    with ScriptedModelServer() as server, tempfile.TemporaryDirectory() as tmp:
        bench = Bench(server, Path(tmp), nodes, record)
        for _ in range(5):  # warm-up
            await bench.planning()
            await bench.react()
        samples: dict[str, list[float]] = {"per_node": [], "react": []}
        for round_no in range(rounds):
            sides = [("per_node", bench.planning, nodes), ("react", bench.react, 1)]
            if round_no % 2:
                sides.reverse()
            for name, fn, per in sides:
                started = time.perf_counter()
                for _ in range(repeats):
                    await fn()
                samples[name].append((time.perf_counter() - started) / repeats / per * 1000)
        server.assert_done()
    node_ms, react_ms = statistics.median(samples["per_node"]), statistics.median(samples["react"])
    return {
        "nodes": nodes,
        "repeats": repeats,
        "rounds": rounds,
        "per_node_ms": samples["per_node"],
        "react_ms": samples["react"],
        "per_node_median_ms": node_ms,
        "react_median_ms": react_ms,
        "ratio": node_ms / react_ms,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=4, help="chained nodes per plan")
    parser.add_argument("--repeats", type=int, default=10, help="runs per timed round")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--no-record", action="store_true", help="keep the plan in memory (no run record writes)")
    args = parser.parse_args(argv)
    result = asyncio.run(measure(args.nodes, args.repeats, args.rounds, not args.no_record))
    verdict = "ok" if result["ratio"] <= TARGET else "MISSED"
    print(
        f"Planning: a plan of {args.nodes} chained nodes vs one-turn ReAct runs, {args.rounds} rounds x {args.repeats}"
    )
    print(f"  ours (plan run / nodes)     {result['per_node_median_ms']:8.2f} ms per node (median)")
    print(f"  baseline (one ReAct run)    {result['react_median_ms']:8.2f} ms per run (median)")
    print(f"  ratio                       {result['ratio']:8.3f}x   target <= {TARGET}x {verdict}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2), encoding="utf-8")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
