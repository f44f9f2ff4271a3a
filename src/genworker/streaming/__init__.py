"""Encoding the engines' internal event stream for clients: AG-UI, legacy SSE, OpenAI chunks."""
