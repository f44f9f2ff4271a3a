"""Tools: specs, the ToolPipeline (the only path to any tool) and the executors behind it."""
