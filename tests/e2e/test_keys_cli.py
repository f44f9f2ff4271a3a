"""The real `genworker keys` console script: the key alone on the last line, clear errors,
list and revoke, and concurrent creates from several processes."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from genworker.auth import ApiKeyStore, Principal

GENWORKER = Path(sys.executable).with_name("genworker")


@pytest.fixture
def workspace(small_workspace: Callable[..., Path]) -> Path:
    return small_workspace({"acme": ["alice", "bob"], "globex": ["carol"]})


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    configs = tmp_path / "configs"
    configs.mkdir()
    return {**os.environ, "GENWORKER_CONFIG_DIR": str(configs)}


def keys(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(GENWORKER), "keys", *args], capture_output=True, text=True, encoding="utf-8", env=env, timeout=60
    )


def test_create_prints_the_key_alone_on_the_last_line(workspace: Path, env: dict[str, str]) -> None:
    command = f"{shlex.quote(str(GENWORKER))} keys create --tenant acme --workspace {shlex.quote(str(workspace))}"
    piped = subprocess.run(
        f"{command} --label 'deploy bot' | tail -1",
        shell=True,
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=env,
        check=True,
        timeout=60,
    )
    plaintext = piped.stdout.strip()
    assert piped.stdout == plaintext + "\n" and plaintext.startswith("gwk_")
    principal = ApiKeyStore(workspace).verify(plaintext)
    assert principal == Principal("acme", plaintext.split("_")[1], None)
    assert [k.label for k in ApiKeyStore(workspace).list("acme")] == ["deploy bot"]


def test_worker_bound_create_and_settings_workspace(workspace: Path, env: dict[str, str]) -> None:
    result = keys(
        {**env, "GENWORKER_WORKSPACE": str(workspace)}, "create", "--tenant", "acme", "--workers", "bob,alice"
    )
    assert result.returncode == 0, result.stderr
    first, last = result.stdout.splitlines()
    assert "workers alice, bob" in first and last not in first
    principal = ApiKeyStore(workspace).verify(last)
    assert principal is not None and principal.workers == frozenset({"alice", "bob"})


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tenant", "nope"], "unknown tenant 'nope'"),
        (["--tenant", "acme", "--workers", "alice,carol"], "tenant 'acme' has no worker 'carol'"),
        (["--tenant", "acme", "--workers", ","], "workers is empty"),
    ],
)
def test_create_errors_are_one_line_and_fail(
    workspace: Path, env: dict[str, str], args: list[str], message: str
) -> None:
    result = keys(env, "create", "--workspace", str(workspace), *args)
    assert result.returncode != 0 and result.stdout == ""
    assert len(result.stderr.splitlines()) == 1 and message in result.stderr
    assert not (workspace / "tenants" / "acme" / "auth" / "api_keys.json").exists()


def test_list_and_revoke(workspace: Path, env: dict[str, str]) -> None:
    where = ["--tenant", "acme", "--workspace", str(workspace)]
    assert keys(env, "list", *where).stdout.strip() == "Tenant acme has no API keys."
    plaintext = keys(env, "create", *where, "--label", "ci").stdout.splitlines()[-1]
    key_id = plaintext.split("_")[1]
    keys(env, "create", *where, "--workers", "alice")

    table = keys(env, "list", *where).stdout.splitlines()
    assert table[0].split() == ["KEY_ID", "STATUS", "CREATED", "WORKERS", "LABEL"] and len(table) == 3
    listed = json.loads(keys(env, "list", *where, "--json").stdout)
    assert [k["label"] for k in listed] == ["ci", ""] and [k["workers"] for k in listed] == [None, ["alice"]]
    assert plaintext.split("_", 2)[2] not in json.dumps(listed) and "hash" not in listed[0]

    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", table[1].split()[2]), table[1]
    revoked = keys(env, "revoke", *where, key_id)
    assert revoked.returncode == 0 and f"Revoked key {key_id}" in revoked.stdout
    assert re.search(r" \(at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\)\.$", revoked.stdout.strip()), revoked.stdout
    assert ApiKeyStore(workspace).verify(plaintext) is None
    status = {k["key_id"]: k["active"] for k in json.loads(keys(env, "list", *where, "--json").stdout)}
    assert status[key_id] is False and sum(status.values()) == 1

    unknown = keys(env, "revoke", *where, "000000000000")
    assert unknown.returncode != 0 and "has no key '000000000000'" in unknown.stderr
    other_tenant = keys(env, "revoke", "--tenant", "globex", "--workspace", str(workspace), key_id)
    assert other_tenant.returncode != 0
    assert keys(env, "list", "--tenant", "nope", "--workspace", str(workspace)).returncode != 0


def test_revoke_finds_the_tenant_of_a_whole_key_or_a_key_id(workspace: Path, env: dict[str, str]) -> None:
    ws = ["--workspace", str(workspace)]
    acme = keys(env, "create", "--tenant", "acme", *ws).stdout.splitlines()[-1]
    globex = keys(env, "create", "--tenant", "globex", *ws).stdout.splitlines()[-1]
    keep = keys(env, "create", "--tenant", "globex", *ws).stdout.splitlines()[-1]

    by_key = keys(env, "revoke", *ws, globex)
    by_id = keys(env, "revoke", *ws, acme.split("_")[1])
    unknown = keys(env, "revoke", *ws, "000000000000")

    assert by_key.returncode == 0, by_key.stderr
    assert by_key.stdout.startswith(f"Revoked key {globex.split('_')[1]} of tenant globex (at ")
    assert by_id.returncode == 0 and "of tenant acme (at " in by_id.stdout, by_id.stderr
    store = ApiKeyStore(workspace)
    assert store.verify(globex) is None and store.verify(acme) is None and store.verify(keep) is not None
    assert unknown.returncode == 1 and unknown.stdout == "" and len(unknown.stderr.splitlines()) == 1
    assert "no tenant under " in unknown.stderr and "has a key '000000000000'" in unknown.stderr


def test_a_malformed_key_file_is_named(workspace: Path, env: dict[str, str]) -> None:
    path = workspace / "tenants" / "acme" / "auth" / "api_keys.json"
    path.parent.mkdir(parents=True)
    path.write_text("[]", encoding="utf-8")
    result = keys(env, "list", "--tenant", "acme", "--workspace", str(workspace))
    assert result.returncode != 0 and str(path) in result.stderr and "schema_version" in result.stderr


def test_concurrent_creates_from_several_processes_keep_every_key(workspace: Path, env: dict[str, str]) -> None:
    args = [str(GENWORKER), "keys", "create", "--tenant", "acme", "--workspace", str(workspace)]
    procs = [
        subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, encoding="utf-8", env=env)
        for _ in range(6)
    ]
    outputs = [proc.communicate(timeout=60) for proc in procs]
    assert all(proc.returncode == 0 for proc in procs), [err for _, err in outputs]
    store = ApiKeyStore(workspace)
    assert len(store.list("acme")) == 6
    assert all(store.verify(out.splitlines()[-1]) is not None for out, _ in outputs)
