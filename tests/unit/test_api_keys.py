"""ApiKeyStore: create, verify, revoke and list; only hashes on disk; the file followed live."""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from genworker.auth import (
    KEY_FILE,
    ApiKeyStore,
    AuthError,
    KeyFileError,
    Principal,
    UnknownKeyError,
    UnknownTenantError,
    UnknownWorkerError,
)
from genworker.auth import keys as keys_module

TENANTS = {"acme": ["alice", "bob"], "globex": ["carol"]}


@pytest.fixture
def workspace(small_workspace: Callable[..., Path]) -> Path:
    return small_workspace(TENANTS)


@pytest.fixture
def store(workspace: Path) -> ApiKeyStore:
    return ApiKeyStore(workspace)


def key_file(workspace: Path, tenant: str = "acme") -> Path:
    return workspace / "tenants" / tenant / KEY_FILE


def test_created_key_verifies_to_its_tenant(store: ApiKeyStore) -> None:
    key_id, plaintext = store.create("acme", label="ci")
    assert plaintext.startswith(f"gwk_{key_id}_") and len(plaintext.split("_", 2)[2]) >= 43
    principal = store.verify(plaintext)
    assert principal == Principal("acme", key_id, None)
    assert principal.can_use("alice") and principal.can_use("anything")


def test_worker_bound_key(store: ApiKeyStore) -> None:
    key_id, plaintext = store.create("acme", ["bob", "alice", "bob"])
    principal = store.verify(plaintext)
    assert principal == Principal("acme", key_id, frozenset({"alice", "bob"}))
    assert principal.can_use("alice") and not principal.can_use("carol")
    assert store.list("acme")[0].workers == ("alice", "bob")


