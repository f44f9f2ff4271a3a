"""What can go wrong with a mailbox: an account that cannot be used as configured, or a command
the server refused. Connection failures stay the stdlib's (`imaplib.IMAP4.error`, `OSError`)."""

from __future__ import annotations

__all__ = ["MailConfigError", "MailError", "MailServerError"]


class MailError(Exception):
    """Base of the mailbox errors; the message says what is wrong."""


class MailConfigError(MailError):
    """The account cannot be used: CHANNEL_CREDENTIALS.json lacks a field it needs (named)."""


class MailServerError(MailError):
    """The server refused a command (select, search, fetch) or answered without what it must."""
