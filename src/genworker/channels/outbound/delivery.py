"""ChannelDelivery: replies and proactive messages over a worker's bound channels.

Implements `ChannelReplier` and `ChannelSender` (genworker.channels.base). One platform
client per adapter, built from the binding's credentials and rebuilt when they change (a
reload of CHANNEL_CREDENTIALS.json hands out new credential objects) or on `reload()`.
Long texts are split to the platform's limit; `reply_mode` streaming / card_update grows one
message in place where the platform can edit messages, and sends chunks where it cannot.
When the chosen channel fails, the next channel bound to the same worker that has a default
chat (its first `chat_ids` entry, or the owner's address for email) takes over; the result
says which, and the failure is logged and kept in the adapter's status.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from genworker.channels import email as email_channel  # a module: email.py imports outbound's parts
from genworker.channels.base import ChannelMessage
from genworker.channels.outbound.dingtalk import DingTalkClient
from genworker.channels.outbound.feishu import FeishuClient
from genworker.channels.outbound.http import DeliveryError, VendorHttp
from genworker.channels.outbound.platform import PlatformClient, Sent, VendorEndpoints
from genworker.channels.outbound.slack import SlackClient
from genworker.channels.outbound.text import split_text
from genworker.channels.outbound.wecom import WeComClient
from genworker.channels.registry import ChannelBinding, ChannelRegistry, adapter_id_for
from genworker.delivery.messages import DeliveryResult, OutboundFormat, OutboundMessage, Target
from genworker.delivery.recipients import default_target
from genworker.observability.metrics import record_channel_delivery
from genworker.workspace.models.credentials import (
    DingTalkCredentials,
    EmailCredentials,
    FeishuCredentials,
    SlackCredentials,
    WeComCredentials,
)
from genworker.workspace.models.persona import Channel

__all__ = ["AdapterHealth", "ChannelDelivery", "build_client"]

log = logging.getLogger("genworker.channels")

STREAM_UPDATE_INTERVAL = 1.0  # seconds between in-place edits of a streaming reply
STREAM_CHUNK = 600  # characters gathered before a chunk goes out where messages cannot be edited


@dataclass
class AdapterHealth:
    deliveries: int = 0
    failures: int = 0
    consecutive_failures: int = 0
    last_ok_at: str | None = None
    last_failed_at: str | None = None
    last_error: str | None = None

    def record(self, ok: bool, error: str | None = None) -> None:
        now = datetime.now(UTC).isoformat()
        if ok:
            self.deliveries += 1
            self.consecutive_failures = 0
            self.last_ok_at = now
        else:
            self.failures += 1
            self.consecutive_failures += 1
            self.last_failed_at = now
            self.last_error = error

    @property
    def last_delivery(self) -> str | None:
        if self.last_ok_at is None and self.last_failed_at is None:
            return None
        return "failed" if self.consecutive_failures else "ok"


def build_client(binding: ChannelBinding, http: VendorHttp, endpoints: VendorEndpoints) -> PlatformClient:
    """The platform client for `binding`; DeliveryError when its credentials are missing."""
    creds = binding.credentials
    where = f"CHANNEL_CREDENTIALS.json of {binding.tenant_id}/{binding.worker_id} has no {binding.platform} section"
    if isinstance(creds, SlackCredentials):
        return SlackClient(creds, http, endpoints.slack)
    if isinstance(creds, FeishuCredentials):
        return FeishuClient(creds, http, endpoints.feishu)
    if isinstance(creds, WeComCredentials):
        return WeComClient(creds, http, endpoints.wecom)
    if isinstance(creds, DingTalkCredentials):
        return DingTalkClient(creds, http, endpoints.dingtalk, endpoints.dingtalk_oapi)
    if isinstance(creds, EmailCredentials):
        return email_channel.EmailClient(creds, binding.channel.features)
    raise DeliveryError(where)


class ChannelDelivery:
    def __init__(
        self,
        channels: ChannelRegistry,
        *,
        endpoints: VendorEndpoints | None = None,
        http: VendorHttp | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.channels = channels
        self.endpoints = endpoints or VendorEndpoints()
        self.http = http or VendorHttp()
        self._clock = clock
        self._clients: dict[str, tuple[object, PlatformClient]] = {}
        self._health: dict[str, AdapterHealth] = {}

    async def aclose(self) -> None:
        await self.http.aclose()

    # -- clients and status -------------------------------------------------------

    def client(self, binding: ChannelBinding) -> PlatformClient:
        cached = self._clients.get(binding.adapter_id)
        if cached is not None and cached[0] is binding.credentials:
            return cached[1]
        client = build_client(binding, self.http, self.endpoints)
        self._clients[binding.adapter_id] = (binding.credentials, client)
        return client

    def reload(self, tenant_id: str, worker_id: str) -> list[str]:
        """Drop that worker's clients (and their tokens); the next delivery rebuilds them."""
        prefix = f"{tenant_id}~{worker_id}~"
        dropped = sorted(a for a in self._clients if a.startswith(prefix))
        for adapter_id in dropped:
            del self._clients[adapter_id]
        return dropped

    def health(self, adapter_id: str) -> AdapterHealth:
        return self._health.setdefault(adapter_id, AdapterHealth())

    def status(self, binding: ChannelBinding) -> dict[str, Any]:
        health = self._health.get(binding.adapter_id, AdapterHealth())
        if binding.credentials is None:
            state = "unconfigured"
        elif health.consecutive_failures:
            state = "degraded"
        else:
            state = "connected"
        cached = self._clients.get(binding.adapter_id)
        tokens = getattr(cached[1], "tokens", None) if cached else None
        return {
            "adapter_id": binding.adapter_id,
            "platform": binding.platform,
            "worker_id": binding.worker_id,
            "reply_mode": binding.channel.reply_mode,
            "configured": binding.credentials is not None,
            "status": state,
            "client_loaded": cached is not None,
            "token_fetches": tokens.fetches if tokens is not None else None,
            "last_delivery": health.last_delivery,
            "last_ok_at": health.last_ok_at,
            "last_failed_at": health.last_failed_at,
            "last_error": health.last_error,
            "deliveries": health.deliveries,
            "failures": health.failures,
        }

    # -- ChannelReplier / ChannelSender ------------------------------------------

    async def reply(self, message: ChannelMessage, outbound: OutboundMessage) -> DeliveryResult:
        binding = self.channels.resolve(message.adapter_id)
        if binding is None:
            return DeliveryResult(False, message.platform, error=f"no channel {message.adapter_id!r} is bound")
        result = await self._attempt(binding, reply_target(message), outbound)
        if result.ok:
            return result
        return await self._fall_back(binding, outbound, result)

    async def send(
        self,
        tenant_id: str,
        worker_id: str,
        outbound: OutboundMessage,
        *,
        platform: str | None = None,
        chat_id: str | None = None,
    ) -> DeliveryResult:
        bindings = self.channels.bindings(tenant_id, worker_id)
        chosen = [b for b in bindings if platform is None or b.platform == platform]
        if not chosen:
            wanted = f" on {platform}" if platform else ""
            return DeliveryResult(False, platform or "none", error=f"{tenant_id}/{worker_id} has no channel{wanted}")
        first = chosen[0]
        target = Target(chat_id) if chat_id else default_target(first)
        if target is None:
            failed = DeliveryResult(False, first.platform, attempts=0, error=f"{first.adapter_id} has no default chat")
            return await self._fall_back(first, outbound, failed)
        result = await self._attempt(first, target, outbound)
        return result if result.ok else await self._fall_back(first, outbound, result)

    async def send_to(
        self,
        tenant_id: str,
        worker_id: str,
        platform: str,
        target: Target,
        outbound: OutboundMessage,
        adapter_key: str | None = None,
    ) -> DeliveryResult:
        """Send to exactly `target` on one channel (the binding keyed `adapter_key`, else the worker's
        first `platform` channel with credentials), without falling back to another chat: the outbox's
        transport. Email needs no `channels[]` entry: the credentials' email section is enough."""
        binding = self.binding_for(tenant_id, worker_id, platform, adapter_key)
        if binding is None:
            which = f"channel {adapter_key!r}" if adapter_key else f"{platform} channel"
            return DeliveryResult(False, platform, attempts=0, error=f"{tenant_id}/{worker_id} has no {which}")
        return await self._attempt(binding, target, outbound)

    def binding_for(
        self, tenant_id: str, worker_id: str, platform: str, adapter_key: str | None = None
    ) -> ChannelBinding | None:
        bindings = self.channels.bindings(tenant_id, worker_id)
        if adapter_key is not None:
            return next((b for b in bindings if b.key == adapter_key and b.platform == platform), None)
        chosen = [b for b in bindings if b.platform == platform]
        usable = [b for b in chosen if b.credentials is not None]
        if usable or chosen:
            return (usable or chosen)[0]
        worker = self.channels.workspace.worker(tenant_id, worker_id)
        creds = worker.credentials.email if platform == "email" and worker and worker.credentials else None
        if creds is None:
            return None
        channel = Channel(type="email")
        adapter_id = adapter_id_for(tenant_id, worker_id, channel)
        return ChannelBinding(adapter_id, tenant_id, worker_id, "email", channel, creds)

    async def deliver(self, tenant_id: str, worker_id: str, text: str) -> bool:
        """`BriefSink` (genworker.autonomy.briefs) and confirmation notices: markdown to the worker's
        first channel with a default chat, falling back like `send`."""
        result = await self.send(tenant_id, worker_id, OutboundMessage(text, "markdown"))
        return result.ok

    async def stream(
        self, message: ChannelMessage, pieces: AsyncIterable[str], *, fmt: OutboundFormat = "markdown"
    ) -> DeliveryResult:
        """A reply produced piece by piece (model tokens), shown as the channel's reply_mode says.

        When the channel fails midway, the text not yet final (including the message being grown)
        and the rest of the pieces go out as one complete reply, with fallback."""
        binding = self.channels.resolve(message.adapter_id)
        if binding is None or binding.channel.reply_mode == "complete":
            return await self.reply(message, OutboundMessage(await _join(pieces), fmt))
        try:
            client = self.client(binding)
        except DeliveryError:
            return await self.reply(message, OutboundMessage(await _join(pieces), fmt))
        streamer = _Streamer(client, reply_target(message), fmt, self._clock)
        try:
            async for piece in pieces:
                await streamer.add(piece)
            await streamer.finish()
        except DeliveryError as exc:
            self._record(binding, False, str(exc))
            rest = streamer.text + await _join(pieces)
            result = await self.reply(message, OutboundMessage(rest, fmt))
            return result if result.error else _with_error(result, str(exc))
        self._record(binding, True)
        return DeliveryResult(True, binding.platform, streamer.first_id, streamer.attempts)

    # -- internals -----------------------------------------------------------------

    async def _attempt(self, binding: ChannelBinding, target: Target, outbound: OutboundMessage) -> DeliveryResult:
        try:
            client = self.client(binding)
            sent = await _send_all(client, target, outbound)
        except DeliveryError as exc:
            self._record(binding, False, str(exc))
            log.warning("[Channels] delivery over %s failed: %s", binding.adapter_id, exc)
            return DeliveryResult(False, binding.platform, attempts=exc.attempts, error=str(exc))
        self._record(binding, True)
        return DeliveryResult(True, binding.platform, sent.message_id, sent.attempts)

    async def _fall_back(
        self, failed: ChannelBinding, outbound: OutboundMessage, result: DeliveryResult
    ) -> DeliveryResult:
        attempts = result.attempts
        for other in self.channels.bindings(failed.tenant_id, failed.worker_id):
            target = default_target(other)
            if other.adapter_id == failed.adapter_id or target is None or other.credentials is None:
                continue
            second = await self._attempt(other, target, outbound)
            attempts += second.attempts
            if second.ok:
                log.warning(
                    "[Channels] %s failed (%s); delivered over %s instead",
                    failed.adapter_id,
                    result.error,
                    other.adapter_id,
                )
                return DeliveryResult(
                    True, other.platform, second.message_id, attempts, fell_back_to=other.platform, error=result.error
                )
        return DeliveryResult(False, failed.platform, None, attempts, error=result.error)

    def _record(self, binding: ChannelBinding, ok: bool, error: str | None = None) -> None:
        self.health(binding.adapter_id).record(ok, error)
        record_channel_delivery(binding.platform, ok)


