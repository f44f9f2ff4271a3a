"""Who may call the API: per-tenant API keys, stored as hashes in the tenant's folder."""

from genworker.auth.errors import AuthError, KeyFileError, UnknownKeyError, UnknownTenantError, UnknownWorkerError
from genworker.auth.key_file import KEY_FILE, SCHEMA_VERSION
from genworker.auth.principal import Principal
from genworker.auth.store import ApiKeyInfo, ApiKeyStore

__all__ = [
    "KEY_FILE",
    "SCHEMA_VERSION",
    "ApiKeyInfo",
    "ApiKeyStore",
    "AuthError",
    "KeyFileError",
    "Principal",
    "UnknownKeyError",
    "UnknownTenantError",
    "UnknownWorkerError",
]
