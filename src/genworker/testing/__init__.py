"""Test support shipped with the package: a scripted OpenAI-compatible model server."""

from genworker.testing.model_server import Fail, Hang, Reply, ScriptedModelServer, ToolCallReply, scripted_env

__all__ = ["Fail", "Hang", "Reply", "ScriptedModelServer", "ToolCallReply", "scripted_env"]
