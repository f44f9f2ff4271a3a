"""`genworker keys create|revoke|list`: manage a tenant's API keys from the shell.

`create` prints the key alone on the last line of stdout, so `... | tail -1` captures it.
`revoke` finds the key's tenant itself: key ids are unique in a workspace.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from genworker.cli.output import timestamp
from genworker.settings import load_settings

if TYPE_CHECKING:
    from genworker.auth import ApiKeyInfo, ApiKeyStore

__all__ = ["register"]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    keys = commands.add_parser("keys", help="create, revoke and list a tenant's API keys")
    actions = keys.add_subparsers(dest="keys_command", required=True)

    create = actions.add_parser("create", help="create a key; prints it once, alone on the last line")
    _common(create)
    create.add_argument("--workers", help="comma-separated workers the key may use (default: all)")
    create.add_argument("--label", default="", help="a note to recognise the key by")
    create.set_defaults(handler=_create)

    revoke = actions.add_parser("revoke", help="revoke a key; servers refuse it on the next request")
    _common(revoke, tenant_required=False)
    revoke.add_argument("key_id", help="the key_id (or the whole key)")
    revoke.set_defaults(handler=_revoke)

    listing = actions.add_parser("list", help="list a tenant's keys (never their secrets)")
    _common(listing)
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    listing.set_defaults(handler=_list)


def _common(parser: argparse.ArgumentParser, *, tenant_required: bool = True) -> None:
    what = "tenant id" if tenant_required else "tenant id (default: the tenant whose key it is)"
    parser.add_argument("--tenant", required=tenant_required, help=what)
    parser.add_argument("--workspace", type=Path, help="workspace folder (default GENWORKER_WORKSPACE)")


def _store(args: argparse.Namespace) -> ApiKeyStore:
    from genworker.auth import ApiKeyStore  # imported by the command that runs: `genworker run` starts sooner

    if args.workspace is not None:
        return ApiKeyStore(args.workspace)
    return ApiKeyStore(load_settings().workspace)


def _fail(exc: Exception) -> int:
    print(f"genworker keys: error: {exc}", file=sys.stderr)
    return 1


def _create(args: argparse.Namespace) -> int:
    from genworker.auth import AuthError

    workers = None if args.workers is None else [w.strip() for w in args.workers.split(",") if w.strip()]
    try:
        key_id, plaintext = _store(args).create(args.tenant, workers, args.label)
    except AuthError as exc:
        return _fail(exc)
    scope = "all workers" if workers is None else "workers " + ", ".join(sorted(set(workers)))
    print(f"Created key {key_id} for tenant {args.tenant} ({scope}). It is shown only this once:")
    print(plaintext)
    return 0


def _revoke(args: argparse.Namespace) -> int:
    from genworker.auth import AuthError
    from genworker.auth.keys import parse_key

    parsed = parse_key(args.key_id)
    key_id = parsed[0] if parsed else args.key_id
    store = _store(args)
    try:
        info = store.revoke(args.tenant or _owner(store, key_id), key_id)
    except AuthError as exc:
        return _fail(exc)
    print(f"Revoked key {key_id} of tenant {info.tenant_id} (at {timestamp(info.revoked_at)}).")
    return 0


def _owner(store: ApiKeyStore, key_id: str) -> str:
    """The tenant whose key file has `key_id` (create keeps key ids unique across tenants)."""
    from genworker.auth import KEY_FILE, AuthError, UnknownKeyError

    tenants = store.root / "tenants"
    owners, unreadable = [], []
    for folder in sorted(tenants.iterdir()) if tenants.is_dir() else ():
        if not (folder / KEY_FILE).is_file():
            continue
        try:
            keys = store.list(folder.name)
        except AuthError as exc:
            unreadable.append(exc)
            continue
        if any(key.key_id == key_id for key in keys):
            owners.append(folder.name)
    if not owners and unreadable:
        raise AuthError(f"no readable key file has a key {key_id!r}; unreadable: {unreadable[0]}")
    if not owners:
        raise UnknownKeyError(f"no tenant under {tenants} has a key {key_id!r} (see `genworker keys list`)")
    if len(owners) > 1:
        raise AuthError(f"key {key_id!r} is in several tenants' key files ({', '.join(owners)}): pass --tenant")
    return owners[0]


def _list(args: argparse.Namespace) -> int:
    from genworker.auth import AuthError

    try:
        keys = _store(args).list(args.tenant)
    except AuthError as exc:
        return _fail(exc)
    if args.json:
        print(json.dumps([k.as_dict() for k in keys], indent=2))
        return 0
    if not keys:
        print(f"Tenant {args.tenant} has no API keys.")
        return 0
    print(f"{'KEY_ID':<14}{'STATUS':<9}{'CREATED':<22}{'WORKERS':<24}LABEL")
    for key in keys:
        print(_row(key))
    return 0


def _row(key: ApiKeyInfo) -> str:
    status = "active" if key.active else "revoked"
    workers = "all" if key.workers is None else ",".join(key.workers)
    return f"{key.key_id:<14}{status:<9}{timestamp(key.created_at):<22}{workers:<24}{key.label}"
