"""What every platform client offers the delivery layer, and where the vendors' APIs live.

A client sends one message that already fits the platform's limit (`limit`, in units of
`measure`) and, when `can_update`, replaces the content of a message it sent before: that
is how streaming replies grow in place. Base URLs are configurable so a deployment can use
a private gateway (Lark's international domain, a proxy) and tests a local server.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from genworker.channels.outbound.text import Measure
from genworker.delivery.messages import OutboundMessage, Target

__all__ = ["PlatformClient", "Sent", "VendorEndpoints"]


@dataclass(frozen=True, slots=True)
class VendorEndpoints:
    slack: str = "https://slack.com/api"
    feishu: str = "https://open.feishu.cn"
    wecom: str = "https://qyapi.weixin.qq.com"
    dingtalk: str = "https://api.dingtalk.com"
    dingtalk_oapi: str = "https://oapi.dingtalk.com"  # the only host a sessionWebhook may point to

    @classmethod
    def from_settings(cls, get: Callable[[str], str | None]) -> VendorEndpoints:
        """Overrides from GENWORKER_{SLACK,FEISHU,WECOM,DINGTALK,DINGTALK_OAPI}_API_BASE."""
        defaults = cls()
        values = {
            name: (get(f"GENWORKER_{name.upper()}_API_BASE") or getattr(defaults, name)).rstrip("/")
            for name in ("slack", "feishu", "wecom", "dingtalk", "dingtalk_oapi")
        }
        return cls(**values)


@dataclass(frozen=True, slots=True)
class Sent:
    message_id: str | None
    attempts: int


class PlatformClient(Protocol):
    platform: str
    limit: int
    measure: Measure
    can_update: bool

    async def send(self, target: Target, outbound: OutboundMessage) -> Sent: ...

    async def update(self, target: Target, message_id: str, outbound: OutboundMessage) -> Sent: ...