def test_only_the_hash_is_on_disk(store: ApiKeyStore, workspace: Path) -> None:
    key_id, plaintext = store.create("acme")
    secret = plaintext.split("_", 2)[2]
    path = key_file(workspace)
    text = path.read_text(encoding="utf-8")
    assert plaintext not in text and secret not in text
    data = json.loads(text)
    assert data["schema_version"] == 1
    [record] = data["keys"]
    assert record["key_id"] == key_id and record["hash"].startswith("sha256:")
    assert set(record) == {"key_id", "hash", "workers", "label", "created_at", "revoked_at"}
    assert path.stat().st_mode & 0o777 == 0o600
    leftovers = [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []


def test_wrong_secret_unknown_id_and_garbage_are_refused(store: ApiKeyStore) -> None:
    key_id, plaintext = store.create("acme")
    other_id, _ = store.create("acme")
    secret = plaintext.split("_", 2)[2]
    flipped = secret[:-1] + ("A" if secret[-1] != "A" else "B")
    for text in (
        "",
        "Bearer " + plaintext,
        plaintext + " ",
        plaintext.upper(),
        f"gwk_{key_id}_{flipped}",
        f"gwk_{other_id}_{secret}",  # right secret, another key's id
        f"gwk_000000000000_{secret}",
        f"gwk_{key_id}_short",
    ):
        assert store.verify(text) is None, text


def test_the_comparison_is_constant_time(store: ApiKeyStore, monkeypatch: pytest.MonkeyPatch) -> None:
    _, plaintext = store.create("acme")
    calls: list[tuple[str, str]] = []
    real = keys_module.hmac.compare_digest

    def spy(a: str, b: str) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(keys_module.hmac, "compare_digest", spy)
    assert store.verify(plaintext) is not None
    assert store.verify(plaintext[:-1] + ("x" if plaintext[-1] != "x" else "y")) is None
    assert store.verify(f"gwk_{'f' * 12}_{'s' * 43}") is None  # an unknown key_id is compared too
    assert len(calls) == 3 and all(a.startswith("sha256:") and len(a) == len(b) for a, b in calls)


def test_revoke_and_list(store: ApiKeyStore) -> None:
    first, plaintext = store.create("acme", label="laptop")
    second, other = store.create("acme", ["alice"])
    info = store.revoke("acme", first)
    assert info.key_id == first and not info.active and info.revoked_at is not None
    assert store.verify(plaintext) is None
    assert store.verify(other) is not None
    again = store.revoke("acme", first)  # idempotent: keeps the first revocation time
    assert again.revoked_at == info.revoked_at
    listed = {k.key_id: k for k in store.list("acme")}
    assert set(listed) == {first, second}
    assert not listed[first].active and listed[first].label == "laptop"
    assert listed[second].active and listed[second].workers == ("alice",)
    assert "hash" not in listed[first].as_dict() and listed[first].as_dict()["active"] is False
    assert store.list("globex") == []
    with pytest.raises(UnknownKeyError, match="has no key 'nope'"):
        store.revoke("acme", "nope")
    with pytest.raises(UnknownKeyError):
        store.revoke("globex", second)  # another tenant's key


def test_unknown_tenant_worker_and_bad_input(store: ApiKeyStore, workspace: Path) -> None:
    with pytest.raises(UnknownTenantError, match=r"unknown tenant 'nope': .*TENANT\.json does not exist"):
        store.create("nope")
    with pytest.raises(UnknownTenantError, match="not a valid id"):
        store.create("../acme")
    with pytest.raises(UnknownTenantError):
        store.list("nope")
    with pytest.raises(UnknownWorkerError, match="tenant 'acme' has no worker 'carol'"):
        store.create("acme", ["alice", "carol"])
    with pytest.raises(UnknownWorkerError):
        store.create("acme", ["../globex"])
    with pytest.raises(AuthError, match="workers is empty"):
        store.create("acme", [])
    with pytest.raises(AuthError, match="label"):
        store.create("acme", label="two\nlines")
    with pytest.raises(TypeError):
        store.create("acme", "alice")
    assert not key_file(workspace).exists()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("{not json", "not valid JSON"),
        ('{"keys": []}', "schema_version None is not supported"),
        ('{"schema_version": 2, "keys": []}', "schema_version 2 is not supported"),
        ('{"schema_version": 1, "keys": [{"key_id": "abc"}]}', "keys.0.key_id"),
        ('{"schema_version": 1, "keys": [], "extra": 1}', "extra"),
    ],
)
def test_malformed_file_is_named(store: ApiKeyStore, workspace: Path, body: str, message: str) -> None:
    path = key_file(workspace)
    path.parent.mkdir(parents=True)
    path.write_text(body, encoding="utf-8")
    with pytest.raises(KeyFileError, match=message) as caught:
        store.list("acme")
    assert str(caught.value).startswith(str(path))
    with pytest.raises(KeyFileError):
        store.create("acme")


