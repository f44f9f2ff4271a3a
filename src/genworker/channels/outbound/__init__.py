"""Outbound transport: platform clients (Slack, Feishu, WeCom, DingTalk, email) behind one
`ChannelDelivery` that implements ChannelReplier and ChannelSender."""

from genworker.channels.outbound.delivery import AdapterHealth, ChannelDelivery, build_client
from genworker.channels.outbound.http import DeliveryError, RetryPolicy, VendorHttp
from genworker.channels.outbound.outbox import Outbox, OutboxEntry, OutboxError, OutboxMessage, Recipient
from genworker.channels.outbound.platform import PlatformClient, Sent, Target, VendorEndpoints

__all__ = [
    "AdapterHealth",
    "ChannelDelivery",
    "DeliveryError",
    "Outbox",
    "OutboxEntry",
    "OutboxError",
    "OutboxMessage",
    "PlatformClient",
    "Recipient",
    "RetryPolicy",
    "Sent",
    "Target",
    "VendorEndpoints",
    "VendorHttp",
    "build_client",
]
