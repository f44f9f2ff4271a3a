"""One suite, both session backends: files on tmp_path and the real Redis server."""

from __future__ import annotations

import asyncio
import io
import json
import os
import shutil
import sys
import traceback
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from genworker.conversation import (
    ArchiveChunk,
    AssistantMessage,
    ConcurrentUpdateError,
    ConversationSession,
    FileSessionStore,
    RedisSessionStore,
    SessionCorruptError,
    SessionManager,
    SessionNotFoundError,
    SessionSchemaError,
    SessionStore,
    UserMessage,
    encode_session,
)
from genworker.ids import InvalidIdError

pytestmark = pytest.mark.anyio

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class Backend:
    """A store plus what the tests need to poke at its storage directly."""

    kind: str
    clock: Clock
    store: SessionStore

    def reopen(self) -> SessionStore:
        """A new store object over the same files / Redis, as after a restart."""
        raise NotImplementedError

    async def write_raw(self, tenant_id: str, session_id: str, raw: str, *, schema_version: Any = 1) -> str:
        """Store `raw` as the session document; returns the source name errors must mention."""
        raise NotImplementedError

    async def read_raw(self, tenant_id: str, session_id: str) -> str | None:
        raise NotImplementedError

    async def drop_chunk(self, tenant_id: str, session_id: str, start: int) -> None:
        """Lose one archived chunk behind the store's back."""
        raise NotImplementedError

    async def archive_exists(self, tenant_id: str, session_id: str) -> bool:
        raise NotImplementedError


class FileBackend(Backend):
    kind = "file"
    store: FileSessionStore

    def __init__(self, root: Path) -> None:
        self.root = root
        self.clock = Clock()
        self.store = self.reopen()

    def reopen(self) -> FileSessionStore:
        return FileSessionStore(self.root, clock=self.clock)

    def path(self, tenant_id: str, session_id: str) -> Path:
        return self.root / "tenants" / tenant_id / "sessions" / f"{session_id}.json"

    async def write_raw(self, tenant_id: str, session_id: str, raw: str, *, schema_version: Any = 1) -> str:
        path = self.path(tenant_id, session_id)
        await asyncio.to_thread(path.parent.mkdir, parents=True, exist_ok=True)
        await asyncio.to_thread(path.write_text, raw, encoding="utf-8")
        return str(path)

    async def read_raw(self, tenant_id: str, session_id: str) -> str | None:
        path = self.path(tenant_id, session_id)
        try:
            return await asyncio.to_thread(path.read_text, encoding="utf-8")
        except FileNotFoundError:
            return None

    def archive_dir(self, tenant_id: str, session_id: str) -> Path:
        return self.root / "tenants" / tenant_id / "sessions" / "archive" / session_id

    async def drop_chunk(self, tenant_id: str, session_id: str, start: int) -> None:
        await asyncio.to_thread((self.archive_dir(tenant_id, session_id) / f"{start:010d}.json").unlink)

    async def archive_exists(self, tenant_id: str, session_id: str) -> bool:
        return await asyncio.to_thread(self.archive_dir(tenant_id, session_id).exists)


class RedisBackend(Backend):
    kind = "redis"

    def __init__(self, client: Redis, url: str, prefix: str) -> None:
        self.client = client
        self.url = url
        self.prefix = prefix
        self.clock = Clock()  # Redis expires keys itself; the clock only stamps updated_at
        self.store = self.reopen()

    def reopen(self) -> RedisSessionStore:
        return RedisSessionStore(self.client, prefix=self.prefix)

    def key(self, tenant_id: str, session_id: str) -> str:
        return f"{self.prefix}:{tenant_id}:session:{session_id}"

    async def write_raw(self, tenant_id: str, session_id: str, raw: str, *, schema_version: Any = 1) -> str:
        key = self.key(tenant_id, session_id)
        await self.client.hset(key, mapping={"session": raw, "schema_version": str(schema_version), "version": "1"})
        await self.client.zadd(f"{self.prefix}:{tenant_id}:sessions", {session_id: 0})
        return f"redis key {key}"

    async def read_raw(self, tenant_id: str, session_id: str) -> str | None:
        raw = await self.client.hget(self.key(tenant_id, session_id), "session")
        return raw.decode() if isinstance(raw, bytes) else raw

    async def drop_chunk(self, tenant_id: str, session_id: str, start: int) -> None:
        await self.client.hdel(f"{self.prefix}:{tenant_id}:archive:{session_id}", f"{start:010d}")

    async def archive_exists(self, tenant_id: str, session_id: str) -> bool:
        return bool(await self.client.exists(f"{self.prefix}:{tenant_id}:archive:{session_id}"))


