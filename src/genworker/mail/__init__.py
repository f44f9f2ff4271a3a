"""The worker's own mailbox, read over IMAP: its account, login, read-only folder access and
message parsing, shared by the email sensor, the email channel and the mailbox tools."""
