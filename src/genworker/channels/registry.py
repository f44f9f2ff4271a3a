"""Which worker a webhook belongs to: channel bindings built from the loaded workspace.

A binding is one PERSONA.md `channels[]` entry of one worker, plus that platform's
credentials from the worker's CHANNEL_CREDENTIALS.json. Seed 003 §4.7 resolves transports
by tenant_id + worker_id + channel type, so the public adapter id (the `{adapter_id}` in
`/api/v1/channel/{adapter_id}/webhook`) is

    {tenant_id}~{worker_id}~{key}

where `key` is the entry's `adapter_id` when set, else its `type` (unique per worker, the
persona loader enforces it). `~` cannot occur in an id, so the form is unambiguous and
URL-safe (RFC 3986 unreserved). Example: `acme~alice~slack`, `acme~alice~ops-feishu`.

Bindings are computed from the registry's current snapshot on every call, so a reload of
PERSONA.md or CHANNEL_CREDENTIALS.json takes effect without a restart.

Every binding receives events by webhook. A binding whose `connection_mode` asks for a long
connection (`websocket`, `socket_mode`, `stream`) says so in `limitation`: the dashboard shows
it degraded and the ingress logs it at start-up, never silently.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from genworker.ids import ID_PATTERN
from genworker.workspace.models.persona import LONG_CONNECTION_MODES, Channel
from genworker.workspace.registry import WorkspaceRegistry
from genworker.workspace.snapshot import Worker

__all__ = ["SEPARATOR", "ChannelBinding", "ChannelRegistry", "adapter_id_for", "split_adapter_id"]

SEPARATOR = "~"


@dataclass(frozen=True, slots=True)
class ChannelBinding:
    adapter_id: str
    tenant_id: str
    worker_id: str
    platform: str
    channel: Channel
    credentials: BaseModel | None  # e.g. SlackCredentials; None when the worker has none for the platform

    @property
    def key(self) -> str:
        return self.channel.adapter_id or self.channel.type

    @property
    def limitation(self) -> str:
        """Why this binding cannot work the way its connection_mode asks ("" when it can): a long
        connection without its SDK or credentials, or on a platform that has none here."""
        from genworker.channels.longconn.modes import problem  # the longconn package imports this module

        if self.channel.connection_mode not in LONG_CONNECTION_MODES:
            return ""
        found = problem(self.platform, self.channel, self.credentials)
        return f"{found[0]}: {found[1]}" if found is not None else ""


def adapter_id_for(tenant_id: str, worker_id: str, channel: Channel) -> str:
    return SEPARATOR.join((tenant_id, worker_id, channel.adapter_id or channel.type))


def split_adapter_id(adapter_id: str) -> tuple[str, str, str] | None:
    """`(tenant_id, worker_id, key)`, or None when `adapter_id` is not of the documented form."""
    parts = adapter_id.split(SEPARATOR)
    if len(parts) != 3 or not all(ID_PATTERN.fullmatch(p) and ".." not in p for p in parts):
        return None
    return parts[0], parts[1], parts[2]


class ChannelRegistry:
    def __init__(self, workspace: WorkspaceRegistry) -> None:
        self.workspace = workspace

    def resolve(self, adapter_id: str) -> ChannelBinding | None:
        parts = split_adapter_id(adapter_id)
        if parts is None:
            return None
        tenant_id, worker_id, key = parts
        worker = self.workspace.worker(tenant_id, worker_id)
        if worker is None:
            return None
        for channel in worker.persona.channels:
            if (channel.adapter_id or channel.type) == key:
                return _binding(worker, channel)
        return None

    def bindings(self, tenant_id: str, worker_id: str) -> list[ChannelBinding]:
        worker = self.workspace.worker(tenant_id, worker_id)
        if worker is None:
            return []
        return [_binding(worker, channel) for channel in worker.persona.channels]

    def all(self) -> list[ChannelBinding]:
        return [_binding(w, c) for w in self.workspace.workers() for c in w.persona.channels]


def _binding(worker: Worker, channel: Channel) -> ChannelBinding:
    credentials = getattr(worker.credentials, channel.type, None) if worker.credentials else None
    return ChannelBinding(
        adapter_id=adapter_id_for(worker.tenant_id, worker.worker_id, channel),
        tenant_id=worker.tenant_id,
        worker_id=worker.worker_id,
        platform=channel.type,
        channel=channel,
        credentials=credentials,
    )
