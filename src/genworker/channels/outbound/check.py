"""Testing a channel's credentials against its vendor, for a person pressing "Test connection".

The test is the first request a delivery makes, through the same platform client: Slack `auth.test`
with the bot token; Feishu / Lark, WeCom and DingTalk a fresh access token (`tenant_access_token/
internal`, `gettoken`, `oauth2/accessToken`); email the SMTP login a send makes and the IMAP login
the poller makes (the inbox opened read-only), sending nothing. One attempt, no retry, on its own
HTTP client: the answer is a diagnosis now, and nothing is cached for deliveries. The answer never
holds a secret: the vendor's error is passed on with every credential value of the binding masked.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, SecretStr

from genworker.channels.email import EmailClient
from genworker.channels.outbound.delivery import build_client
from genworker.channels.outbound.dingtalk import DingTalkClient
from genworker.channels.outbound.feishu import FeishuClient
from genworker.channels.outbound.http import DeliveryError, RetryPolicy, VendorHttp
from genworker.channels.outbound.platform import PlatformClient, VendorEndpoints
from genworker.channels.outbound.slack import SlackClient
from genworker.channels.outbound.wecom import WeComClient
from genworker.channels.registry import ChannelBinding
from genworker.workspace.models.credentials import EmailCredentials, SlackCredentials

__all__ = ["CHECKS", "ConnectionCheck", "Failure", "check_connection"]

# platform -> the vendor call the test makes
CHECKS = {
    "slack": "auth.test",
    "feishu": "tenant_access_token/internal",
    "wecom": "gettoken",
    "dingtalk": "oauth2/accessToken",
    "email": "smtp + imap login",
}
Failure = Literal["refused", "unavailable", "unreachable", "mismatch", "unconfigured", "unsupported"]
MASK = "[redacted]"
TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class ConnectionCheck:
    adapter_id: str
    platform: str
    check: str | None  # the vendor call made (CHECKS), None when none was
    status: Literal["ok", "failed"]
    failure: Failure | None = None
    error: str | None = None  # the vendor's answer or why it could not be reached, secrets masked
    identity: dict[str, str] = field(default_factory=dict)  # who the credentials are, as the vendor said
    elapsed_ms: float | None = None
    checked_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


async def check_connection(binding: ChannelBinding, endpoints: VendorEndpoints) -> ConnectionCheck:
    check = CHECKS.get(binding.platform)
    if check is None:
        reason = f"{binding.platform} has no connection test: send it a message to check it"
        return ConnectionCheck(binding.adapter_id, binding.platform, None, "failed", "unsupported", reason)
    if binding.credentials is None:
        reason = (
            f"CHANNEL_CREDENTIALS.json of {binding.tenant_id}/{binding.worker_id} has no {binding.platform} section"
        )
        return ConnectionCheck(binding.adapter_id, binding.platform, check, "failed", "unconfigured", reason)
    if isinstance(binding.credentials, EmailCredentials) and not binding.credentials.worker_smtp_host:
        reason = f"CHANNEL_CREDENTIALS.json of {binding.tenant_id}/{binding.worker_id} has no email.worker_smtp_host"
        return ConnectionCheck(binding.adapter_id, binding.platform, check, "failed", "unconfigured", reason)
    http = VendorHttp(policy=RetryPolicy(max_attempts=1), timeout=TIMEOUT_S)
    started = time.perf_counter()
    try:
        identity = await _call(build_client(binding, http, endpoints), binding)
    except DeliveryError as exc:
        elapsed = _ms(started)
        error = _masked(str(exc), binding.credentials)
        return ConnectionCheck(binding.adapter_id, binding.platform, check, "failed", _failure(exc), error, {}, elapsed)
    finally:
        await http.aclose()
    elapsed = _ms(started)
    mismatch = _team_mismatch(binding, identity)
    if mismatch is not None:
        return ConnectionCheck(
            binding.adapter_id, binding.platform, check, "failed", "mismatch", mismatch, identity, elapsed
        )
    return ConnectionCheck(binding.adapter_id, binding.platform, check, "ok", identity=identity, elapsed_ms=elapsed)


async def _call(client: PlatformClient, binding: ChannelBinding) -> dict[str, str]:
    if isinstance(client, SlackClient):
        data = await client.auth_test()
        return {k: str(data[k]) for k in ("team", "team_id", "user", "user_id", "bot_id", "url") if data.get(k)}
    if isinstance(client, FeishuClient | WeComClient | DingTalkClient):
        await client.tokens.get()  # a new client: its cache is empty, so this asks the vendor
        return {}
    if isinstance(client, EmailClient):
        security = binding.channel.features.get("imap_security")
        return await client.check(security if security in ("ssl", "starttls", "plain") else None)
    raise DeliveryError(f"{client.platform} has no connection test", attempts=0)


def _failure(exc: DeliveryError) -> Failure:
    if exc.status is None:
        return "unreachable"
    return "unavailable" if exc.status == 429 or exc.status >= 500 else "refused"


def _team_mismatch(binding: ChannelBinding, identity: dict[str, str]) -> str | None:
    creds = binding.credentials
    if not isinstance(creds, SlackCredentials) or not creds.team_id or identity.get("team_id") in (None, creds.team_id):
        return None
    said = identity["team_id"]
    return f"the bot token belongs to Slack team {said}; CHANNEL_CREDENTIALS.json says team_id {creds.team_id}"


def _masked(text: str, credentials: BaseModel) -> str:
    """`text` with every secret value of `credentials` replaced, longest first (one may contain another)."""
    values = [getattr(credentials, name) for name in type(credentials).model_fields]
    secrets = {v.get_secret_value() for v in values if isinstance(v, SecretStr)}
    for secret in sorted(filter(None, secrets), key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 1)