def reply_target(message: ChannelMessage) -> Target:
    context = message.reply_context
    return Target(
        chat_id=message.chat_id,
        chat_type=message.chat_type,
        thread_id=message.thread_id,
        reply_to=context.get("message_id"),
        user_id=message.sender_id,
        context=context,
    )


async def _send_all(client: PlatformClient, target: Target, outbound: OutboundMessage) -> Sent:
    """Send `outbound`, split to the platform's limit; the first message's id."""
    if outbound.format == "card" and outbound.card is not None:
        return await client.send(target, outbound)
    pieces = split_text(outbound.text, client.limit, client.measure) or [outbound.text]
    first: Sent | None = None
    attempts = 0
    for n, piece in enumerate(pieces):
        key = outbound.key if outbound.key is None or len(pieces) == 1 else f"{outbound.key}-{n}"
        sent = await client.send(target, OutboundMessage(piece, outbound.format, key=key))
        attempts += sent.attempts
        first = first or sent
    assert first is not None
    return Sent(first.message_id, attempts)


async def _join(pieces: AsyncIterable[str]) -> str:
    return "".join([piece async for piece in pieces])


def _with_error(result: DeliveryResult, error: str) -> DeliveryResult:
    return DeliveryResult(result.ok, result.platform, result.message_id, result.attempts, result.fell_back_to, error)


