"""Outbound transport: platform clients (Slack, Feishu, WeCom, DingTalk, email) behind one
`ChannelDelivery` that implements ChannelReplier and ChannelSender. The outbox and the message
values it sends live below, in `genworker.delivery`."""

from genworker.channels.outbound.delivery import AdapterHealth, ChannelDelivery, build_client
from genworker.channels.outbound.http import DeliveryError, RetryPolicy, VendorHttp
from genworker.channels.outbound.platform import PlatformClient, Sent, VendorEndpoints

__all__ = [
    "AdapterHealth",
    "ChannelDelivery",
    "DeliveryError",
    "PlatformClient",
    "RetryPolicy",
    "Sent",
    "VendorEndpoints",
    "VendorHttp",
    "build_client",
]