def test_a_broken_file_authenticates_nobody_and_spares_other_tenants(
    store: ApiKeyStore, workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _, acme_key = store.create("acme")
    _, globex_key = store.create("globex")
    assert store.verify(acme_key) is not None
    path = key_file(workspace)
    path.write_text(path.read_text(encoding="utf-8")[:-20], encoding="utf-8")
    with caplog.at_level(logging.ERROR, "genworker.auth"):
        assert store.verify(acme_key) is None
    assert str(path) in caplog.text
    assert store.verify(globex_key) is not None


def test_duplicate_key_ids_in_a_file_are_rejected(store: ApiKeyStore, workspace: Path) -> None:
    store.create("acme")
    path = key_file(workspace)
    data = json.loads(path.read_text(encoding="utf-8"))
    data["keys"].append(data["keys"][0])
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(KeyFileError, match="appears twice"):
        store.list("acme")


def test_a_key_id_in_two_tenants_files_is_refused(store: ApiKeyStore, workspace: Path) -> None:
    _, plaintext = store.create("acme")
    store.create("globex")
    acme = json.loads(key_file(workspace).read_text(encoding="utf-8"))
    globex_path = key_file(workspace, "globex")
    globex = json.loads(globex_path.read_text(encoding="utf-8"))
    globex["keys"].append(acme["keys"][0])  # a copied record must not open another tenant
    globex_path.write_text(json.dumps(globex), encoding="utf-8")
    assert ApiKeyStore(workspace).verify(plaintext) is None


def test_changes_by_another_process_are_seen_without_restart(workspace: Path) -> None:
    server = ApiKeyStore(workspace)
    cli = ApiKeyStore(workspace)  # a second instance stands for `genworker keys` in another process
    key_id, plaintext = cli.create("acme")
    assert server.verify(plaintext) is not None  # a miss rescans: new keys work at once
    cli.revoke("acme", key_id)
    assert server.verify(plaintext) is None  # a hit re-stats: revoked keys stop at once
    _, later = cli.create("globex")
    assert server.verify(later) == Principal("globex", later.split("_")[1], None)
    key_file(workspace, "globex").unlink()
    assert server.verify(later) is None


def test_verify_cached_answers_only_what_the_cache_knows_for_sure(workspace: Path) -> None:
    server = ApiKeyStore(workspace)
    cli = ApiKeyStore(workspace)  # another process
    key_id, plaintext = cli.create("acme", workers=["alice"])
    assert server.verify_cached(plaintext) is None  # not cached yet: `verify` must rescan
    assert server.verify(plaintext) == Principal("acme", key_id, frozenset({"alice"}))
    assert server.verify_cached(plaintext) == Principal("acme", key_id, frozenset({"alice"}))
    assert server.verify_cached(plaintext[:-1] + ("x" if plaintext[-1] != "x" else "y")) is None
    assert server.verify_cached("gwk_nope") is None
    with server._lock:  # another thread refreshing the cache: no waiting, `verify` decides
        assert server.verify_cached(plaintext) is None
    cli.revoke("acme", key_id)
    assert server.verify_cached(plaintext) is None  # the file changed: one stat tells
    assert server.verify(plaintext) is None
    assert server.verify_cached(plaintext) is None  # cached now, and revoked


def test_revocation_is_seen_even_when_mtime_and_size_do_not_change(workspace: Path) -> None:
    server = ApiKeyStore(workspace)
    _, plaintext = server.create("acme")
    path = key_file(workspace)
    data = json.loads(path.read_text(encoding="utf-8"))
    active = json.dumps(data)
    data["keys"][0]["revoked_at"] = data["keys"][0]["created_at"]
    revoked = json.dumps(data)
    active += " " * (len(revoked) - len(active))

    def replace_with(body: str, mtime_ns: int) -> os.stat_result:
        tmp = path.with_name("replacement.json")
        tmp.write_text(body, encoding="utf-8")
        os.utime(tmp, ns=(mtime_ns, mtime_ns))
        tmp.replace(path)
        return path.stat()

    mtime = path.stat().st_mtime_ns
    before = replace_with(active, mtime)
    assert server.verify(plaintext) is not None
    after = replace_with(revoked, mtime)
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert server.verify_cached(plaintext) is None
    assert server.verify(plaintext) is None


def test_concurrent_creates_lose_no_key(store: ApiKeyStore, workspace: Path) -> None:
    created: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def work(index: int) -> None:
        target = store if index % 2 else ApiKeyStore(workspace)  # half share one store, half have their own
        start.wait(timeout=10)
        for _ in range(5):
            _, plaintext = target.create("acme")
            with lock:
                created.append(plaintext)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(created) == 40
    assert len(store.list("acme")) == 40
    assert all(store.verify(plaintext) is not None for plaintext in created)


def test_a_symlinked_auth_folder_outside_the_workspace_is_ignored(
    store: ApiKeyStore, workspace: Path, tmp_path: Path
) -> None:
    _, plaintext = store.create("globex")
    outside = tmp_path / "outside"
    (workspace / "tenants" / "globex" / "auth").rename(outside)
    (workspace / "tenants" / "globex" / "auth").symlink_to(outside)
    assert ApiKeyStore(workspace).verify(plaintext) is None
    with pytest.raises(AuthError, match="outside the workspace"):
        store.list("globex")