class _Streamer:
    """Grows a reply in place (edits at most every STREAM_UPDATE_INTERVAL seconds), starting a new
    message at the platform's limit; without edits, sends paragraph-aligned chunks."""

    def __init__(self, client: PlatformClient, target: Target, fmt: OutboundFormat, clock: Callable[[], float]) -> None:
        self.client = client
        self.target = target
        self.fmt = fmt
        self.clock = clock
        self.text = ""  # not yet final: shown in the current message, or not shown at all
        self.shown = ""
        self.message_id: str | None = None
        self.first_id: str | None = None
        self.attempts = 0
        self.last_edit = 0.0

    async def add(self, piece: str) -> None:
        self.text += piece
        if self.client.can_update:
            await self._grow(final=False)
        else:
            await self._chunk(final=False)

    async def finish(self) -> None:
        if self.client.can_update:
            await self._grow(final=True)
        else:
            await self._chunk(final=True)

    async def _grow(self, *, final: bool) -> None:
        limit, measure = self.client.limit, self.client.measure
        while measure(self.text) > limit:  # close the current message at a good cut
            head, *_ = split_text(self.text, limit, measure)
            await self._show(head)
            self.text = self.text[self.text.index(head) + len(head) :].lstrip()
            self.message_id, self.shown = None, ""
        due = self.clock() - self.last_edit >= STREAM_UPDATE_INTERVAL
        if self.text.strip() and self.text != self.shown and (final or due or self.message_id is None):
            await self._show(self.text)

    async def _show(self, text: str) -> None:
        outbound = OutboundMessage(text, self.fmt)
        if self.message_id is None:
            sent = await self.client.send(self.target, outbound)
            self.message_id = sent.message_id
            self.first_id = self.first_id or sent.message_id
        else:
            sent = await self.client.update(self.target, self.message_id, outbound)
        self.attempts += sent.attempts
        self.shown = text
        self.last_edit = self.clock()

    async def _chunk(self, *, final: bool) -> None:
        limit, measure = self.client.limit, self.client.measure
        ready = self.text
        if not final:
            cut = self.text.rfind("\n\n")
            ready = self.text[:cut] if cut > 0 else ""
            if len(ready) < STREAM_CHUNK and measure(self.text) <= limit:
                return  # wait for more
            if not ready.strip():  # over the limit without a paragraph break: send what fits
                ready = split_text(self.text, limit, measure)[0]
        if not ready.strip():
            return
        for piece in split_text(ready, limit, measure):
            sent = await self.client.send(self.target, OutboundMessage(piece, self.fmt))
            self.attempts += sent.attempts
            self.first_id = self.first_id or sent.message_id
        self.text = self.text[self.text.index(ready) + len(ready) :].lstrip()
