"""The Inbox: sensed facts waiting for the heartbeat (pending -> processing -> consumed | failed | dead)."""

from genworker.autonomy.inbox.models import InboxItem, InboxState, InboxWriter, new_item

__all__ = ["InboxItem", "InboxState", "InboxWriter", "new_item"]
