"""The platforms' signature and encryption schemes, each exactly as the vendor documents it.

Pure functions over bytes and strings; every comparison of a secret-derived value is
constant-time. Decryption failures raise `VerificationError` naming the check.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import struct

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from genworker.channels.errors import VerificationError

__all__ = [
    "aes_cbc_decrypt",
    "dingtalk_sign",
    "feishu_decrypt",
    "feishu_signature",
    "slack_signature",
    "wecom_decrypt",
    "wecom_key",
    "wecom_signature",
]


def slack_signature(signing_secret: str, timestamp: str, body: bytes) -> str:
    """`v0=` + hex HMAC-SHA256 of `v0:{timestamp}:{body}` keyed with the signing secret."""
    base = b"v0:" + timestamp.encode("ascii") + b":" + body
    return "v0=" + hmac.new(signing_secret.encode("utf-8"), base, hashlib.sha256).hexdigest()


def feishu_signature(timestamp: str, nonce: str, encrypt_key: str, body: bytes) -> str:
    """Hex SHA-256 of timestamp + nonce + encrypt_key + raw body (X-Lark-Signature)."""
    return hashlib.sha256((timestamp + nonce + encrypt_key).encode("utf-8") + body).hexdigest()


def wecom_signature(token: str, timestamp: str, nonce: str, ciphertext: str) -> str:
    """Hex SHA-1 of the lexicographically sorted token, timestamp, nonce and ciphertext."""
    return hashlib.sha1("".join(sorted((token, timestamp, nonce, ciphertext))).encode("utf-8")).hexdigest()


def dingtalk_sign(app_secret: str, timestamp: str) -> str:
    """Base64 HMAC-SHA256 of `{timestamp}\\n{app_secret}` keyed with the app secret."""
    digest = hmac.new(app_secret.encode("utf-8"), f"{timestamp}\n{app_secret}".encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode("ascii")


def aes_cbc_decrypt(key: bytes, iv: bytes, ciphertext: bytes, block: int, check: str) -> bytes:
    """AES-CBC decrypt and strip PKCS#7 padding to `block`-byte blocks."""
    if not ciphertext or len(ciphertext) % 16:
        raise VerificationError(check, "ciphertext is not whole AES blocks", status=400, code="bad_ciphertext")
    decryptor = Cipher(algorithms.AES(key), modes.CBC(iv)).decryptor()
    plain = decryptor.update(ciphertext) + decryptor.finalize()
    pad = plain[-1]
    if not 1 <= pad <= block or plain[-pad:] != bytes([pad]) * pad:
        raise VerificationError(check, "decryption failed: bad padding (wrong key?)")
    return plain[:-pad]


def _b64(text: str, check: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise VerificationError(check, "ciphertext is not valid base64", status=400, code="bad_ciphertext") from None


def feishu_decrypt(encrypt_key: str, encrypted: str) -> bytes:
    """`encrypt` = base64(IV ‖ AES-256-CBC(PKCS7)); key = SHA-256(encrypt_key)."""
    raw = _b64(encrypted, "decrypt")
    if len(raw) < 32:
        raise VerificationError("decrypt", "ciphertext too short", status=400, code="bad_ciphertext")
    key = hashlib.sha256(encrypt_key.encode("utf-8")).digest()
    return aes_cbc_decrypt(key, raw[:16], raw[16:], 16, "decrypt")


def wecom_key(encoding_aes_key: str) -> bytes:
    key = _b64(encoding_aes_key + "=", "credentials")
    if len(key) != 32:
        raise VerificationError("credentials", "encoding_aes_key must be 43 base64 characters (32 bytes)")
    return key


def wecom_decrypt(key: bytes, encrypted: str) -> tuple[bytes, str]:
    """(message, receive id): AES-256-CBC, IV = key[:16], PKCS#7 to 32-byte blocks;
    plaintext = random(16) ‖ len(4, big-endian) ‖ message ‖ receive id (the corp id)."""
    plain = aes_cbc_decrypt(key, key[:16], _b64(encrypted, "decrypt"), 32, "decrypt")
    if len(plain) < 20:
        raise VerificationError("decrypt", "decrypted payload too short")
    (length,) = struct.unpack(">I", plain[16:20])
    if 20 + length > len(plain):
        raise VerificationError("decrypt", "decrypted payload length is inconsistent")
    return plain[20 : 20 + length], plain[20 + length :].decode("utf-8", "replace")
