"""The API key format, its hash and the constant-time check.

A key is `gwk_{key_id}_{secret}`: `key_id` (12 hex characters) is public and finds the
record; `secret` is 32 random bytes, urlsafe base64. Only `sha256:` + hex digest of the
secret is stored. A slow KDF (bcrypt, scrypt, argon2) protects low-entropy passwords from
offline guessing; a 256-bit random secret cannot be guessed, so a fast hash loses nothing
and keeps every request cheap.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

__all__ = ["KEY_PREFIX", "format_key", "hash_secret", "new_key", "parse_key", "secret_matches"]

KEY_PREFIX = "gwk"
KEY_ID_PATTERN = r"[0-9a-f]{12}"
HASH_PATTERN = r"sha256:[0-9a-f]{64}"
_SECRET_BYTES = 32
_KEY = re.compile(rf"{KEY_PREFIX}_({KEY_ID_PATTERN})_([A-Za-z0-9_-]{{43,128}})")
# compared against when the key_id is unknown, so a miss costs the same as a wrong secret
_NO_MATCH = "sha256:" + "0" * 64


def new_key() -> tuple[str, str]:
    """A fresh (key_id, secret)."""
    return secrets.token_hex(6), secrets.token_urlsafe(_SECRET_BYTES)


def format_key(key_id: str, secret: str) -> str:
    return f"{KEY_PREFIX}_{key_id}_{secret}"


def parse_key(plaintext: str) -> tuple[str, str] | None:
    """(key_id, secret), or None when the text is not shaped like a key."""
    match = _KEY.fullmatch(plaintext)
    return None if match is None else (match[1], match[2])


def hash_secret(secret: str) -> str:
    return "sha256:" + hashlib.sha256(secret.encode("utf-8")).hexdigest()


def secret_matches(secret: str, stored: str | None) -> bool:
    """Constant-time comparison of the secret's hash with the stored one (None: unknown key)."""
    return hmac.compare_digest(hash_secret(secret), stored or _NO_MATCH) and stored is not None
