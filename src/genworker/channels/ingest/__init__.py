"""Channel ingest: accepted IM events claimed once, journaled durably, then processed off the request path.

One concern per module: `accept.py` (the webhook route's side: replay guard, dedupe, journal, ack),
`journal.py` (the durable journal of accepted messages and their answers), `processor.py` (works
the journal until each message is answered and the answer delivered) and `wiring.py` (builds the
whole ingress for the runtime).
"""

from genworker.channels.ingest.accept import ChannelIngest
from genworker.channels.ingest.journal import EventJournal, JournalEntry, decode_message, encode_message
from genworker.channels.ingest.processor import (
    FAILURE_TEXT,
    ChannelProcessor,
    Outcome,
    approval_text,
    session_thread_id,
)
from genworker.channels.ingest.wiring import Channels, build_channels, create_channels, redelivery_policy, stop_with

__all__ = [
    "FAILURE_TEXT",
    "ChannelIngest",
    "ChannelProcessor",
    "Channels",
    "EventJournal",
    "JournalEntry",
    "Outcome",
    "approval_text",
    "build_channels",
    "create_channels",
    "decode_message",
    "encode_message",
    "redelivery_policy",
    "session_thread_id",
    "stop_with",
]
