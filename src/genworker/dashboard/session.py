"""Dashboard sessions: a signed cookie standing in for the tenant's API key, and its CSRF token.

Logging in with an API key sets `genworker_session` (HttpOnly, SameSite=Strict, Secure over
https). The cookie carries no secret: it is `v1~{key_id}~{tenant_id}~{expires}~{nonce}~{mac}`
(`~` never occurs in an id), HMAC-SHA256 signed with the tenant's session secret
(`tenants/{t}/auth/dashboard_session.json` next to its API keys: created once, 0600, shared by
every process on the workspace). Every request re-reads the key's record, so revoking the key ends
its sessions at once; the principal is rebuilt from that record. Logging out records the session
under `tenants/{t}/auth/dashboard_ended/`, so every process refuses it from then on.

A cookie-authenticated request that changes something (any method but GET/HEAD/OPTIONS) must
send `X-CSRF-Token`, the HMAC of the cookie under the same secret (double-submit, signed). The
page reads it from `GET /dashboard/session`; another origin can neither read it nor set the header.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from starlette.requests import Request

from genworker.auth import ApiKeyStore, Principal
from genworker.auth.errors import AuthError
from genworker.fsutil import create_exclusive
from genworker.ids import InvalidIdError, PathEscapeError, safe_join

__all__ = [
    "COOKIE",
    "CSRF_HEADER",
    "SESSION_SCHEMA_VERSION",
    "SESSION_TTL_S",
    "CsrfRefused",
    "Session",
    "SessionSigner",
    "session_principal",
    "signer_for",
]

COOKIE = "genworker_session"
CSRF_HEADER = "x-csrf-token"
SESSION_TTL_S = 8 * 3600
SESSION_SCHEMA_VERSION = 1
SECRET_FILE = Path("auth") / "dashboard_session.json"  # in the tenant's folder, like its API keys
ENDED_DIR = Path("auth") / "dashboard_ended"
_SEP = "~"
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_signers: dict[tuple[Path, str], SessionSigner] = {}
_signers_lock = threading.Lock()


class CsrfRefused(Exception):
    """A cookie-authenticated request that changes state came without its `X-CSRF-Token` (the API answers 403)."""


@dataclass(frozen=True, slots=True)
class Session:
    key_id: str
    tenant_id: str
    expires: int  # unix seconds
    cookie: str


class SessionSigner:
    """Signs and checks session cookies with one secret; remembers cookies logged out here."""

    def __init__(self, secret: bytes, *, ttl_s: int = SESSION_TTL_S, ended_dir: Path | None = None) -> None:
        if len(secret) < 32:
            raise ValueError("the session secret must be at least 32 bytes")
        self._secret = secret
        self.ttl_s = ttl_s
        self.ended_dir = ended_dir  # logged-out sessions, seen by every process on the workspace
        self._ended: dict[str, int] = {}  # cookie mac -> expiry
        self._lock = threading.Lock()

    @classmethod
    def for_tenant(cls, tenant_dir: Path) -> SessionSigner:
        """The tenant's signer; the first process to need a secret creates its file. Blocking."""
        path = tenant_dir / SECRET_FILE
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            body = {
                "schema_version": SESSION_SCHEMA_VERSION,
                "secret": secrets.token_hex(32),
                "created_at": datetime.now(UTC).isoformat(),
            }
            create_exclusive(path, json.dumps(body, indent=2).encode("utf-8"))  # a racing creator's file wins
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            version = data.get("schema_version")
            if version != SESSION_SCHEMA_VERSION:
                raise ValueError(f"unsupported schema_version {version!r} (this build reads {SESSION_SCHEMA_VERSION})")
            secret = bytes.fromhex(data["secret"])
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise AuthError(f"{path}: field 'secret' or 'schema_version' is invalid: {exc}") from None
        return cls(secret, ended_dir=tenant_dir / ENDED_DIR)

    def issue(self, key_id: str, tenant_id: str, *, now: float | None = None) -> Session:
        expires = int((time.time() if now is None else now) + self.ttl_s)
        payload = _SEP.join(("v1", key_id, tenant_id, str(expires), secrets.token_urlsafe(12)))
        return Session(key_id, tenant_id, expires, f"{payload}{_SEP}{self._mac(payload)}")

    def check(self, cookie: str, *, now: float | None = None) -> Session | None:
        """The session the cookie names, or None when it is forged, expired or logged out."""
        payload, _, mac = cookie.rpartition(_SEP)
        parts = payload.split(_SEP)
        if len(parts) != 5 or parts[0] != "v1" or not hmac.compare_digest(mac, self._mac(payload)):
            return None
        _, key_id, tenant_id, expires_text, _ = parts
        if not expires_text.isdigit():
            return None
        expires = int(expires_text)
        clock = time.time() if now is None else now
        if expires <= clock:
            return None
        with self._lock:
            if mac in self._ended:
                return None
        if self.ended_dir is not None and (self.ended_dir / f"{mac}.json").exists():  # mac: base64url, checked
            return None
        return Session(key_id, tenant_id, expires, cookie)

    def end(self, session: Session) -> None:
        """Log the session out here and, with `ended_dir`, in every process; blocking."""
        now = int(time.time())
        mac = session.cookie.rpartition(_SEP)[2]
        with self._lock:
            self._ended = {m: e for m, e in self._ended.items() if e > now}
            self._ended[mac] = session.expires
        if self.ended_dir is None:
            return
        self.ended_dir.mkdir(parents=True, exist_ok=True)
        body = {"schema_version": SESSION_SCHEMA_VERSION, "expires": session.expires}
        create_exclusive(self.ended_dir / f"{mac}.json", json.dumps(body).encode("utf-8"))
        for path in self.ended_dir.glob("*.json"):  # forget sessions that have expired anyway
            try:
                if json.loads(path.read_text(encoding="utf-8")).get("expires", 0) <= now:
                    path.unlink(missing_ok=True)
            except (OSError, ValueError, AttributeError):
                continue

    def csrf_token(self, session: Session) -> str:
        return self._mac("csrf:" + session.cookie)

    def csrf_ok(self, session: Session, token: str | None) -> bool:
        return token is not None and hmac.compare_digest(token, self.csrf_token(session))

    def _mac(self, text: str) -> str:
        digest = hmac.new(self._secret, text.encode("utf-8"), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def signer_for(workspace_root: Path, tenant_id: str) -> SessionSigner | None:
    """The tenant's signer, or None when no such tenant exists (nothing is created for it). Blocking."""
    root = workspace_root.resolve()
    with _signers_lock:
        signer = _signers.get((root, tenant_id))
    if signer is not None:
        return signer
    try:
        tenant_dir = safe_join(root / "tenants", tenant_id, kind="tenant id")
    except (InvalidIdError, PathEscapeError):
        return None
    if not (tenant_dir / "TENANT.json").is_file():
        return None
    made = SessionSigner.for_tenant(tenant_dir)
    with _signers_lock:
        return _signers.setdefault((root, tenant_id), made)


def current_session(request: Request, workspace_root: Path) -> tuple[SessionSigner, Session] | None:
    """The request's valid session and its tenant's signer; None without one. Blocking."""
    cookie = request.cookies.get(COOKIE)
    parts = cookie.split(_SEP) if cookie else []
    if cookie is None or len(parts) != 6:
        return None
    signer = signer_for(workspace_root, parts[2])
    session = signer.check(cookie) if signer is not None else None
    return (signer, session) if signer is not None and session is not None else None


def session_principal(request: Request, keys: ApiKeyStore) -> Principal | None:
    """The principal of a valid session cookie (None without one); blocking: reads the key file.

    A state-changing request without the matching `X-CSRF-Token` header raises CsrfRefused.
    """
    if COOKIE not in request.cookies:
        return None
    found = current_session(request, keys.root)
    if found is None:
        return None
    signer, session = found
    principal = key_principal(keys, session.tenant_id, session.key_id)
    if principal is None:
        return None
    if request.method not in _SAFE_METHODS and not signer.csrf_ok(session, request.headers.get(CSRF_HEADER)):
        raise CsrfRefused("cookie-authenticated requests that change state need the X-CSRF-Token header")
    return principal


def key_principal(keys: ApiKeyStore, tenant_id: str, key_id: str) -> Principal | None:
    """The principal of an active key, read from its record now (so a revoked key is refused)."""
    try:
        info = next((k for k in keys.list(tenant_id) if k.key_id == key_id), None)
    except AuthError:
        return None
    if info is None or not info.active:
        return None
    return Principal(tenant_id, key_id, frozenset(info.workers) if info.workers is not None else None)
