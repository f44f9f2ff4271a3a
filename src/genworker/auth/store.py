"""ApiKeyStore: create, revoke, list and verify the API keys of every tenant.

Keys live only as hashes in each tenant's `auth/api_keys.json`. A server verifies keys
against a cache of those files that follows the disk: a hit re-stats the key's file and
re-reads it when it changed; a miss rescans every tenant. A key created or revoked by
`genworker keys` in another process is therefore honoured on the next request. `verify_cached`
answers a hit with that one stat and never waits (the event loop calls it); anything else is
for `verify`, which may read files.
"""

from __future__ import annotations

import builtins
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from genworker.auth.errors import AuthError, UnknownKeyError, UnknownTenantError, UnknownWorkerError
from genworker.auth.key_file import KEY_FILE, KeyRecord, locked, read_key_file, write_key_file
from genworker.auth.keys import format_key, hash_secret, new_key, parse_key, secret_matches
from genworker.auth.principal import Principal
from genworker.ids import InvalidIdError, is_inside, safe_join, validate_id

__all__ = ["ApiKeyInfo", "ApiKeyStore"]

log = logging.getLogger("genworker.auth")

_MAX_LABEL = 200
# (inode, mtime, ctime, size): every atomic replace makes a new inode, so a rewrite is seen
# even when the clock has not moved on
_Signature = tuple[int, int, int, int]


@dataclass(frozen=True, slots=True)
class ApiKeyInfo:
    """A key as listed: never its secret or hash."""

    tenant_id: str
    key_id: str
    workers: tuple[str, ...] | None
    label: str
    created_at: datetime
    revoked_at: datetime | None

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    def as_dict(self) -> dict[str, object]:
        return {
            "tenant_id": self.tenant_id,
            "key_id": self.key_id,
            "workers": list(self.workers) if self.workers is not None else None,
            "label": self.label,
            "created_at": self.created_at.isoformat(),
            "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None,
            "active": self.active,
        }


@dataclass(frozen=True, slots=True)
class _Cached:
    path: Path
    signature: _Signature
    records: Mapping[str, KeyRecord]


