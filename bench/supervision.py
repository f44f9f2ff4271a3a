"""Supervisor cost per ReAct turn pair (issue #33): the bench/engine.py turn pair (the model asks for
one tool call, the tool runs, the model answers) run bare, with a deterministic policy (tool
allow-list, transitions, directories, budgets, output checks), and with that policy plus the model
reviewer on the final answer (one extra cheap-tier call per run). Same process, same scripted model
server, rounds alternate; the figures are ratios to the bare run measured in the same rounds."""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from engine import add  # bench/engine.py: the same tool
from genworker.engine.base import EngineDeps, EngineRequest
from genworker.engine.dispatcher import EngineDispatcher
from genworker.engine.events import EngineEvent
from genworker.llm.client import LLMClient
from genworker.llm.config_source import load_model_config
from genworker.settings import load_settings
from genworker.supervision.decisions import Decision
from genworker.supervision.policy import SupervisorPolicy
from genworker.supervision.watch import RunWatcher
from genworker.testing import Reply, ScriptedModelServer, ToolCallReply
from genworker.tools.audit import MemoryAuditSink
from genworker.tools.context import ToolScope
from genworker.tools.pipeline import ToolPipeline
from genworker.workspace.models.skill import SkillLevel, SkillSpec
from genworker.workspace.snapshot import Skill, frozen_map

RESULTS = Path(__file__).resolve().parent / "results" / "supervision.json"
RULES: dict[str, Any] = {
    "name": "bench",
    "tools": ["add", "file_*"],
    "transitions": {"start": ["add"], "add": ["add"]},
    "directories": ["files/"],
    "budgets": {"tool_calls": 10, "tokens": 1_000_000, "seconds": 600, "output_chars": 100_000},
    "max_tool_failures": 3,
    "stop_on_text": ["DROP TABLE"],
}
MODEL = {**RULES, "model": {"enabled": True, "events": ["final"], "max_calls": 1}}


async def noop(event: EngineEvent) -> None:
    return None


async def no_review(decision: Decision) -> str:
    raise AssertionError("the bench reviewer never asks for a review")


async def no_store(record: dict[str, Any]) -> None:
    return None


async def turn(llm: LLMClient, pipeline: ToolPipeline, scope: ToolScope, skill: Skill, policy: Any) -> int:
    """One turn pair; the reviewer's model calls it made."""
    req = EngineRequest("bench", skill, "2+3?", scope)
    if policy is None:
        result = await EngineDispatcher(EngineDeps(llm, pipeline)).run(req, noop)
        assert result.status == "completed", result
        return 0
    watcher = RunWatcher("bench", "2+3?", [policy], llm, no_review, no_store)
    deps = EngineDeps(llm, watcher.tools(pipeline), guard=watcher.guard)
    result = await EngineDispatcher(deps).run(req, watcher.observe(noop))
    assert result.status == "completed" and not watcher.decisions, (result, watcher.decisions)
    return sum(r.calls for r in watcher.reviewers.values())


def expect(server: ScriptedModelServer, name: str, turns: int) -> None:
    review = (Reply('{"comments": []}'),) if name == "rules+model" else ()  # after each final answer
    for _ in range(turns):
        server.expect(Reply(tool_calls=(ToolCallReply("add", {"a": 2, "b": 3}),)), Reply("The answer is 5."), *review)


async def measure(turns: int, rounds: int) -> dict[str, Any]:
    with ScriptedModelServer() as server, tempfile.TemporaryDirectory() as tmp:
        env = {"GENWORKER_LLM_MODEL": "openai/bench", "GENWORKER_LLM_API_BASE": server.base_url}
        llm = LLMClient(load_model_config(load_settings(Path(tmp), {**env, "GENWORKER_LLM_API_KEY": "k"})))
        pipeline = ToolPipeline([add], audit=MemoryAuditSink())
        scope = ToolScope("bench", "w", "bench", Path(tmp), trust_level=2)
        skill = Skill(SkillSpec.model_validate({"name": "bench", "description": "d"}), SkillLevel.SYSTEM, "bench", "",
                      frozen_map({}))  # fmt: skip
        variants = {
            "bare": None,
            "rules": SupervisorPolicy.model_validate(RULES),
            "rules+model": SupervisorPolicy.model_validate(MODEL),
        }
        for name, policy in variants.items():  # warm-up
            expect(server, name, 5)
            for _ in range(5):
                await turn(llm, pipeline, scope, skill, policy)
        samples: dict[str, list[float]] = {name: [] for name in variants}
        calls: dict[str, int] = dict.fromkeys(variants, 0)
        for round_no in range(rounds):
            order = list(variants.items())
            order = order[round_no % 3 :] + order[: round_no % 3]
            for name, policy in order:
                expect(server, name, turns)
                started = time.perf_counter()
                for _ in range(turns):
                    calls[name] += await turn(llm, pipeline, scope, skill, policy)
                samples[name].append((time.perf_counter() - started) / turns * 1000)
        server.assert_done()
    medians = {name: statistics.median(s) for name, s in samples.items()}
    return {
        "turns_per_round": turns,
        "rounds": rounds,
        "samples_ms": samples,
        "median_ms": medians,
        "ratio_to_bare": {name: medians[name] / medians["bare"] for name in medians},
        "extra_ms": {name: medians[name] - medians["bare"] for name in medians},
        "reviewer_calls_per_turn_pair": {name: calls[name] / (turns * rounds) for name in calls},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=40, help="turn pairs per timed round")
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args(argv)
    result = asyncio.run(measure(args.turns, args.rounds))
    print(f"Supervisor cost per turn pair, {args.rounds} rounds x {args.turns}")
    for name, ms in result["median_ms"].items():
        extra = result["reviewer_calls_per_turn_pair"][name]
        print(f"  {name:<12} {ms:8.2f} ms  {result['ratio_to_bare'][name]:6.3f}x bare  {extra:.0f} extra model calls")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2), encoding="utf-8")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
