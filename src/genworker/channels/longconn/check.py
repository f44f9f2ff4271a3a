"""`genworker check`: an error for each binding whose long connection cannot run, at its line."""

from __future__ import annotations

from pathlib import PurePosixPath

from genworker.channels.longconn.modes import problem, uses_long_connection
from genworker.channels.registry import ChannelRegistry
from genworker.workspace.documents import Document, read_markdown
from genworker.workspace.errors import Issue, WorkspaceError
from genworker.workspace.registry import WorkspaceRegistry

__all__ = ["longconn_issues"]


def longconn_issues(workspace: WorkspaceRegistry) -> list[Issue]:
    """Blocking (reads PERSONA.md for line numbers): for the CLI."""
    channels = ChannelRegistry(workspace)
    issues: list[Issue] = []
    for worker in workspace.workers():
        rel = worker.files["persona"]
        doc: Document | None = None
        for index, binding in enumerate(channels.bindings(worker.tenant_id, worker.worker_id)):
            if not uses_long_connection(binding.channel):
                continue
            found = problem(binding.platform, binding.channel, binding.credentials)
            if found is None:
                continue
            field, why = found
            if field != "connection_mode":  # a CHANNEL_CREDENTIALS.json field
                credentials = str(PurePosixPath(rel).parent / "CHANNEL_CREDENTIALS.json")
                issues.append(Issue("error", credentials, f"{why} (channels[{index}] of PERSONA.md)", field))
                continue
            if doc is None:
                try:
                    doc = read_markdown(workspace.root / rel, rel)
                except WorkspaceError:
                    doc = None
            line = doc.line_of(["channels", index, "connection_mode"]) if doc is not None else None
            issues.append(Issue("error", rel, why, f"channels[{index}].connection_mode", line))
    return issues
