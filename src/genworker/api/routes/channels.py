"""Inbound IM webhooks: `/api/v1/channel/{adapter_id}/webhook` (POST; GET for WeCom's URL check),
`/interactivity` and `/slash` (Slack).

Each request is verified by its platform module (genworker.channels.{slack,feishu,wecom,dingtalk})
before anything else happens; a failed check is a 401/403 JSON error, a log line naming the check
and a `webhook_verification_failures` metric, and nothing is processed. A verified message is
claimed in the dedupe store and written to the journal, then acked: the work happens later in the
`ChannelProcessor`, so the ack is fast and a retried delivery is answered without reprocessing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

from fastapi import APIRouter, Request, Response

from genworker.api.deps import runtime_of
from genworker.api.errors import ApiError, error_responses
from genworker.api.params import AdapterId
from genworker.channels import dingtalk, feishu, slack, wecom
from genworker.channels.base import InboundAck, InboundKind, InboundRequest
from genworker.channels.errors import ChannelError
from genworker.channels.registry import ChannelBinding
from genworker.observability import metrics

__all__ = ["MAX_BODY_BYTES", "PARSERS", "router"]

log = logging.getLogger("genworker.api.channels")

# 400 malformed body; 401/403 failed verification; 404 no such channel; 413; 503 misconfigured or not running
router = APIRouter(prefix="/api/v1/channel", tags=["channels"], responses=error_responses(400, 401, 403, 404, 413, 503))

MAX_BODY_BYTES = 1024 * 1024

Parser = Callable[[ChannelBinding, InboundRequest], InboundAck]
PARSERS: dict[str, Parser] = {
    "slack": slack.parse,
    "feishu": feishu.parse,
    "wecom": wecom.parse,
    "dingtalk": dingtalk.parse,
}
_GET_VERIFIES = frozenset({"wecom"})
_SLACK_ONLY = frozenset({"interactivity", "slash"})


@router.post("/{adapter_id}/webhook")
async def webhook(adapter_id: AdapterId, request: Request) -> Response:
    return await _inbound(adapter_id, request, "webhook")


@router.get("/{adapter_id}/webhook", responses=error_responses(405))
async def webhook_url_check(adapter_id: AdapterId, request: Request) -> Response:
    """The platform's URL check (WeCom); 405 for a channel whose platform has none."""
    return await _inbound(adapter_id, request, "webhook")


@router.post("/{adapter_id}/interactivity")
async def interactivity(adapter_id: AdapterId, request: Request) -> Response:
    return await _inbound(adapter_id, request, "interactivity")


@router.post("/{adapter_id}/slash")
async def slash(adapter_id: AdapterId, request: Request) -> Response:
    return await _inbound(adapter_id, request, "slash")


async def _inbound(adapter_id: str, request: Request, kind: InboundKind) -> Response:
    channels = runtime_of(request).services.channels
    binding = channels.registry.resolve(adapter_id)
    if binding is None or binding.platform not in PARSERS:
        log.info("[Channels] %s %s: no such inbound channel", request.method, request.url.path)
        raise ApiError(404, "channel_not_found", f"no inbound channel {adapter_id!r}")
    if kind in _SLACK_ONLY and binding.platform != "slack":
        raise ApiError(404, "not_found", f"{binding.platform} channels have no /{kind} endpoint")
    if request.method == "GET" and binding.platform not in _GET_VERIFIES:
        raise ApiError(405, "method_not_allowed", f"{binding.platform} webhooks are POST only", {"Allow": "POST"})
    inbound = InboundRequest(
        method=request.method,
        kind=kind,
        headers={k.lower(): v for k, v in request.headers.items()},
        query=dict(request.query_params),
        body=await _read_body(request, binding),
        received_at=datetime.now(UTC),
    )
    try:
        ack = PARSERS[binding.platform](binding, inbound)
    except ChannelError as exc:
        raise _refused(binding, exc) from None
    if ack.message is not None:
        try:
            accepted = await channels.ingest.accept(binding, ack.message, ack.replay_key)
        except ChannelError as exc:  # a replayed signature
            raise _refused(binding, exc) from None
        except Exception:
            log.exception("[Channels] %s: could not journal event %s", adapter_id, ack.message.event_id)
            raise ApiError(503, "ingest_unavailable", "the event was not stored; the platform will retry") from None
        if not accepted:
            retry = inbound.headers.get("x-slack-retry-num")
            log.info(
                "[Channels] %s: event %s already accepted; acked without reprocessing%s",
                adapter_id,
                ack.message.event_id,
                f" (X-Slack-Retry-Num {retry})" if retry else "",
            )
    elif ack.note:
        log.debug("[Channels] %s: %s", adapter_id, ack.note)
    return Response(ack.body, media_type=ack.media_type)


def _refused(binding: ChannelBinding, exc: ChannelError) -> ApiError:
    log.warning(
        "[Channels] %s %s refused: check %s failed (%s): %s",
        binding.platform,
        binding.adapter_id,
        exc.check,
        exc.code,
        exc.message,
    )
    if exc.status in (401, 403):
        metrics.record_webhook_verification_failure(binding.platform, exc.check)
    return ApiError(exc.status, exc.code, exc.message)


async def _read_body(request: Request, binding: ChannelBinding) -> bytes:
    def too_large() -> ApiError:
        log.warning("[Channels] %s: body over %d bytes refused", binding.adapter_id, MAX_BODY_BYTES)
        return ApiError(413, "payload_too_large", f"the body is larger than {MAX_BODY_BYTES} bytes")

    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise too_large()
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise too_large()
        chunks.append(chunk)
    return b"".join(chunks)
