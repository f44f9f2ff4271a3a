"""heartbeat_meta.json: a fresh meta on first write, every list capped, expired concerns dropped,
unknown schema versions refused."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from genworker.autonomy.heartbeat import HeartbeatFileError, HeartbeatMeta, HeartbeatMetaStore, OpenConcern, TaskRef
from genworker.autonomy.heartbeat.meta import MAX_OPEN_CONCERNS, MAX_TASK_REFS

T0 = datetime(2027, 6, 1, tzinfo=UTC)

pytestmark = pytest.mark.anyio


def store(root: Path) -> HeartbeatMetaStore:
    return HeartbeatMetaStore(root, main_session_key=lambda w: f"{w}.main")


def concern(n: int, expires: datetime) -> OpenConcern:
    return OpenConcern(f"c{n}", f"i{n}", "summary", f"title {n}", T0, expires)


def ref(n: int) -> TaskRef:
    return TaskRef("task", f"i{n}", f"c{n}", f"run_{n}", f"task_{n}", f"t{n}", T0)


async def test_first_update_creates_a_bounded_meta(tmp_path: Path) -> None:
    metas = store(tmp_path)
    assert await metas.get("acme", "alice") is None

    def grow(meta: HeartbeatMeta) -> HeartbeatMeta:
        live = tuple(concern(n, T0 + timedelta(hours=1)) for n in range(80))
        expired = (concern(999, T0),)
        return replace(meta, open_concerns=expired + live, task_refs=tuple(ref(n) for n in range(70)))

    meta = await metas.update("acme", "alice", T0, grow)
    assert meta.main_session_key == "alice.main" and meta.schema_version == 1
    assert len(meta.open_concerns) == MAX_OPEN_CONCERNS and meta.open_concerns[-1].concern == "c79"
    assert all(c.concern != "c999" for c in meta.open_concerns)
    assert len(meta.task_refs) == MAX_TASK_REFS and meta.task_refs[0].run_id == "run_20"
    assert await metas.get("acme", "alice") == meta
    later = await metas.update("acme", "alice", T0 + timedelta(hours=2), lambda m: m)
    assert later.open_concerns == () and len(later.task_refs) == MAX_TASK_REFS


async def test_a_file_it_cannot_read_is_refused(tmp_path: Path) -> None:
    metas = store(tmp_path)
    path = metas.path("acme", "alice")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"schema_version": 9, "tenant_id": "acme", "worker_id": "alice"}), encoding="utf-8")
    with pytest.raises(HeartbeatFileError, match="schema_version 9"):
        await metas.get("acme", "alice")
    with pytest.raises(HeartbeatFileError, match="schema_version 9"):
        await metas.update("acme", "alice", T0, lambda m: m)
    path.write_text(
        json.dumps({"schema_version": 1, "tenant_id": "acme", "worker_id": "bob", "main_session_key": "bob.main"}),
        encoding="utf-8",
    )
    with pytest.raises(HeartbeatFileError, match="belongs to acme/bob"):
        await metas.get("acme", "alice")


async def test_ids_are_validated(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="worker id"):
        await store(tmp_path).get("acme", "../bob")