class ApiKeyStore:
    def __init__(self, workspace_root: Path) -> None:
        self.root = workspace_root.resolve()
        self._lock = threading.Lock()
        self._cache: dict[str, _Cached] = {}
        self._index: dict[str, set[str]] = {}  # key_id -> tenants whose file has it

    # -- managing keys (the CLI) ----------------------------------------------------

    def create(self, tenant_id: str, workers: Sequence[str] | None = None, label: str = "") -> tuple[str, str]:
        """A new key for the tenant, optionally bound to some of its workers: (key_id, plaintext).

        The plaintext is returned once and never stored.
        """
        path = self._key_file(tenant_id)
        bound = self._check_workers(tenant_id, workers)
        _check_label(label)
        with locked(path):
            records = read_key_file(path)
            taken = {r.key_id for r in records}
            while True:
                key_id, secret = new_key()
                with self._lock:
                    if key_id not in taken and self._find(key_id) is None:
                        break
            record = KeyRecord(
                key_id=key_id, hash=hash_secret(secret), workers=bound, label=label, created_at=datetime.now(UTC)
            )
            write_key_file(path, [*records, record])
        log.info("[Auth] created key %s for tenant %s (workers: %s)", key_id, tenant_id, _workers_text(bound))
        return key_id, format_key(key_id, secret)

    def revoke(self, tenant_id: str, key_id: str) -> ApiKeyInfo:
        """Revoke a key; revoking a revoked key changes nothing."""
        path = self._key_file(tenant_id)
        with locked(path):
            records = read_key_file(path)
            record = next((r for r in records if r.key_id == key_id), None)
            if record is None:
                raise UnknownKeyError(f"tenant {tenant_id!r} has no key {key_id!r} (see `genworker keys list`)")
            if record.revoked_at is None:
                record = record.model_copy(update={"revoked_at": datetime.now(UTC)})
                write_key_file(path, [record if r.key_id == key_id else r for r in records])
                log.info("[Auth] revoked key %s of tenant %s", key_id, tenant_id)
        return _info(tenant_id, record)

    def list(self, tenant_id: str) -> builtins.list[ApiKeyInfo]:
        path = self._key_file(tenant_id)
        return [_info(tenant_id, r) for r in read_key_file(path)]

    # -- authenticating requests (the server) ---------------------------------------

    def verify(self, plaintext: str) -> Principal | None:
        """The key's principal, or None for anything but a well-formed, known, unrevoked key."""
        parsed = parse_key(plaintext)
        if parsed is None:
            return None
        key_id, secret = parsed
        with self._lock:
            found = self._find(key_id)
        record = found[1] if found else None
        if not secret_matches(secret, record.hash if record else None) or found is None:
            return None
        tenant_id, record = found
        if record.revoked_at is not None:
            return None
        return _principal(tenant_id, record)

    def verify_cached(self, plaintext: str) -> Principal | None:
        """The key's principal when the cache knows it and its file has not changed (one `stat`), without
        waiting for a lock; None means "ask `verify`": a key it does not know, a changed file, a wrong
        secret or a revoked key, or the cache busy in another thread."""
        parsed = parse_key(plaintext)
        if parsed is None or not self._lock.acquire(blocking=False):
            return None
        key_id, secret = parsed
        try:
            tenants = self._index.get(key_id, set())
            tenant_id = next(iter(tenants)) if len(tenants) == 1 else None
            cached = self._cache[tenant_id] if tenant_id is not None else None
        finally:
            self._lock.release()
        if tenant_id is None or cached is None or _signature(cached.path) != cached.signature:
            return None
        record = cached.records[key_id]
        if record.revoked_at is not None or not secret_matches(secret, record.hash):
            return None
        return _principal(tenant_id, record)

    def _find(self, key_id: str) -> tuple[str, KeyRecord] | None:
        """Lookup through the cache, refreshed from disk. Call with self._lock held (or from one thread)."""
        for rescan in (False, True):
            if rescan:
                self._rescan()
            tenants = self._index.get(key_id, set())
            for tenant_id in builtins.list(tenants):
                self._refresh(tenant_id)
            tenants = self._index.get(key_id, set())
            if len(tenants) > 1:
                log.error("[Auth] key_id %s is in several tenants' key files (%s): refused", key_id, sorted(tenants))
                return None
            if tenants:
                tenant_id = next(iter(tenants))
                return tenant_id, self._cache[tenant_id].records[key_id]
        return None

    def _rescan(self) -> None:
        tenants_dir = self.root / "tenants"
        try:
            names = {e.name for e in os.scandir(tenants_dir) if e.is_dir() and _valid(e.name)}
        except OSError:
            names = set()
        for tenant_id in names | set(self._cache):
            self._refresh(tenant_id)

    def _refresh(self, tenant_id: str) -> None:
        path = self.root / "tenants" / tenant_id / KEY_FILE
        signature = _signature(path)
        cached = self._cache.get(tenant_id)
        if cached is not None and cached.signature == signature:
            return
        self._drop(tenant_id)
        if signature is None:
            return
        self._cache[tenant_id] = _Cached(path, signature, self._load(path))
        for key_id in self._cache[tenant_id].records:
            self._index.setdefault(key_id, set()).add(tenant_id)

    def _load(self, path: Path) -> Mapping[str, KeyRecord]:
        """A tenant's records for verification; a broken or escaping file authenticates nobody."""
        if not is_inside(self.root, path):
            log.error("[Auth] %s resolves outside the workspace: its keys are ignored", path)
            return {}
        try:
            return {r.key_id: r for r in read_key_file(path)}
        except AuthError as exc:
            log.error("[Auth] %s: the tenant's keys are refused until it is fixed", exc)
            return {}

    def _drop(self, tenant_id: str) -> None:
        cached = self._cache.pop(tenant_id, None)
        for key_id in cached.records if cached else ():
            owners = self._index.get(key_id)
            if owners is not None:
                owners.discard(tenant_id)
                if not owners:
                    del self._index[key_id]

    # -- checks ---------------------------------------------------------------------

    def _key_file(self, tenant_id: str) -> Path:
        """The tenant's key file; the tenant must exist."""
        try:
            folder = safe_join(self.root / "tenants", tenant_id, kind="tenant id")
        except (InvalidIdError, ValueError) as exc:
            raise UnknownTenantError(str(exc)) from None
        if not (folder / "TENANT.json").is_file():
            raise UnknownTenantError(f"unknown tenant {tenant_id!r}: {folder / 'TENANT.json'} does not exist")
        path = folder / KEY_FILE
        if not is_inside(self.root, path):
            raise AuthError(f"{path} resolves outside the workspace {self.root}")
        return path

    def _check_workers(self, tenant_id: str, workers: Sequence[str] | None) -> tuple[str, ...] | None:
        if workers is None:
            return None
        if isinstance(workers, str):
            raise TypeError("workers must be a sequence of worker ids, not one string")
        if not workers:
            raise AuthError("workers is empty: name at least one worker, or none at all for every worker")
        folder = self.root / "tenants" / tenant_id / "workers"
        unknown = [w for w in workers if not _valid(w) or not (folder / w).is_dir()]
        if unknown:
            names = ", ".join(repr(w) for w in unknown)
            raise UnknownWorkerError(f"tenant {tenant_id!r} has no worker {names} (no folder under {folder})")
        return tuple(sorted(set(workers)))


def _signature(path: Path) -> _Signature | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)


def _principal(tenant_id: str, record: KeyRecord) -> Principal:
    workers = frozenset(record.workers) if record.workers is not None else None
    return Principal(tenant_id, record.key_id, workers)


def _valid(value: str) -> bool:
    try:
        validate_id(value)
    except InvalidIdError:
        return False
    return True


def _check_label(label: str) -> None:
    if len(label) > _MAX_LABEL or any(ch < " " for ch in label):
        raise AuthError(f"label must be one line of at most {_MAX_LABEL} characters")


def _workers_text(workers: tuple[str, ...] | None) -> str:
    return "all" if workers is None else ", ".join(workers)


def _info(tenant_id: str, record: KeyRecord) -> ApiKeyInfo:
    return ApiKeyInfo(tenant_id, record.key_id, record.workers, record.label, record.created_at, record.revoked_at)
