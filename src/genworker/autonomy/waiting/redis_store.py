"""WAITING plans in Redis, for runtimes sharing work; every wake-up is one Lua script.

Keys (tenant and worker ids are validated ids, so they cannot contain ':')::

    {prefix}:{t}:waiting:plan:{w}:{plan_id}   string: the plan's JSON (schema_version)
    {prefix}:{t}:waiting:key:{match_key}      set of plan keys waiting on that key (the index)
    {prefix}:{t}:waiting:worker:{w}           sorted set of the worker's plan keys by creation (listing)
    {prefix}:waiting:expiry                   sorted set of WAITING plan keys by expires_at (the scan)

The scripts decode the plan, move it out of WAITING and drop its index entries in one step, so
concurrent events or scans in several processes wake a plan once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final, cast

from redis.asyncio import Redis

from genworker.autonomy.waiting.models import (
    WaitingPlan,
    WaitingPlanNotFound,
    WaitingTransitionError,
    WaitState,
    plan_from_json,
    plan_to_json,
)
from genworker.autonomy.waiting.store import Owned
from genworker.ids import validate_id, validate_match_key
from genworker.workspace.models.base import thaw

__all__ = ["RedisWaitingStore"]

# KEYS: plan, key set, expiry, worker set. ARGV: doc, created score, expires score.
_ADD: Final = """
local existing = redis.call('GET', KEYS[1])
if existing then return existing end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SADD', KEYS[2], KEYS[1])
redis.call('ZADD', KEYS[3], ARGV[3], KEYS[1])
redis.call('ZADD', KEYS[4], ARGV[2], KEYS[1])
return ARGV[1]
"""

# Moves one decoded plan to gated; shared by the two wake-ups. `event` is the payload's JSON text
# (or ''), spliced in as it is: a cjson round trip would turn its [] into {}.
_GATE: Final = """
local function gate(key, doc, gated_by, event_id, now, event, gater)
  doc['state'] = 'gated'
  doc['gated_by'] = gated_by
  if event_id ~= '' then doc['event_id'] = event_id end
  if gater ~= '' then doc['gater'] = gater end
  doc['version'] = doc['version'] + 1
  doc['updated_at'] = now
  if event ~= '' then doc['event'] = nil end
  local text = cjson.encode(doc)
  if event ~= '' then text = string.sub(text, 1, -2) .. ',"event":' .. event .. '}' end
  redis.call('SET', key, text)
  return text
end
"""

# KEYS: key set, expiry. ARGV: event id, now iso, event payload JSON or '', gating instance or ''.
_RESUME: Final = (
    _GATE
    + """
local out = {}
for _, key in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local raw = redis.call('GET', key)
  if raw then
    local doc = cjson.decode(raw)
    if doc['state'] == 'waiting' then
      table.insert(out, gate(key, doc, 'event', ARGV[1], ARGV[2], ARGV[3], ARGV[4]))
    end
  end
  redis.call('ZREM', KEYS[2], key)
end
redis.call('DEL', KEYS[1])
return out
"""
)

# Times out one plan key of the expiry set KEYS[1]. ARGV: now score, now iso, (limit), key-set prefix,
# the scanning instance or ''.
_EXPIRE_ONE: Final = (
    _GATE
    + """
local function expire(key, out)
  redis.call('ZREM', KEYS[1], key)
  local raw = redis.call('GET', key)
  if raw then
    local doc = cjson.decode(raw)
    if doc['state'] == 'waiting' then
      redis.call('SREM', ARGV[4] .. doc['tenant_id'] .. ':waiting:key:' .. doc['match_key'], key)
      table.insert(out, gate(key, doc, 'timeout', '', ARGV[2], '', ARGV[5]))
    end
  end
end
"""
)

# KEYS: expiry. ARGV: now score, now iso, limit, key-set prefix ({prefix}:), scanning instance or ''.
_EXPIRE: Final = (
    _EXPIRE_ONE
    + """
local out = {}
for _, key in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))) do
  expire(key, out)
end
return out
"""
)

# KEYS: expiry, then the plan keys chosen among the due ones (still due: checked here). ARGV: as _EXPIRE.
_EXPIRE_KEYS: Final = (
    _EXPIRE_ONE
    + """