@pytest.fixture(params=["file", pytest.param("redis", marks=pytest.mark.redis)])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    if request.param == "file":
        yield FileBackend(tmp_path / "ws")
        return
    url = request.getfixturevalue("redis_url")
    prefix = f"gwtest-{uuid.uuid4().hex}"
    client = Redis.from_url(url)
    try:
        yield RedisBackend(client, url, prefix)
    finally:
        keys = [k async for k in client.scan_iter(match=f"{prefix}:*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()


def new_session(
    worker_id: str = "alice", thread_id: str = "t1", *, tenant_id: str = "acme", at: datetime = T0, **more: Any
) -> ConversationSession:
    return ConversationSession(
        session_id=f"{worker_id}.{thread_id}",
        tenant_id=tenant_id,
        worker_id=worker_id,
        kind="thread",
        thread_id=thread_id,
        created_at=at,
        updated_at=at,
        **more,
    )


def manager_of(backend: Backend, store: SessionStore | None = None, **kwargs: Any) -> SessionManager:
    return SessionManager(store or backend.store, clock=backend.clock, **kwargs)


# -- the store ---------------------------------------------------------------------


async def test_round_trip(backend: Backend) -> None:
    value = new_session(
        ttl_s=3600,
        metadata={"channel": "slack", "tags": ["x"]},
        messages=(UserMessage("hi", created_at=T0), AssistantMessage("hello", created_at=T0, run_id="r1")),
    )
    stored = await backend.store.save(value, expected_version=0)
    assert stored == replace(value, version=1)
    assert await backend.store.get("acme", "alice.t1") == stored
    assert await backend.store.get("acme", "alice.nope") is None


async def test_restart_reads_the_same_sessions(backend: Backend) -> None:
    session = await manager_of(backend).get_or_create_thread("acme", "alice", "t1")
    session = await manager_of(backend).append(session, UserMessage("remember me", created_at=T0))
    after_restart = manager_of(backend, backend.reopen())
    assert await after_restart.get("acme", session.session_id) == session
    assert await after_restart.get_or_create_thread("acme", "alice", "t1") == session


async def test_compare_and_set_refuses_a_stale_version(backend: Backend) -> None:
    first = await backend.store.save(new_session(), expected_version=0)
    await backend.store.save(replace(first, metadata={"a": 1}), expected_version=1)
    with pytest.raises(ConcurrentUpdateError) as caught:
        await backend.store.save(replace(first, metadata={"b": 2}), expected_version=1)
    assert (caught.value.expected, caught.value.actual) == (1, 2)
    with pytest.raises(ConcurrentUpdateError):
        await backend.store.save(new_session(), expected_version=0)  # already exists
    stored = await backend.store.get("acme", "alice.t1")
    assert stored is not None and stored.version == 2 and dict(stored.metadata) == {"a": 1}


async def test_unknown_schema_version_is_a_clear_error(backend: Backend) -> None:
    doc = json.loads(encode_session(new_session()))
    doc["schema_version"] = 999
    source = await backend.write_raw("acme", "alice.t1", json.dumps(doc), schema_version=999)
    with pytest.raises(SessionSchemaError) as caught:
        await backend.store.get("acme", "alice.t1")
    assert source in str(caught.value) and "999" in str(caught.value)
    assert await backend.store.list("acme") == ()  # listing skips it instead of failing


async def test_corrupted_session_names_the_file_and_loses_nothing_else(backend: Backend) -> None:
    manager = manager_of(backend)
    good = await manager.append(await manager.get_or_create_thread("acme", "alice", "good"), UserMessage("keep"))
    source = await backend.write_raw("acme", "alice.bad", '{"schema_version": 1, "messages": [')
    with pytest.raises(SessionCorruptError) as caught:
        await backend.store.get("acme", "alice.bad")
    assert source in str(caught.value)
    assert [s.session_id for s in await backend.store.list("acme")] == ["alice.good"]
    assert await backend.store.get("acme", "alice.good") == good
    assert await backend.read_raw("acme", "alice.bad") == '{"schema_version": 1, "messages": ['
    if backend.kind == "file":  # the file CAS must parse the file, so it never overwrites one it cannot read
        with pytest.raises(SessionCorruptError):
            await backend.store.save(new_session(thread_id="bad"), expected_version=1)
        assert await backend.read_raw("acme", "alice.bad") == '{"schema_version": 1, "messages": ['


async def test_tenants_are_isolated(backend: Backend) -> None:
    await backend.store.save(new_session(messages=(UserMessage("acme secret", created_at=T0),)), expected_version=0)
    assert await backend.store.get("globex", "alice.t1") is None
    assert await backend.store.list("globex") == ()
    assert await backend.store.delete("globex", "alice.t1") is False
    other = await backend.store.save(new_session(tenant_id="globex"), expected_version=0)
    mine = await backend.store.get("acme", "alice.t1")
    assert other.messages == () and mine is not None and len(mine.messages) == 1
    with pytest.raises(InvalidIdError):
        await backend.store.get("../acme", "alice.t1")
    with pytest.raises(InvalidIdError):
        await backend.store.get("acme", "../../x")


async def test_a_session_planted_under_another_tenant_is_refused(backend: Backend) -> None:
    source = await backend.write_raw("globex", "alice.t1", encode_session(new_session(tenant_id="acme")).decode())
    with pytest.raises(SessionCorruptError, match="of tenant 'acme'") as caught:
        await backend.store.get("globex", "alice.t1")
    assert source in str(caught.value)


async def test_list_is_newest_first_and_filters_by_worker(backend: Backend) -> None:
    manager = manager_of(backend)
    created = []
    for worker, thread in [("alice", "a1"), ("bob", "b1"), ("alice", "a2")]:
        created.append(await manager.get_or_create_thread("acme", worker, thread))
        backend.clock.advance(1)
    await manager.append(created[0], UserMessage("bump"))  # now the newest
    listed = await backend.store.list("acme")
    assert [s.session_id for s in listed] == ["alice.a1", "alice.a2", "bob.b1"]
    assert listed[0].message_count == 1 and listed[0].version == 2 and listed[0].updated_at == T0 + timedelta(seconds=3)
    assert [s.session_id for s in await backend.store.list("acme", "alice")] == ["alice.a1", "alice.a2"]
    assert await backend.store.list("acme", "carol") == ()


async def test_delete(backend: Backend) -> None:
    await backend.store.save(new_session(), expected_version=0)
    assert await backend.store.delete("acme", "alice.t1") is True
    assert await backend.store.delete("acme", "alice.t1") is False
    assert await backend.store.get("acme", "alice.t1") is None
    assert await backend.store.list("acme") == ()
    await backend.store.save(new_session(), expected_version=0)  # the id can be used again


# -- the aggregate and the manager -------------------------------------------------


async def test_get_or_create_thread_and_main_session(backend: Backend) -> None:
    manager = manager_of(backend, new_thread_id=lambda: "generated")
    thread = await manager.get_or_create_thread("acme", "alice", ttl_s=600, metadata={"source": "web"})
    assert (thread.session_id, thread.kind, thread.version, thread.ttl_s) == ("alice.generated", "thread", 1, 600)
    assert dict(thread.metadata) == {"source": "web"}
    assert await manager.get_or_create_thread("acme", "alice", "generated") == thread
    main = await manager.main_session("acme", "alice")
    assert (main.session_id, main.kind, main.thread_id) == ("alice.main", "main", "main")
    assert await manager.main_session("acme", "alice") == main
    assert {s.kind for s in await manager.list("acme", "alice")} == {"thread", "main"}
    with pytest.raises(InvalidIdError):
        await manager.get_or_create_thread("acme", "alice", "main")


async def test_aggregate_changes_metadata_and_ttl(backend: Backend) -> None:
    manager = manager_of(backend)
    session = await manager.get_or_create_thread("acme", "alice", "t1", metadata={"a": 1, "b": 2})
    backend.clock.advance(5)
    session = await manager.set_metadata(session, {"c": [3]}, remove=("a",))
    assert dict(session.metadata) == {"b": 2, "c": (3,)} and session.updated_at == T0 + timedelta(seconds=5)
    session = await manager.set_ttl(session, 120)
    assert session.ttl_s == 120 and session.created_at == T0
    session = await manager.set_ttl(session, None)
    assert session.ttl_s is None and session.version == 4
    with pytest.raises(ValueError, match="positive"):
        await manager.set_ttl(session, 0)


async def test_stale_copy_appends_on_top_of_the_latest(backend: Backend) -> None:
    manager = manager_of(backend)
    session = await manager.get_or_create_thread("acme", "alice", "t1")
    await manager.append(session, UserMessage("first"))
    latest = await manager.append(session, UserMessage("second"))  # from the stale copy: retried
    assert [m.content for m in latest.messages] == ["first", "second"] and latest.version == 3


class CountingStore:
    """Delegates to a real store and counts lost compare-and-sets."""

    def __init__(self, inner: SessionStore) -> None:
        self.inner = inner
        self.conflicts = 0

    async def get(self, tenant_id: str, session_id: str) -> ConversationSession | None:
        return await self.inner.get(tenant_id, session_id)

    async def save(self, session: ConversationSession, expected_version: int) -> ConversationSession:
        try:
            return await self.inner.save(session, expected_version)
        except ConcurrentUpdateError:
            self.conflicts += 1
            raise

    async def list(self, tenant_id: str, worker_id: str | None = None) -> tuple[Any, ...]:
        return await self.inner.list(tenant_id, worker_id)

    async def delete(self, tenant_id: str, session_id: str) -> bool:
        return await self.inner.delete(tenant_id, session_id)

    async def archive(self, chunk: ArchiveChunk, ttl_s: int | None = None) -> None:
        await self.inner.archive(chunk, ttl_s)

    async def archived(self, session: ConversationSession) -> tuple[Any, ...]:
        return await self.inner.archived(session)


async def test_two_concurrent_appenders_lose_nothing(backend: Backend) -> None:
    stores = CountingStore(backend.store), CountingStore(backend.reopen())  # the second: another process
    one, two = manager_of(backend, stores[0]), manager_of(backend, stores[1])
    start = await one.get_or_create_thread("acme", "alice", "t1")

    async def writer(manager: SessionManager, name: str) -> None:
        session = start
        for i in range(10):
            session = await manager.append(session, UserMessage(f"{name}-{i}"))

    await asyncio.wait_for(asyncio.gather(writer(one, "a"), writer(two, "b"), writer(one, "c")), 30)
    final = await one.get("acme", "alice.t1")
    assert final is not None and final.version == 31
    assert stores[0].conflicts + stores[1].conflicts >= 2  # all three started from version 1
    contents = [m.content for m in final.messages]
    for name in "abc":
        assert [c for c in contents if c.startswith(name)] == [f"{name}-{i}" for i in range(10)]


async def test_appending_to_a_deleted_session_is_refused(backend: Backend) -> None:
    manager = manager_of(backend)
    session = await manager.get_or_create_thread("acme", "alice", "t1")
    await manager.delete("acme", session.session_id)
    with pytest.raises(SessionNotFoundError, match=r"alice\.t1"):
        await manager.append(session, UserMessage("late"))


async def test_retries_are_bounded() -> None:
    class AlwaysConflicting:
        async def get(self, tenant_id: str, session_id: str) -> ConversationSession | None:
            return new_session(version=7)

        async def save(self, session: ConversationSession, expected_version: int) -> ConversationSession:
            raise ConcurrentUpdateError(session.session_id, expected_version, expected_version + 1)

        async def list(self, tenant_id: str, worker_id: str | None = None) -> tuple[Any, ...]:
            return ()

        async def delete(self, tenant_id: str, session_id: str) -> bool:
            return False

    manager = SessionManager(AlwaysConflicting(), max_attempts=3)
    with pytest.raises(ConcurrentUpdateError):
        await manager.append(new_session(version=7), UserMessage("x"))


# -- TTL ---------------------------------------------------------------------------


async def test_file_ttl_is_sliding_and_expired_sessions_read_as_absent(tmp_path: Path) -> None:
    backend = FileBackend(tmp_path / "ws")
    manager = manager_of(backend, max_live_messages=500)
    session = await manager.get_or_create_thread("acme", "alice", "t1", ttl_s=60)
    backend.clock.advance(50)
    session = await manager.append(session, *(UserMessage(f"m{i}") for i in range(500)))
    session = await manager.append(session, UserMessage("still here"))
    assert session.archived == 500 and await backend.archive_exists("acme", "alice.t1")
    backend.clock.advance(50)  # 100 s after creation, 50 s after the last save
    assert await backend.store.get("acme", "alice.t1") == session
    backend.clock.advance(10)
    assert await backend.store.get("acme", "alice.t1") is None
    assert await backend.store.list("acme") == ()
    with pytest.raises(SessionNotFoundError):
        await manager.append(session, UserMessage("too late"))
    assert await backend.store.purge_expired("acme") == 1
    assert not backend.path("acme", "alice.t1").exists()
    assert not await backend.archive_exists("acme", "alice.t1")  # the archive goes with it
    fresh = await manager.get_or_create_thread("acme", "alice", "t1")
    assert fresh.version == 1 and fresh.messages == ()


@pytest.mark.redis
async def test_redis_ttl_is_set_refreshed_and_cleared(redis_url: str) -> None:
    prefix = f"gwtest-{uuid.uuid4().hex}"
    client = Redis.from_url(redis_url)
    try:
        backend = RedisBackend(client, redis_url, prefix)
        manager = manager_of(backend)
        key = backend.key("acme", "alice.t1")
        session = await manager.get_or_create_thread("acme", "alice", "t1", ttl_s=60)
        assert 0 < await client.pttl(key) <= 60_000
        await client.pexpire(key, 5_000)
        session = await manager.append(session, UserMessage("refresh"))
        assert 5_000 < await client.pttl(key) <= 60_000  # every save restarts the clock
        await manager.set_ttl(session, None)
        assert await client.pttl(key) == -1
        await manager.set_ttl(session, 30)
        await client.delete(key)  # what expiry does
        assert await backend.store.get("acme", "alice.t1") is None
        assert await backend.store.list("acme") == ()
        assert await client.zcard(f"{prefix}:acme:sessions") == 0  # the stale index entry is pruned
    finally:
        keys = [k async for k in client.scan_iter(match=f"{prefix}:*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()


@pytest.mark.redis
async def test_redis_store_from_url_owns_its_client(redis_url: str) -> None:
    prefix = f"gwtest-{uuid.uuid4().hex}"
    store = RedisSessionStore(redis_url, prefix=prefix)
    try:
        await store.save(new_session(), expected_version=0)
        assert (await store.get("acme", "alice.t1")) is not None
        assert await store.delete("acme", "alice.t1") is True
    finally:
        await store.aclose()


# -- the file backend's own guarantees ---------------------------------------------


@pytest.fixture
def loop_io_log(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[list[str]]:
    """Records every filesystem call under tmp_path made from the event loop's thread."""
    found: list[str] = []

    def guard(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            if args and str(args[0]).startswith(str(tmp_path)):
                try:
                    asyncio.get_running_loop()
                except RuntimeError:
                    pass
                else:
                    found.append(f"{name}({args[0]}) at {traceback.format_stack(limit=4)[0].strip()}")
            return real(*args, **kwargs)

        return call

    for name in ("stat", "lstat", "open", "replace", "rename", "mkdir", "unlink", "listdir", "scandir"):
        monkeypatch.setattr(os, name, guard(name, getattr(os, name)))
    monkeypatch.setattr(io, "open", guard("io.open", io.open))
    yield found


async def test_file_store_never_blocks_the_event_loop(tmp_path: Path, loop_io_log: list[str]) -> None:
    backend = FileBackend(tmp_path / "ws")
    manager = manager_of(backend)
    session = await manager.get_or_create_thread("acme", "alice", "t1", ttl_s=10)
    session = await manager.append(session, UserMessage("hi"))
    await manager.list("acme", "alice")
    await manager.get("acme", session.session_id)
    backend.clock.advance(20)
    await backend.store.purge_expired("acme")
    await manager.delete("acme", session.session_id)
    assert loop_io_log == []


APPENDER = """
import asyncio, sys
from pathlib import Path
from genworker.conversation import FileSessionStore, SessionManager, UserMessage

async def main() -> None:
    manager = SessionManager(FileSessionStore(Path(sys.argv[1])), max_attempts=1000)
    session = await manager.get_or_create_thread("acme", "alice", "t1")
    for i in range(int(sys.argv[3])):
        session = await manager.append(session, UserMessage(f"{sys.argv[2]}-{i}"))

asyncio.run(main())
"""


async def test_processes_sharing_a_workspace_lose_nothing(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    procs = [
        await asyncio.create_subprocess_exec(sys.executable, "-c", APPENDER, str(root), name, "25")
        for name in ("p", "q", "r")
    ]
    codes = await asyncio.wait_for(asyncio.gather(*(p.wait() for p in procs)), 60)
    assert codes == [0, 0, 0]
    final = await FileSessionStore(root).get("acme", "alice.t1")
    assert final is not None and final.version == 76
    contents = [m.content for m in final.messages]
    for name in "pqr":
        assert [c for c in contents if c.startswith(name)] == [f"{name}-{i}" for i in range(25)]


async def test_file_layout_and_atomic_writes(tmp_path: Path) -> None:
    backend = FileBackend(tmp_path / "ws")
    session = await manager_of(backend).get_or_create_thread("acme", "alice", "t1")
    path = backend.path("acme", "alice.t1")
    doc = json.loads(await asyncio.to_thread(path.read_text, encoding="utf-8"))
    assert doc["schema_version"] == 1 and doc["session_id"] == session.session_id and doc["version"] == 1
    names = sorted(p.name for p in await asyncio.to_thread(lambda: list(path.parent.iterdir())))
    assert names == [".locks", "alice.t1.json"]  # no temp files left behind


async def test_sessions_dir_symlinked_outside_the_workspace_is_refused(tmp_path: Path) -> None:
    backend = FileBackend(tmp_path / "ws")
    outside = tmp_path / "outside"
    await asyncio.to_thread(outside.mkdir)
    tenant = backend.root / "tenants" / "acme"
    await asyncio.to_thread(tenant.mkdir, parents=True)
    await asyncio.to_thread((tenant / "sessions").symlink_to, outside)
    with pytest.raises(ValueError, match="outside"):
        await backend.store.save(new_session(), expected_version=0)
    assert await asyncio.to_thread(lambda: list(outside.iterdir())) == []


async def test_list_skips_a_session_file_named_after_another_session(tmp_path: Path) -> None:
    backend = FileBackend(tmp_path / "ws")
    await backend.store.save(new_session(), expected_version=0)
    src = backend.path("acme", "alice.t1")
    await asyncio.to_thread(shutil.copy, src, src.with_name("alice.t2.json"))
    assert [s.session_id for s in await backend.store.list("acme")] == ["alice.t1"]


async def test_an_unchanged_session_is_not_decoded_again(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    """A turn reads its thread's session twice; bytes as last read or written by the store are not
    decoded again, and a session changed behind the store's back (same size even) is."""
    from genworker.conversation import file_store, redis_store

    decoded: list[str] = []
    real = file_store.decode_session

    def counting(raw: bytes | str, source: str) -> ConversationSession:
        decoded.append(source)
        return real(raw, source)

    monkeypatch.setattr(file_store, "decode_session", counting)
    monkeypatch.setattr(redis_store, "decode_session", counting)
    manager = manager_of(backend)
    session = await manager.get_or_create_thread("acme", "alice", "t1")
    session = await manager.append(session, UserMessage("hi", created_at=T0))
    read = await backend.store.get("acme", "alice.t1")
    await manager.append(session, AssistantMessage("hello", created_at=T0))
    assert read == session and decoded == []
    raw = await backend.read_raw("acme", "alice.t1")
    assert raw is not None and '"hello"' in raw
    await backend.write_raw("acme", "alice.t1", raw.replace('"hello"', '"HELLO"'))  # another writer
    changed = await backend.store.get("acme", "alice.t1")
    assert changed is not None and changed.messages[-1].content == "HELLO" and len(decoded) == 1
    assert await backend.reopen().get("acme", "alice.t1") == changed  # a new store decodes: the same session


def test_the_decoded_cache_is_bounded_by_bytes(tmp_path: Path) -> None:
    from genworker.conversation.store import DecodedSessions

    cache, a, b = DecodedSessions(10), tmp_path / "a.json", "redis:key:b"
    first, second = new_session(thread_id="t1"), new_session(thread_id="t2")
    cache.put(a, b"123456", first)
    cache.put(b, b"1234", second)
    assert cache.get(a, b"123456") is first and cache.get(b, b"1234") is second
    cache.put(b, b"12345", second)  # 11 bytes: the least recently used goes
    assert cache.get(a, b"123456") is None and cache.get(b, b"12345") is second
    cache.put(a, b"x" * 11, first)  # larger than the whole cache: not kept
    assert cache.get(a, b"x" * 11) is None and cache.get(b, b"12345") is second
    cache.forget(b)
    assert cache.get(b, b"12345") is None


async def test_a_long_session_is_saved_off_the_event_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A save rewrites the whole file: past INLINE_SAVE_MESSAGES it is encoded and written in a worker
    thread, durable through the write journal like any other (alone, or inside a turn's block)."""
    import threading

    from genworker.conversation import file_store
    from genworker.write_journal import JournaledFiles

    threads: list[int] = []
    real = file_store.encode_session

    def recording(session: ConversationSession, *, indent: int | None = None) -> bytes:
        threads.append(threading.get_ident())
        return real(session, indent=indent)

    monkeypatch.setattr(file_store, "encode_session", recording)
    monkeypatch.setattr(file_store, "INLINE_SAVE_MESSAGES", 2)
    files = JournaledFiles(tmp_path)
    try:
        manager = SessionManager(FileSessionStore(tmp_path, files=files))
        session = await manager.get_or_create_thread("acme", "alice", "t1")
        session = await manager.append(session, UserMessage("one"), AssistantMessage("two"))  # 2: on the loop
        async with files.pending() as written:
            session = await manager.append(session, UserMessage("three"))  # 3: a worker thread
        await written.durable()
        session = await manager.append(session, AssistantMessage("four"))  # alone, in a thread too
    finally:
        files.close()
    loop = threading.get_ident()
    assert threads[:2] == [loop, loop] and all(t != loop for t in threads[2:]) and len(threads) == 4
    reread = await FileSessionStore(tmp_path).get("acme", "alice.t1")
    assert reread == session and [m.content for m in reread.messages] == ["one", "two", "three", "four"]


@pytest.mark.redis
async def test_a_long_session_in_redis_is_encoded_and_decoded_off_the_event_loop(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past INLINE_SAVE_MESSAGES a save encodes in a worker thread; a stored session larger than
    INLINE_DECODE_BYTES that this store has not seen is decoded in one."""
    import threading

    from genworker.conversation import redis_store

    encoded: list[int] = []
    decoded: list[int] = []
    real_encode, real_decode = redis_store.encode_session, redis_store.decode_session

    def encoding(session: ConversationSession) -> bytes:
        encoded.append(threading.get_ident())
        return real_encode(session)

    def decoding(raw: bytes | str, source: str) -> ConversationSession:
        decoded.append(threading.get_ident())
        return real_decode(raw, source)

    monkeypatch.setattr(redis_store, "encode_session", encoding)
    monkeypatch.setattr(redis_store, "decode_session", decoding)
    monkeypatch.setattr(redis_store, "INLINE_SAVE_MESSAGES", 2)
    client, prefix = Redis.from_url(redis_url), f"gwtest-{uuid.uuid4().hex}"
    try:
        manager = SessionManager(RedisSessionStore(client, prefix=prefix))
        session = await manager.get_or_create_thread("acme", "alice", "t1")
        session = await manager.append(session, UserMessage("one"), AssistantMessage("two"))  # 2: on the loop
        session = await manager.append(session, UserMessage("three" * 100))  # 3: a worker thread
        small = await RedisSessionStore(client, prefix=prefix).get("acme", "alice.t1")  # decoded on the loop
        monkeypatch.setattr(redis_store, "INLINE_DECODE_BYTES", 100)
        large = await RedisSessionStore(client, prefix=prefix).get("acme", "alice.t1")  # in a thread
    finally:
        keys = [k async for k in client.scan_iter(match=f"{prefix}:*")]
        await client.delete(*keys)
        await client.aclose()
    loop = threading.get_ident()
    assert encoded[:2] == [loop, loop] and encoded[2] != loop and len(encoded) == 3
    assert decoded[0] == loop and decoded[1] != loop and len(decoded) == 2
    assert small == large == session and [m.content for m in session.messages][:2] == ["one", "two"]


# -- archive -----------------------------------------------------------------------


def said(messages: Any) -> list[str]:
    return [m.content for m in messages]


async def test_a_long_thread_keeps_its_newest_messages_and_archives_the_oldest(backend: Backend) -> None:
    manager = manager_of(backend, max_live_messages=500)
    session = await manager.get_or_create_thread("acme", "alice", "t1")
    sent = [f"m{i}" for i in range(1_234)]
    for i in range(0, len(sent), 100):  # a turn or a few at a time
        session = await manager.append(session, *(UserMessage(text) for text in sent[i : i + 100]))
    assert session.archived == 1_000 and said(session.messages) == sent[1_000:]
    assert said(await manager.all_messages(session)) == sent
    summary = (await manager.list("acme"))[0]
    assert summary.message_count == 1_234
    reopened = SessionManager(backend.reopen())  # after a restart
    again = await reopened.get("acme", "alice.t1")
    assert again is not None and again.archived == 1_000 and said(await reopened.all_messages(again)) == sent
    assert said(manager.history(session)) == sent[1_000:]  # what a prompt is built from


async def test_concurrent_appenders_past_the_limit_lose_and_repeat_nothing(backend: Backend) -> None:
    """A writer whose save loses the compare-and-set after writing a chunk wrote the same messages
    another writer archives there."""
    stores = CountingStore(backend.store), CountingStore(backend.reopen())
    one, two = (
        manager_of(backend, stores[0], max_live_messages=500),
        manager_of(backend, stores[1], max_live_messages=500),
    )
    start = await one.get_or_create_thread("acme", "alice", "t1")

    async def writer(manager: SessionManager, name: str) -> None:
        session = start
        for i in range(0, 600, 50):
            session = await manager.append(session, *(UserMessage(f"{name}-{j}") for j in range(i, i + 50)))

    await asyncio.wait_for(asyncio.gather(writer(one, "a"), writer(two, "b"), writer(one, "c")), 60)
    final = await one.get("acme", "alice.t1")
    assert final is not None and final.archived >= 1_000
    everything = said(await two.all_messages(final))
    assert len(everything) == 1_800
    for name in "abc":
        assert [c for c in everything if c.startswith(name)] == [f"{name}-{j}" for j in range(600)]
    assert stores[0].conflicts + stores[1].conflicts >= 2


async def test_deleting_a_thread_removes_its_archive(backend: Backend) -> None:
    manager = manager_of(backend, max_live_messages=500)
    session = await manager.get_or_create_thread("acme", "alice", "t1")
    for i in range(7):
        session = await manager.append(session, *(UserMessage(f"{i}-{j}") for j in range(100)))
    assert session.archived == 500 and await backend.archive_exists("acme", "alice.t1")
    assert await manager.delete("acme", "alice.t1")
    assert not await backend.archive_exists("acme", "alice.t1")
    fresh = await manager.get_or_create_thread("acme", "alice", "t1")
    assert fresh.archived == 0 and await manager.all_messages(fresh) == ()


async def test_a_missing_chunk_is_an_error_naming_the_archive_and_the_gap(backend: Backend) -> None:
    manager = manager_of(backend, max_live_messages=500)
    session = await manager.get_or_create_thread("acme", "alice", "t1")
    for i in range(11):
        session = await manager.append(session, *(UserMessage(f"{i}-{j}") for j in range(100)))
    assert session.archived == 1_000
    await backend.drop_chunk("acme", "alice.t1", 0)
    with pytest.raises(SessionCorruptError, match=r"alice\.t1.*archived messages 0 to 499 are missing"):
        await manager.all_messages(session)
    assert said(session.messages) == [f"10-{j}" for j in range(100)]  # the live session is untouched


async def test_a_main_session_is_never_archived(backend: Backend) -> None:
    """The heartbeat rolls its main session up itself (and rewrites it doing so)."""
    manager = manager_of(backend, max_live_messages=500)
    main = await manager.main_session("acme", "alice")
    for i in range(6):
        main = await manager.append(main, *(UserMessage(f"{i}-{j}") for j in range(100)))
    assert main.archived == 0 and len(main.messages) == 600
    assert not await backend.archive_exists("acme", "alice.main")


def test_chunks_past_the_archived_count_are_from_saves_that_did_not_happen() -> None:
    from genworker.conversation.store import join_chunks

    def chunk(start: int, n: int) -> ArchiveChunk:
        return ArchiveChunk(
            tenant_id="acme",
            session_id="alice.t1",
            start=start,
            messages=tuple(UserMessage(f"m{i}") for i in range(start, start + n)),
        )

    assert said(join_chunks([chunk(2, 2), chunk(0, 2), chunk(4, 2)], 4, "src")) == ["m0", "m1", "m2", "m3"]
    with pytest.raises(SessionCorruptError, match="archived messages 2 to 3 are missing"):
        join_chunks([chunk(0, 2), chunk(4, 2)], 6, "src")
    with pytest.raises(SessionCorruptError, match="archived messages 2 to 3 are missing"):
        join_chunks([chunk(0, 2)], 4, "src")


@pytest.mark.redis
async def test_a_redis_archive_expires_with_its_session(redis_url: str) -> None:
    client, prefix = Redis.from_url(redis_url), f"gwtest-{uuid.uuid4().hex}"
    archive = f"{prefix}:acme:archive:alice.t1"
    try:
        manager = SessionManager(RedisSessionStore(client, prefix=prefix), max_live_messages=500)
        session = await manager.get_or_create_thread("acme", "alice", "t1", ttl_s=3600)
        for i in range(6):
            session = await manager.append(session, *(UserMessage(f"{i}-{j}") for j in range(100)))
        assert session.archived == 500 and 0 < await client.pttl(archive) <= 3_600_000
        session = await manager.set_ttl(session, None)
        assert await client.pttl(archive) == -1  # kept as long as the session is
    finally:
        keys = [k async for k in client.scan_iter(match=f"{prefix}:*")]
        await client.delete(*keys)
        await client.aclose()


async def test_a_save_that_loses_after_archiving_leaves_the_winners_archive_intact(backend: Backend) -> None:
    """Writer A archives a chunk, then another writer saves first (archiving the same chunk); A's
    compare-and-set fails, A reapplies its append on the winner's session. Nothing lost or doubled."""
    other = manager_of(backend, backend.reopen(), max_live_messages=500)

    class RacedStore(CountingStore):
        raced = False

        async def save(self, session: ConversationSession, expected_version: int) -> ConversationSession:
            if session.archived and not self.raced:  # A archived a chunk and is about to save
                self.raced = True
                latest = await other.get(session.tenant_id, session.session_id)
                assert latest is not None
                await other.append(latest, UserMessage("b-won"))
            return await super().save(session, expected_version)

    store = RacedStore(backend.store)
    manager = manager_of(backend, store, max_live_messages=500)
    session = await manager.get_or_create_thread("acme", "alice", "t1")
    session = await manager.append(session, *(UserMessage(f"m{i}") for i in range(500)))
    session = await manager.append(session, UserMessage("a-late"))  # past the limit: archives m0..m499
    assert store.raced and store.conflicts == 1
    assert session.archived == 500 and said(session.messages) == ["b-won", "a-late"]
    assert said(await manager.all_messages(session)) == [*(f"m{i}" for i in range(500)), "b-won", "a-late"]
