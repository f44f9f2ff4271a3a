"""Briefs in Redis, for runtimes sharing work (selected when REDIS_URL is set).

Keys (tenant and worker ids are validated ids, so they cannot contain ':')::

    {prefix}:{t}:briefs:{w}:pending          hash item_id -> item JSON (HSETNX: a retried add is a no-op)
    {prefix}:{t}:briefs:{w}:sent             hash brief_id -> brief JSON (ids sort by creation)
    {prefix}:{t}:briefs:{w}:budget:{day}     sorted set of the item ids that interrupted, in order;
                                             expires BUDGET_TTL_S after its last interruption
    {prefix}:{t}:briefs:{w}:lock             redis-py Lock: one brief generation at a time

Taking an interruption is one Lua script (count, idempotency and cap in one step), so processes
sharing Redis never exceed the day's budget. Every value carries `schema_version`.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Callable
from typing import Any, Final, cast

from pydantic import BaseModel
from redis import Redis

from genworker.autonomy.briefs.models import Brief, BriefItem, BriefNotFound, BudgetDay, load_model
from genworker.ids import validate_id

__all__ = ["BUDGET_TTL_S", "RedisBriefStore"]

BUDGET_TTL_S: Final = 8 * 86_400  # a week of past days stays readable
_GENERATE_LOCK_S: Final = 120.0

# KEYS: the day's set. ARGV: limit, item id, force ('1'), ttl seconds. Returns {taken, used after}.
_TAKE: Final = """
local used = redis.call('ZCARD', KEYS[1])
if redis.call('ZSCORE', KEYS[1], ARGV[2]) then return {1, used} end
if used >= tonumber(ARGV[1]) and ARGV[3] ~= '1' then return {0, used} end
redis.call('ZADD', KEYS[1], used + 1, ARGV[2])
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[4]))
return {1, used + 1}
"""


def _json(model: BaseModel) -> str:
    return json.dumps(model.model_dump(mode="json"), ensure_ascii=False, separators=(",", ":"))


class RedisBriefStore:
    def __init__(self, client: Redis, *, prefix: str = "gw") -> None:
        self._redis = client
        self._prefix = prefix
        self._take = client.register_script(_TAKE)

    def _key(self, tenant_id: str, worker_id: str, *parts: str) -> str:
        ids = validate_id(tenant_id, "tenant id"), validate_id(worker_id, "worker id")
        return ":".join((self._prefix, ids[0], "briefs", ids[1], *parts))

    def add_item(self, tenant_id: str, worker_id: str, item: BriefItem) -> bool:
        item_id = validate_id(item.item_id, "brief item id")
        return bool(self._redis.hsetnx(self._key(tenant_id, worker_id, "pending"), item_id, _json(item)))

    def pending(self, tenant_id: str, worker_id: str) -> builtins.list[BriefItem]:
        key = self._key(tenant_id, worker_id, "pending")
        raw = cast(dict[bytes, bytes], self._redis.hgetall(key))
        items = [load_model(BriefItem, doc, f"redis {key} {name.decode()}") for name, doc in raw.items()]
        return sorted(items, key=lambda item: (item.created_at, item.item_id))

    def generate(self, tenant_id: str, worker_id: str, build: Callable[[builtins.list[BriefItem]], Brief]) -> Brief:
        lock = self._redis.lock(
            self._key(tenant_id, worker_id, "lock"), timeout=_GENERATE_LOCK_S, blocking_timeout=_GENERATE_LOCK_S
        )
        with lock:
            taken = self.pending(tenant_id, worker_id)
            brief = build(taken)
            with self._redis.pipeline(transaction=True) as pipe:
                pipe.hset(self._key(tenant_id, worker_id, "sent"), self._brief_id(brief.brief_id), _json(brief))
                if taken:
                    pipe.hdel(self._key(tenant_id, worker_id, "pending"), *(i.item_id for i in taken))
                pipe.execute()
        return brief

    def save(self, brief: Brief) -> None:
        key = self._key(brief.tenant_id, brief.worker_id, "sent")
        self._redis.hset(key, self._brief_id(brief.brief_id), _json(brief))

    def get(self, tenant_id: str, worker_id: str, brief_id: str) -> Brief:
        key = self._key(tenant_id, worker_id, "sent")
        raw = cast(bytes | None, self._redis.hget(key, self._brief_id(brief_id)))
        if raw is None:
            raise BriefNotFound(brief_id, f"no brief {brief_id!r} for worker {tenant_id}/{worker_id}")
        return load_model(Brief, raw, f"redis {key} {brief_id}")

    def list(self, tenant_id: str, worker_id: str, limit: int = 20) -> builtins.list[Brief]:
        key = self._key(tenant_id, worker_id, "sent")
        names = sorted((n.decode() for n in cast(builtins.list[bytes], self._redis.hkeys(key))), reverse=True)[:limit]
        docs = cast(builtins.list[bytes | None], self._redis.hmget(key, names)) if names else []
        return [load_model(Brief, doc, f"redis {key} {n}") for n, doc in zip(names, docs, strict=True) if doc]

    def budget(self, tenant_id: str, worker_id: str, day: str) -> BudgetDay:
        members = cast(builtins.list[bytes], self._redis.zrange(self._budget_key(tenant_id, worker_id, day), 0, -1))
        return BudgetDay(day=day, used=len(members), interruptions=tuple(m.decode() for m in members))

    def take_interruption(
        self, tenant_id: str, worker_id: str, day: str, limit: int, item_id: str, *, force: bool = False
    ) -> tuple[bool, int]:
        args: builtins.list[Any] = [limit, item_id, "1" if force else "0", BUDGET_TTL_S]
        out = self._take(keys=[self._budget_key(tenant_id, worker_id, day)], args=args)
        taken, used = cast(builtins.list[int], out)
        return bool(taken), int(used)

    def _budget_key(self, tenant_id: str, worker_id: str, day: str) -> str:
        return self._key(tenant_id, worker_id, "budget", validate_id(day, "day"))

    @staticmethod
    def _brief_id(brief_id: str) -> str:
        return validate_id(brief_id, "brief id")
