"""The long connections of every binding that asks for one, following the workspace.

`sync()` (at start and after every reload) starts a supervisor for each binding whose
`connection_mode` is a long connection and that can run, restarts one whose channel entry or
credentials changed, and stops the ones that are gone. A binding that cannot run (no SDK, no
credentials, a platform without a long connection) is `failed` with the reason: the
`long_connections` component is then `degraded`, as it is while a connection is down.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from genworker.channels.ingest import ChannelIngest
from genworker.channels.longconn import modes
from genworker.channels.longconn.lease import BindingLease
from genworker.channels.longconn.link import Backoff, Session
from genworker.channels.longconn.state import ConnectionState
from genworker.channels.longconn.supervisor import LongConnection
from genworker.channels.outbound.platform import VendorEndpoints
from genworker.channels.registry import ChannelBinding, ChannelRegistry
from genworker.observability.metrics import LONG_CONNECTION_LAST_EVENT, LONG_CONNECTIONS, GaugeSample
from genworker.observability.status import ComponentRuntimeStatus, ComponentStatus

__all__ = ["COMPONENT", "LongConnections", "session_for"]

log = logging.getLogger("genworker.channels.longconn")

COMPONENT = "long_connections"
_DOWN = frozenset({"reconnecting", "failed"})


def session_for(platform: str) -> Session:
    """The vendor session (its SDK is imported only when a binding of that platform connects)."""
    if platform == "slack":
        from genworker.channels.longconn import slack

        return slack.run
    if platform == "feishu":
        from genworker.channels.longconn import feishu

        return feishu.run
    if platform == "dingtalk":
        from genworker.channels.longconn import dingtalk

        return dingtalk.run
    raise ValueError(f"{platform} has no long connection")


@dataclass
class _Running:
    fingerprint: str
    task: asyncio.Task[None] | None  # None: the binding cannot run (its state says why)


def _fingerprint(binding: ChannelBinding) -> str:
    creds = binding.credentials
    secrets = json.dumps(
        {k: (v.get_secret_value() if hasattr(v, "get_secret_value") else v) for k, v in dict(creds or {}).items()},
        sort_keys=True,
        default=str,
    )
    raw = binding.channel.model_dump_json() + secrets
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


class LongConnections:
    def __init__(
        self,
        registry: ChannelRegistry,
        ingest: ChannelIngest,
        *,
        lease_for: Callable[[ChannelBinding], BindingLease],
        endpoints: VendorEndpoints,
        backoff: Backoff | None = None,
        on_change: Callable[[ComponentRuntimeStatus], None] = lambda _c: None,
        sessions: Callable[[str], Session] = session_for,
    ) -> None:
        self.registry = registry
        self.ingest = ingest
        self.lease_for = lease_for
        self.endpoints = endpoints
        self.backoff = backoff or Backoff()
        self.on_change = on_change
        self.sessions = sessions
        self.states: dict[str, ConnectionState] = {}
        self.listeners: list[Callable[[ConnectionState], None]] = []  # every state change (tests wait on them)
        self._running: dict[str, _Running] = {}
        self._stopping: set[asyncio.Task[None]] = set()

    def sync(self) -> None:
        """Follow the registry: on the loop, after start and after every reload."""
        wanted = {b.adapter_id: b for b in self.registry.all() if modes.uses_long_connection(b.channel)}
        stopped: dict[str, asyncio.Task[None]] = {}
        for adapter_id in list(self._running):
            running = self._running[adapter_id]
            binding = wanted.get(adapter_id)
            changed = binding is None or _fingerprint(binding) != running.fingerprint
            if changed and (task := self._stop(adapter_id)) is not None:
                stopped[adapter_id] = task
        for adapter_id, binding in wanted.items():
            if adapter_id not in self._running:
                self._start(binding, after=stopped.get(adapter_id))
        self._changed()

    def _start(self, binding: ChannelBinding, *, after: asyncio.Task[None] | None = None) -> None:
        """`after`: the binding's previous supervisor, stopping; the new one waits for its lease release."""
        state = ConnectionState(binding.adapter_id, binding.platform, binding.channel.connection_mode)
        state.on_change = self._state_changed
        self.states[binding.adapter_id] = state
        problem = modes.problem(binding.platform, binding.channel, binding.credentials)
        if problem is not None:
            field, why = problem
            state.failed(f"{field}: {why}")
            log.error("[Channels] %s: long connection cannot run: %s: %s", binding.adapter_id, field, why)
            self._running[binding.adapter_id] = _Running(_fingerprint(binding), None)
            return
        supervisor = LongConnection(
            binding.adapter_id,
            resolve=lambda: self._current(binding.adapter_id),
            session=self.sessions(binding.platform),
            ingest=self.ingest,
            lease=self.lease_for(binding),
            state=state,
            backoff=self.backoff.with_features(binding.channel.features),
            endpoints=self.endpoints,
        )

        async def run() -> None:
            if after is not None:
                await asyncio.gather(after, return_exceptions=True)
            await supervisor.run()

        task = asyncio.create_task(run(), name=f"longconn-supervisor:{binding.adapter_id}")
        self._running[binding.adapter_id] = _Running(_fingerprint(binding), task)

    def _current(self, adapter_id: str) -> ChannelBinding | None:
        binding = self.registry.resolve(adapter_id)
        return binding if binding is not None and modes.uses_long_connection(binding.channel) else None

    def _stop(self, adapter_id: str) -> asyncio.Task[None] | None:
        running = self._running.pop(adapter_id)
        self.states.pop(adapter_id, None)
        if running.task is not None:
            running.task.cancel()
            self._stopping.add(running.task)
            running.task.add_done_callback(self._stopping.discard)
        return running.task

    async def stop(self) -> None:
        for adapter_id in list(self._running):
            self._stop(adapter_id)
        if self._stopping:
            await asyncio.gather(*self._stopping, return_exceptions=True)
        self._changed()

    # -- what is visible --------------------------------------------------------------------------

    def describe(self) -> list[dict[str, Any]]:
        return [s.as_dict() for _, s in sorted(self.states.items())]

    def state(self, adapter_id: str) -> ConnectionState | None:
        return self.states.get(adapter_id)

    def component(self) -> ComponentRuntimeStatus:
        states = sorted(self.states.values(), key=lambda s: s.adapter_id)
        details = {"connections": [s.as_dict() for s in states]}
        if not states:
            return ComponentRuntimeStatus(COMPONENT, ComponentStatus.DISABLED, "no channel uses a long connection")
        down = [s for s in states if s.status in _DOWN]
        if down:
            first = down[0]
            reason = f"{len(down)} of {len(states)} long connections down; {first.adapter_id}: {first.error}"
            return ComponentRuntimeStatus(COMPONENT, ComponentStatus.DEGRADED, reason, "vendor SDKs", details)
        return ComponentRuntimeStatus(COMPONENT, ComponentStatus.READY, "", "vendor SDKs", details)

    def _state_changed(self, state: ConnectionState) -> None:
        for listener in self.listeners:
            listener(state)
        self._changed()

    def _changed(self) -> None:
        self.on_change(self.component())

    def samples(self) -> list[GaugeSample]:
        """Scrape-time gauges: connections by platform and status, and each platform's last event."""
        counts = Counter((s.platform, s.status) for s in self.states.values())
        samples: list[GaugeSample] = [
            (LONG_CONNECTIONS, "IM long connections by platform and status.", (("platform", p), ("status", st)), n)
            for (p, st), n in sorted(counts.items())
        ]
        last: dict[str, float] = {}
        for s in self.states.values():
            if s.last_event_at is not None:
                last[s.platform] = max(last.get(s.platform, 0.0), s.last_event_at.timestamp())
        help_text = "Unix time of the last event a long connection received."
        samples.extend((LONG_CONNECTION_LAST_EVENT, help_text, (("platform", p),), t) for p, t in sorted(last.items()))
        return samples
