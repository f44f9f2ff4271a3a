"""Tools that ship with genworker. Each still goes through the ToolPipeline like any other."""

from __future__ import annotations

from genworker.tools.builtin.files import file_tools
from genworker.tools.tool import Tool

__all__ = ["builtin_tools"]


def builtin_tools() -> list[Tool]:
    """Every builtin tool, ready for `ToolPipeline(builtin_tools())`."""
    return [*file_tools()]
