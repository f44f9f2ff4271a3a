"""Hand-written stand-ins for the vendors' long-connection servers (Slack Socket Mode, Feishu/Lark
long connection, DingTalk Stream): the real SDK clients connect to them through their own endpoint
settings. See `base.py`."""

from genworker.testing.longconn.base import Ack, Connection, StandIn
from genworker.testing.longconn.dingtalk import DingTalkStream
from genworker.testing.longconn.feishu import FeishuLongConnection
from genworker.testing.longconn.slack import SlackSocketMode
from genworker.testing.longconn.watch import Watch

__all__ = ["Ack", "Connection", "DingTalkStream", "FeishuLongConnection", "SlackSocketMode", "StandIn", "Watch"]