local out = {}
for i = 2, #KEYS do
  local score = redis.call('ZSCORE', KEYS[1], KEYS[i])
  if score and tonumber(score) <= tonumber(ARGV[1]) then expire(KEYS[i], out) end
end
return out
"""
)

# KEYS: plan, old key set, expiry, new key set. ARGV: expected state, new doc, new state, expires score.
_TRANSITION: Final = """
local raw = redis.call('GET', KEYS[1])
if not raw then return {0, ''} end
local doc = cjson.decode(raw)
if doc['state'] ~= ARGV[1] then return {1, doc['state']} end
if ARGV[1] == 'waiting' then
  redis.call('SREM', KEYS[2], KEYS[1])
  redis.call('ZREM', KEYS[3], KEYS[1])
end
redis.call('SET', KEYS[1], ARGV[2])
if ARGV[3] == 'waiting' then
  redis.call('SADD', KEYS[4], KEYS[1])
  redis.call('ZADD', KEYS[3], ARGV[4], KEYS[1])
end
return {2, ''}
"""

# KEYS: plan, worker set. ARGV: the document as it was read. Deletes it only if unchanged since.
_FORGET: Final = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], KEYS[1])
return 1
"""


def _doc(plan: WaitingPlan) -> str:
    return json.dumps(plan_to_json(plan), ensure_ascii=False, separators=(",", ":"))


