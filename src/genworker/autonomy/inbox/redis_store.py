"""Inbox items in Redis: one hash per item, sorted-set indexes, every state change in a Lua script.

Keys (tenant and worker ids are validated ids, so they cannot contain ':')::

    {prefix}:{t}:{w}:inbox:item:{item_id}   hash: doc (the item's JSON without its state fields),
                                            schema_version, created (µs), state, attempts, version,
                                            lease_owner, lease_expires_at, last_error, retry_at
    {prefix}:{t}:{w}:inbox:all              sorted set of item ids by created (list without a state)
    {prefix}:{t}:{w}:inbox:state:{state}    one sorted set per state, by created (list, counts, claim)
    {prefix}:{t}:{w}:inbox:due              PROCESSING items by lease expiry, FAILED ones by retry_at
    {prefix}:{t}:{w}:inbox:dedupe           hash dedupe_key -> item id
    {prefix}:{t}:{w}:inbox:corrupt          unreadable items moved out of the way by claim

Time comes from the store's clock (passed to the scripts), not from the Redis server, so every
process sharing an inbox needs a synchronised clock, and tests can move time.
"""

from __future__ import annotations

import builtins
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final, cast

from redis.asyncio import Redis

from genworker.autonomy.inbox.codec import check_owner, item_from_json, item_to_json
from genworker.autonomy.inbox.errors import InboxCorruptError, InboxError, InboxSchemaError
from genworker.autonomy.inbox.models import SCHEMA_VERSION, InboxItem, InboxState
from genworker.autonomy.inbox.store import (
    DEFAULT_LIST_LIMIT,
    STATE_FIELDS,
    check_batch,
    check_claim_args,
    check_list_args,
    check_new_item,
    due_at,
    iso,
    micros,
)
from genworker.autonomy.inbox.topics import publish_quietly, written_event
from genworker.bus import EventBus
from genworker.ids import validate_id

__all__ = ["RedisInboxStore"]

log = logging.getLogger(__name__)

_STATES: Final = tuple(InboxState)
_CLAIM_SLACK: Final = 64  # candidates looked at beyond `limit`, for items of an unreadable schema left in place

# KEYS: item hash, all, pending, dedupe. ARGV: item id, created score, has dedupe key (0/1), dedupe key, fields...
_WRITE: Final = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
if ARGV[3] == '1' and redis.call('HSETNX', KEYS[4], ARGV[4], ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 5))
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
redis.call('ZADD', KEYS[3], ARGV[2], ARGV[1])
return 1
"""

# KEYS: pending, processing, failed, due.
# ARGV: now score, limit, owner, lease score, lease iso, item key prefix, schema_version, slack.
_CLAIM: Final = """
local now, limit, slack, prefix = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[8]), ARGV[6]
local cands = {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now, 'LIMIT', 0, limit + slack)) do
  local created = redis.call('HGET', prefix .. id, 'created')
  if created then table.insert(cands, {id, tonumber(created)}) else redis.call('ZREM', KEYS[4], id) end
end
local pending = redis.call('ZRANGE', KEYS[1], 0, limit + slack - 1, 'WITHSCORES')
for i = 1, #pending, 2 do table.insert(cands, {pending[i], tonumber(pending[i + 1])}) end
table.sort(cands, function(a, b)
  if a[2] ~= b[2] then return a[2] < b[2] end
  return a[1] < b[1]
end)
local taken = {}
for _, cand in ipairs(cands) do
  if #taken >= limit then break end
  local id, key = cand[1], prefix .. cand[1]
  local f = redis.call('HMGET', key, 'schema_version', 'state', 'lease_owner', 'lease_expires_at')
  local state, ok = f[2], false
  if not state then
    redis.call('ZREM', KEYS[1], id)
    redis.call('ZREM', KEYS[4], id)
  elseif f[1] == ARGV[7] then
    if state == 'pending' then
      ok = true
      redis.call('ZREM', KEYS[1], id)
    elseif state == 'processing' or state == 'failed' then
      local due = redis.call('ZSCORE', KEYS[4], id)
      if due and tonumber(due) <= now then
        ok = true
        if state == 'processing' then
          redis.call('HSET', key, 'last_error', 'lease of ' .. (f[3] or '?') .. ' expired at ' .. (f[4] or '?'))
          redis.call('ZREM', KEYS[2], id)
        else
          redis.call('ZREM', KEYS[3], id)
        end
      end
    end
  end
  if ok then
    redis.call('HSET', key, 'state', 'processing', 'lease_owner', ARGV[3], 'lease_expires_at', ARGV[5])
    redis.call('HDEL', key, 'retry_at')
    redis.call('HINCRBY', key, 'attempts', 1)
    redis.call('HINCRBY', key, 'version', 1)
    redis.call('ZADD', KEYS[2], cand[2], id)
    redis.call('ZADD', KEYS[4], ARGV[4], id)
    table.insert(taken, id)
  end
