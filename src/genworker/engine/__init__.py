"""Execution engines: ReAct, Workflow and Hybrid, dispatched by the skill's strategy mode."""
