"""Errors of the API key store: each says what to fix, and names the file when one is broken."""

from __future__ import annotations

__all__ = ["AuthError", "KeyFileError", "UnknownKeyError", "UnknownTenantError", "UnknownWorkerError"]


class AuthError(Exception):
    """Misuse of the key store (bad id, bad label ...)."""


class KeyFileError(AuthError):
    """A tenant's api_keys.json cannot be read; the message starts with its path."""


class UnknownTenantError(AuthError):
    """No such tenant: its folder has no TENANT.json."""


class UnknownWorkerError(AuthError):
    """A key was bound to a worker the tenant does not have."""


class UnknownKeyError(AuthError):
    """No key with that key_id in the tenant's key file."""
