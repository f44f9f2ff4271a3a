"""The LangGraph engine: a skill's own graph (the real `langgraph` package, the optional extra
`langgraph`), its nodes calling models and tools through our LLM client and ToolPipeline, its
checkpoints in our stores, its interrupts confirmations.

Importing this package does not import `langgraph`: `graph_unavailable` says why a skill's graph
cannot run here (no extra, a graph its tenant may not run, a declared graph), so it runs its fallback.
"""

from __future__ import annotations

import functools
import importlib.util

from genworker.workspace.models.skill import SkillLevel
from genworker.workspace.skills import PYTHON_GRAPH_TRUST
from genworker.workspace.snapshot import Skill

__all__ = ["PYTHON_GRAPH_TRUST", "graph_unavailable", "langgraph_missing"]

EXTRA_MISSING = "the langgraph extra is not installed (pip install 'genworker[langgraph]')"


@functools.cache
def langgraph_missing() -> str:
    """Why LangGraph skills cannot run in this process ("" when the extra is installed)."""
    return "" if importlib.util.find_spec("langgraph") is not None else EXTRA_MISSING


def graph_unavailable(skill: Skill, trust_level: int) -> str:
    """Why `skill`'s graph cannot run for a tenant of `trust_level` ("" when it can)."""
    graph = skill.spec.settings.strategy.graph
    if graph is None:
        return "strategy mode 'langgraph' has no graph"
    if not graph.is_python:
        return "declared graphs (entry/nodes/edges) do not run here yet: write the graph as a Python factory"
    if skill.level != SkillLevel.SYSTEM and trust_level < PYTHON_GRAPH_TRUST:
        return (
            f"graph.module runs code in the server and the tenant's trust_level is {trust_level} "
            f"(it needs {PYTHON_GRAPH_TRUST} or more)"
        )
    return langgraph_missing()
