"""A continuation answers in the conversation its parked run came from.

A run asked in an IM conversation (Slack, Feishu, WeCom, DingTalk, email) parks with the channel
message it was answering (`plan.resume["reply_to"]`). When its continuation has run, the answer
goes back to that conversation through the outbound delivery (`ChannelDelivery.reply`: the
platform's retries, then another channel of the worker). A claim in the channels' dedupe store
keyed by plan and version sends it once however often the resume is retried; a send that fails
releases the claim, so a retry can send it. A run asked over the API / SSE has no address: its
answer is in the thread and the run record. docs/waiting.md describes it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from genworker.autonomy.waiting.models import WaitingPlan
from genworker.channels.base import ChannelMessage, ChannelReplier
from genworker.channels.dedupe import DedupeStore
from genworker.channels.ingest import FAILURE_TEXT, approval_text, decode_message, encode_message
from genworker.delivery.messages import DeliveryResult, OutboundMessage
from genworker.worker.task import RunRecord, RunState
from genworker.workspace.models.base import thaw

__all__ = ["ChannelReplies", "answer_of"]

log = logging.getLogger("genworker.waiting")

Origin = Callable[[str | None], ChannelMessage | None]
"""The channel message a live run answers, by the run's idempotency key (ChannelProcessor.origin)."""


@dataclass(frozen=True, slots=True)
class ChannelReplies:
    replier: ChannelReplier
    dedupe: DedupeStore
    origin: Origin

    def address(self, run: RunRecord) -> dict[str, Any] | None:
        """Where `run` was asked, for its plan's `resume.reply_to` (None: not from a channel)."""
        message = self.origin(run.provenance.idempotency_key)
        return encode_message(message) if message is not None else None

    async def deliver(self, plan: WaitingPlan, record: RunRecord) -> DeliveryResult | None:
        """Send the answer of `plan`'s continuation `record` to the plan's conversation, once;
        None when there is nothing to send (no address, the run still going, or already sent)."""
        address, text = plan.resume.get("reply_to"), answer_of(record)
        if not address or text is None:
            return None
        key = f"waiting:{plan.plan_id}:{plan.version}:reply"
        if not await self.dedupe.claim(plan.tenant_id, plan.worker_id, key):
            return None
        try:
            result = await self.replier.reply(decode_message(thaw(address)), OutboundMessage(text))
        except BaseException:
            await self.dedupe.release(plan.tenant_id, plan.worker_id, key)
            raise
        if not result.ok:
            await self.dedupe.release(plan.tenant_id, plan.worker_id, key)
            log.warning("[Waiting] the answer of plan %s was not delivered: %s", plan.plan_id, result.error)
        return result


def answer_of(record: RunRecord) -> str | None:
    """What the conversation is told about the continuation `record`; None while it is still going."""
    text = "\n\n".join(d.content for d in record.deliverables if d.kind == "text" and d.content)
    match record.state:
        case RunState.COMPLETED:
            return text or "Done."
        case RunState.PAUSED:  # it waits again: the note says for what
            return record.history[-1].note if record.history else None
        case RunState.WAITING_APPROVAL:
            return approval_text(record.pending_approval.call_id if record.pending_approval is not None else "?")
        case _ if record.terminal:
            return text or FAILURE_TEXT
        case _:
            return None
