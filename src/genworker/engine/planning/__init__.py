"""The planning engine: the model decomposes the task into a DAG of ReAct sub-runs."""

from genworker.engine.planning.engine import MAX_NODES, MAX_PARALLEL, MAX_REPLANS, PLAN_ATTEMPTS, PlanningEngine

__all__ = ["MAX_NODES", "MAX_PARALLEL", "MAX_REPLANS", "PLAN_ATTEMPTS", "PlanningEngine"]