class RedisWaitingStore:
    def __init__(self, url: str, *, prefix: str = "gw") -> None:
        self._redis = Redis.from_url(url)
        self._prefix = prefix
        self._add = self._redis.register_script(_ADD)
        self._resume = self._redis.register_script(_RESUME)
        self._expire = self._redis.register_script(_EXPIRE)
        self._expire_keys = self._redis.register_script(_EXPIRE_KEYS)
        self._transition = self._redis.register_script(_TRANSITION)
        self._forget = self._redis.register_script(_FORGET)

    def _plan_key(self, tenant_id: str, worker_id: str, plan_id: str) -> str:
        ids = (
            validate_id(tenant_id, "tenant id"),
            validate_id(worker_id, "worker id"),
            validate_id(plan_id, "plan id"),
        )
        return f"{self._prefix}:{ids[0]}:waiting:plan:{ids[1]}:{ids[2]}"

    def _key_set(self, tenant_id: str, match_key: str) -> str:
        return f"{self._prefix}:{validate_id(tenant_id, 'tenant id')}:waiting:key:{validate_match_key(match_key)}"

    def _worker_set(self, tenant_id: str, worker_id: str) -> str:
        return f"{self._prefix}:{tenant_id}:waiting:worker:{validate_id(worker_id, 'worker id')}"

    @property
    def _expiry(self) -> str:
        return f"{self._prefix}:waiting:expiry"

    def _decode(self, raw: bytes | str, where: str) -> WaitingPlan:
        return plan_from_json(raw, f"redis {where}")

    async def add(self, plan: WaitingPlan) -> WaitingPlan:
        if plan.state != "waiting":
            raise WaitingTransitionError(f"plan {plan.plan_id}: a new plan starts in state waiting, not {plan.state}")
        key = self._plan_key(*plan.key)
        keys = [
            key,
            self._key_set(plan.tenant_id, plan.match_key),
            self._expiry,
            self._worker_set(plan.tenant_id, plan.worker_id),
        ]
        raw = await self._add(keys=keys, args=[_doc(plan), plan.created_at.timestamp(), plan.expires_at.timestamp()])
        return self._decode(cast(bytes, raw), key)

    async def get(self, tenant_id: str, worker_id: str, plan_id: str) -> WaitingPlan | None:
        key = self._plan_key(tenant_id, worker_id, plan_id)
        raw = await self._redis.get(key)
        return None if raw is None else self._decode(raw, key)

    async def waiters(self, tenant_id: str, match_key: str) -> list[WaitingPlan]:
        members = cast(set[bytes], await self._redis.smembers(self._key_set(tenant_id, match_key)))
        keys = sorted(k.decode() for k in members)
        docs = await self._redis.mget(keys) if keys else []
        plans = [self._decode(raw, key) for key, raw in zip(keys, docs, strict=True) if raw is not None]
        return [p for p in plans if p.state == "waiting"]

    async def resume(
        self,
        tenant_id: str,
        match_key: str,
        event_id: str,
        now: datetime,
        *,
        event: Mapping[str, Any] | None = None,
        gater: str | None = None,
    ) -> list[WaitingPlan]:
        keys = [self._key_set(tenant_id, match_key), self._expiry]
        payload = "" if event is None else json.dumps(thaw(event), ensure_ascii=False, separators=(",", ":"))
        args = [event_id, now.astimezone(UTC).isoformat(), payload, gater or ""]
        out = await self._resume(keys=keys, args=args)
        return [self._decode(raw, keys[0]) for raw in cast(list[bytes], out)]

    async def expire_due(
        self, now: datetime, limit: int = 1000, *, only: Owned | None = None, gater: str | None = None
    ) -> list[WaitingPlan]:
        iso = now.astimezone(UTC).isoformat()
        args: list[str | float] = [now.timestamp(), iso, limit, f"{self._prefix}:", gater or ""]
        if only is None:
            out = await self._expire(keys=[self._expiry], args=args)
        else:  # the due plans of the workers `only` accepts, by the ids in their keys
            due = cast(list[bytes], await self._redis.zrangebyscore(self._expiry, "-inf", now.timestamp()))
            keys = [k for k in (raw.decode() for raw in due) if only(*self._owner_of(k))][:limit]
            out = await self._expire_keys(keys=[self._expiry, *keys], args=args) if keys else []
        return [self._decode(raw, self._expiry) for raw in cast(list[bytes], out)]

    def _owner_of(self, plan_key: str) -> tuple[str, str]:
        """(tenant, worker) of a plan key `{prefix}:{t}:waiting:plan:{w}:{plan_id}` (ids hold no ':')."""
        tenant_id, _, _, worker_id, _ = plan_key.removeprefix(f"{self._prefix}:").split(":")
        return tenant_id, worker_id

    async def transition(
        self, tenant_id: str, worker_id: str, plan_id: str, expected: WaitState, to: WaitState, **changes: Any
    ) -> WaitingPlan:
        key = self._plan_key(tenant_id, worker_id, plan_id)
        current = await self.get(tenant_id, worker_id, plan_id)
        if current is None:
            raise WaitingPlanNotFound(f"no waiting plan {plan_id!r} for worker {tenant_id}/{worker_id}")
        moved = current.moved(to, changes.pop("now", None) or datetime.now(UTC), **changes)
        keys = [
            key,
            self._key_set(tenant_id, current.match_key),
            self._expiry,
            self._key_set(tenant_id, moved.match_key),
        ]
        args: list[str | float] = [expected, _doc(moved), to, moved.expires_at.timestamp()]
        code, state = cast(list[Any], await self._transition(keys=keys, args=args))
        if int(code) == 0:
            raise WaitingPlanNotFound(f"no waiting plan {plan_id!r} for worker {tenant_id}/{worker_id}")
        if int(code) == 1:
            raise WaitingTransitionError(f"plan {plan_id} is {state.decode()}, not {expected}: cannot move it to {to}")
        return moved

    async def list(self, tenant_id: str, worker_id: str, state: WaitState | None = None) -> list[WaitingPlan]:
        members = cast(list[bytes], await self._redis.zrange(self._worker_set(tenant_id, worker_id), 0, -1))
        keys = [k.decode() for k in members]
        docs = await self._redis.mget(keys) if keys else []
        plans = [self._decode(raw, key) for key, raw in zip(keys, docs, strict=True) if raw is not None]
        return [p for p in plans if state is None or p.state == state]

    async def forget_ended(self, tenant_id: str, worker_id: str, before: datetime) -> int:
        worker_set = self._worker_set(tenant_id, worker_id)
        keys = [k.decode() for k in cast(list[bytes], await self._redis.zrange(worker_set, 0, -1))]
        docs = await self._redis.mget(keys) if keys else []
        forgotten = 0
        for key, raw in zip(keys, docs, strict=True):
            if raw is None:
                continue
            plan = self._decode(raw, key)
            if plan.ended_before(before):
                forgotten += int(await self._forget(keys=[key, worker_set], args=[raw]))
        return forgotten

    async def aclose(self) -> None:
        await self._redis.aclose()
