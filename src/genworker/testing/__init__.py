"""Test support shipped with the package: a scripted OpenAI-compatible model server."""

from genworker.testing.live_server import LiveServer, serve
from genworker.testing.model_server import (
    Fail,
    Hang,
    Reply,
    Respond,
    ScriptedModelServer,
    ToolCallReply,
    When,
    scripted_env,
)

__all__ = [
    "Fail",
    "Hang",
    "LiveServer",
    "Reply",
    "Respond",
    "ScriptedModelServer",
    "ToolCallReply",
    "When",
    "scripted_env",
    "serve",
]