end
return taken
"""

# KEYS: item hash, due, then the state sets in InboxState order.
# ARGV: expected version, new state, due score ('' when none), item id, number of field pairs, the pairs,
# then the fields to delete. Returns the stored hash, or 0 when the version did not match.
_COMPARE_AND_SET: Final = """
local current = redis.call('HGET', KEYS[1], 'version')
if not current or tonumber(current) ~= tonumber(ARGV[1]) then return 0 end
local index = {pending = KEYS[3], processing = KEYS[4], consumed = KEYS[5], failed = KEYS[6], dead = KEYS[7]}
local old = redis.call('HGET', KEYS[1], 'state')
if index[old] then redis.call('ZREM', index[old], ARGV[4]) end
redis.call('ZADD', index[ARGV[2]], redis.call('HGET', KEYS[1], 'created'), ARGV[4])
if ARGV[3] ~= '' then redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4]) else redis.call('ZREM', KEYS[2], ARGV[4]) end
local pairs_end = 5 + 2 * tonumber(ARGV[5])
redis.call('HSET', KEYS[1], unpack(ARGV, 6, pairs_end))
if #ARGV > pairs_end then redis.call('HDEL', KEYS[1], unpack(ARGV, pairs_end + 1)) end
return redis.call('HGETALL', KEYS[1])
"""

# KEYS: consumed, all, dedupe. ARGV: cutoff score (exclusive), limit, item key prefix. Returns how many went.
_PURGE: Final = """
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(ids) do
  local key = ARGV[3] .. id
  local ok, doc = pcall(cjson.decode, redis.call('HGET', key, 'doc') or '{}')
  if ok and type(doc) == 'table' and type(doc['dedupe_key']) == 'string' then
    if redis.call('HGET', KEYS[3], doc['dedupe_key']) == id then redis.call('HDEL', KEYS[3], doc['dedupe_key']) end
  end
  redis.call('DEL', key)
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZREM', KEYS[2], id)
end
return #ids
"""
# KEYS: item hash, all, processing, due, corrupt. ARGV: item id.
_QUARANTINE: Final = """
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('ZADD', KEYS[5], redis.call('HGET', KEYS[1], 'created') or 0, ARGV[1])
return 1
"""


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _utc_now() -> datetime:
    return datetime.now(UTC)


class RedisInboxStore:
    def __init__(
        self,
        client: Redis | str,
        *,
        prefix: str = "genworker",
        bus: EventBus | None = None,
        clock: Callable[[], datetime] = _utc_now,
    ) -> None:
        self._owns_client = isinstance(client, str)
        self._client: Redis = Redis.from_url(client) if isinstance(client, str) else client
        self._prefix = prefix
        self._bus = bus
        self._clock = clock
        self._write_script = self._client.register_script(_WRITE)
        self._claim_script = self._client.register_script(_CLAIM)
        self._cas_script = self._client.register_script(_COMPARE_AND_SET)
        self._quarantine_script = self._client.register_script(_QUARANTINE)
        self._purge_script = self._client.register_script(_PURGE)

    async def aclose(self) -> None:
        """Close the client if this store created it from a URL."""
        if self._owns_client:
            await self._client.aclose()

    def key_of(self, tenant_id: str, worker_id: str, item_id: str) -> str:
        return f"{self._base(tenant_id, worker_id)}item:{validate_id(item_id, 'inbox item id')}"

    async def write(self, item: InboxItem) -> bool:
        stored = check_new_item(item)
        base = self._base(item.tenant_id, item.worker_id)
        fields = _fields(stored)
        args: list[Any] = [stored.item_id, micros(stored.created_at), int(stored.dedupe_key is not None)]
        args.append(stored.dedupe_key or "")
        for name, value in fields.items():
            args += [name, value]
        keys = [f"{base}item:{stored.item_id}", f"{base}all", f"{base}state:pending", f"{base}dedupe"]
        if not int(await self._write_script(keys=keys, args=args)):
            return False
        await publish_quietly(self._bus, written_event(stored))
        return True

    async def get(self, tenant_id: str, worker_id: str, item_id: str) -> InboxItem | None:
        key = self.key_of(tenant_id, worker_id, item_id)
        row = cast("dict[bytes, bytes]", await self._client.hgetall(key))
        return _decode(row, tenant_id, worker_id, key) if row else None

    async def list(
        self,
        tenant_id: str,
        worker_id: str,
        state: InboxState | None = None,
        *,
        limit: int = DEFAULT_LIST_LIMIT,
        offset: int = 0,
    ) -> tuple[InboxItem, ...]:
        check_list_args(limit, offset)
        if limit == 0:
            return ()
        base = self._base(tenant_id, worker_id)
        index = f"{base}state:{InboxState(state).value}" if state is not None else f"{base}all"
        members = cast("Sequence[bytes]", await self._client.zrange(index, offset, offset + limit - 1))
        ids = [_text(m) for m in members]
        found = []
        for item_id, row in zip(ids, await self._rows(base, ids), strict=True):
            key = f"{base}item:{item_id}"
            if not row:
                continue
            try:
                found.append(_decode(row, tenant_id, worker_id, key))
            except InboxError as exc:
                log.error("skipping unreadable inbox item: %s", exc)
        return tuple(found)

    async def counts(self, tenant_id: str, worker_id: str) -> Mapping[InboxState, int]:
        base = self._base(tenant_id, worker_id)
        async with self._client.pipeline(transaction=False) as pipe:
            for state in _STATES:
                pipe.zcard(f"{base}state:{state.value}")
            sizes = await pipe.execute()
        return {state: int(size) for state, size in zip(_STATES, sizes, strict=True)}

    async def claim(
        self, tenant_id: str, worker_id: str, owner: str, *, limit: int, lease_s: float
    ) -> tuple[InboxItem, ...]:
        check_claim_args(owner, limit, lease_s)
        base = self._base(tenant_id, worker_id)
        now = self._clock()
        lease_until = now + timedelta(seconds=lease_s)
        keys = [f"{base}state:pending", f"{base}state:processing", f"{base}state:failed", f"{base}due"]
        args: Sequence[str | int] = (
            *(micros(now), limit, owner, micros(lease_until), iso(lease_until)),
            *(f"{base}item:", SCHEMA_VERSION, _CLAIM_SLACK),
        )
        ids = [_text(i) for i in await self._claim_script(keys=keys, args=args)]
        taken = []
        for item_id, row in zip(ids, await self._rows(base, ids), strict=True):
            key = f"{base}item:{item_id}"
            try:
                taken.append(_decode(row, tenant_id, worker_id, key))
            except InboxError as exc:
                keys = [key, f"{base}all", f"{base}state:processing", f"{base}due", f"{base}corrupt"]
                await self._quarantine_script(keys=keys, args=[item_id])
                log.error("%s; moved to %scorrupt, the inbox goes on without it", exc, base)
        return tuple(taken)

    async def compare_and_set(self, item: InboxItem, expected_version: int) -> InboxItem | None:
        return await self._swap(item, expected_version)

    async def _swap(self, item: InboxItem, expected_version: int) -> InboxItem | None:
        base = self._base(item.tenant_id, item.worker_id)
        key = self.key_of(item.tenant_id, item.worker_id, item.item_id)
        state = _state_fields(item)
        sets = {name: value for name, value in state.items() if value is not None}
        deletes = [name for name, value in state.items() if value is None]
        sets["version"] = expected_version + 1
        due = due_at(item)
        args: list[Any] = [expected_version, item.state.value, micros(due) if due else "", item.item_id, len(sets)]
        for name, value in sets.items():
            args += [name, value]
        keys = [key, f"{base}due", *(f"{base}state:{s.value}" for s in _STATES)]
        result = await self._cas_script(keys=keys, args=[*args, *deletes])
        if not isinstance(result, list):
            return None
        row = dict(zip(result[::2], result[1::2], strict=True))
        return _decode(row, item.tenant_id, item.worker_id, key)

    async def compare_and_set_many(self, changes: Sequence[tuple[InboxItem, int]]) -> builtins.list[InboxItem | None]:
        """One script call per item: Redis applies each atomically; there is no flush to share."""
        if not changes:
            return []
        check_batch(changes)
        return [await self._swap(item, expected) for item, expected in changes]

    async def delete_consumed(self, tenant_id: str, worker_id: str, *, before: datetime, limit: int = 1000) -> int:
        if limit < 1:
            raise ValueError("limit must be 1 or more")
        base = self._base(tenant_id, worker_id)
        keys = [f"{base}state:consumed", f"{base}all", f"{base}dedupe"]
        return int(await self._purge_script(keys=keys, args=[micros(before), limit, f"{base}item:"]))

    def _base(self, tenant_id: str, worker_id: str) -> str:
        return f"{self._prefix}:{validate_id(tenant_id, 'tenant id')}:{validate_id(worker_id, 'worker id')}:inbox:"

    async def _rows(self, base: str, ids: Sequence[str]) -> Sequence[dict[bytes, bytes]]:
        if not ids:
            return ()
        async with self._client.pipeline(transaction=False) as pipe:
            for item_id in ids:
                pipe.hgetall(f"{base}item:{item_id}")
            return cast("Sequence[dict[bytes, bytes]]", await pipe.execute())


def _state_fields(item: InboxItem) -> dict[str, str | int | None]:
    """The STATE_FIELDS as stored (the text pydantic would write)."""
    return {
        "state": item.state.value,
        "attempts": item.attempts,
        "lease_owner": item.lease_owner,
        "lease_expires_at": iso(item.lease_expires_at) if item.lease_expires_at else None,
        "last_error": item.last_error,
        "retry_at": iso(item.retry_at) if item.retry_at else None,
    }


def _fields(item: InboxItem) -> dict[str, str | int]:
    data = item_to_json(item)
    for name in (*STATE_FIELDS, "version"):
        del data[name]
    fields: dict[str, str | int] = {
        "doc": json.dumps(data, separators=(",", ":")),
        "schema_version": item.schema_version,
        "created": micros(item.created_at),
        "version": item.version,
    }
    fields.update({name: value for name, value in _state_fields(item).items() if value is not None})
    return fields


def _decode(row: Mapping[bytes, bytes], tenant_id: str, worker_id: str, key: str) -> InboxItem:
    source = f"redis key {key}"
    fields = {_text(k): _text(v) for k, v in row.items()}
    if fields.get("schema_version") != str(SCHEMA_VERSION):
        raise InboxSchemaError(source, fields.get("schema_version"), SCHEMA_VERSION)
    try:
        data = json.loads(fields["doc"])
        if not isinstance(data, dict):
            raise InboxCorruptError(source, f"doc is a JSON {type(data).__name__}, expected an object")
        data.update({name: fields.get(name) for name in STATE_FIELDS})
        data["attempts"] = int(fields["attempts"])
        data["version"] = int(fields["version"])
    except (KeyError, ValueError) as exc:  # JSONDecodeError is a ValueError
        raise InboxCorruptError(source, f"bad fields ({type(exc).__name__}: {exc})") from None
    return check_owner(item_from_json(data, source), tenant_id, worker_id, source)
