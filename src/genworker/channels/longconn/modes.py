"""Which bindings use a long connection, and what each needs before it can open one.

A channel's `connection_mode` asks for one when it is any of upstream's spellings (`websocket`
for Feishu, `socket_mode` for Slack, `stream` for DingTalk) or ours (`stream`, `socket`), in any
case; every such spelling means the platform's own long connection. Each platform needs its
vendor SDK (the `longconn` extra) and the credentials the vendor console shows for it.
"""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass

from genworker.workspace.models.credentials import DingTalkCredentials, FeishuCredentials, SlackCredentials
from genworker.workspace.models.persona import Channel

__all__ = ["LONG_MODES", "PLATFORMS", "Requirement", "problem", "uses_long_connection"]

LONG_MODES = frozenset({"websocket", "socket_mode", "socket", "stream"})


@dataclass(frozen=True, slots=True)
class Requirement:
    name: str  # what the vendor calls the long connection
    modules: tuple[str, ...]  # importable when the SDK is installed
    package: str  # what to install
    credentials: tuple[str, ...]  # CHANNEL_CREDENTIALS.json fields, `platform.field`


PLATFORMS: dict[str, Requirement] = {
    "slack": Requirement(
        "Socket Mode", ("slack_sdk.socket_mode.websockets", "aiohttp"), "slack_sdk", ("slack.app_token",)
    ),
    "feishu": Requirement("long connection", ("lark_oapi.ws",), "lark-oapi", ("feishu.app_id", "feishu.app_secret")),
    "dingtalk": Requirement(
        "Stream mode", ("dingtalk_stream",), "dingtalk-stream", ("dingtalk.app_key", "dingtalk.app_secret")
    ),
}


def uses_long_connection(channel: Channel) -> bool:
    return str(channel.connection_mode).lower() in LONG_MODES


@functools.cache
def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # a parent package is missing
        return False


def problem(platform: str, channel: Channel, credentials: object) -> tuple[str, str] | None:
    """`(field, why)` when a binding's long connection cannot run (the binding's platform, PERSONA.md
    channel and credentials), else None. `field` is `connection_mode` (PERSONA.md) or a
    `platform.field` of CHANNEL_CREDENTIALS.json."""
    mode = channel.connection_mode
    need = PLATFORMS.get(platform)
    if need is None:
        return "connection_mode", (
            f"{mode}: {platform} has no long connection here (Slack, Feishu/Lark and DingTalk do); "
            "use connection_mode: webhook"
        )
    missing = [m for m in need.modules if not _installed(m)]
    if missing:
        return "connection_mode", (
            f"{mode}: {platform} {need.name} needs the {need.package} package "
            f"(pip install 'genworker[longconn]'); {missing[0]} is not installed"
        )
    absent = _absent(platform, credentials)
    if absent:
        where = _console(platform)
        return absent, f"not set: {platform} {need.name} cannot connect without it ({where})"
    return None


def _absent(platform: str, creds: object) -> str | None:
    match platform:
        case "slack":
            if not isinstance(creds, SlackCredentials) or creds.app_token is None:
                return "slack.app_token"
        case "feishu":
            if not isinstance(creds, FeishuCredentials):
                return "feishu.app_id"
        case "dingtalk":
            if not isinstance(creds, DingTalkCredentials):
                return "dingtalk.app_key"
    return None


def _console(platform: str) -> str:
    return {
        "slack": "an app-level token xapp-… with connections:write: Slack app settings, Basic Information, "
        "App-Level Tokens",
        "feishu": "the app's App ID and App Secret: Feishu/Lark developer console, Credentials & Basic Info",
        "dingtalk": "the app's Client ID (AppKey) and Client Secret (AppSecret): DingTalk developer console, "
        "Credentials & Basic Info",
    }[platform]
