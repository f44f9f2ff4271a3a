"""TaskStore and the file edge: paths, atomic and exclusive writes, locks, listing and clear
errors for unreadable files."""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from genworker import fsutil
from genworker.ids import InvalidIdError, PathEscapeError
from genworker.worker.lifecycle.errors import RunExists, RunNotFound, TaskExists, TaskFileError, TaskNotFound
from genworker.worker.lifecycle.files import create_exclusive, file_lock, write_atomic
from genworker.worker.lifecycle.store import IdempotencyClaim, TaskStore, idempotency_digest
from genworker.worker.task import RunRecord, RunRef, RunState, RunTimings, TaskManifest, TaskProvenance

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


def run(run_id: str = "r1", *, tenant: str = "acme", worker: str = "w", at: datetime = T0) -> RunRecord:
    return RunRecord(run_id, f"task-{run_id}", tenant, worker, RunState.QUEUED, RunTimings(queued_at=at))


def manifest(task_id: str = "t1", run_id: str = "r1", tenant: str = "acme", worker: str = "w") -> TaskManifest:
    return TaskManifest(task_id, run_id, tenant, worker, "do it", T0, provenance=TaskProvenance(goal_id="g1"))


@pytest.fixture
def store(tmp_path: Path) -> TaskStore:
    return TaskStore(tmp_path / "ws")


# -- paths --------------------------------------------------------------------------


def test_paths_follow_the_workspace_layout(store: TaskStore) -> None:
    worker = store.root / "tenants" / "acme" / "workers" / "w"
    assert store.run_path(RunRef("acme", "w", "r1")) == worker / "runs" / "r1.json"
    assert store.manifest_path("acme", "w", "t1") == worker / "tasks" / "active" / "t1.json"
    assert store.manifest_path("acme", "w", "t1", done=True) == worker / "tasks" / "done" / "t1.json"
    digest = idempotency_digest("plan:p:2025:v1")
    assert len(digest) == 32 and store.claim_path("acme", "w", "plan:p:2025:v1").name == f"{digest}.json"
    assert store.claim_path("acme", "w", "k").parent == worker / "runs" / "_idempotency"


def test_tenants_and_workers_never_share_files(store: TaskStore) -> None:
    paths = {store.run_path(RunRef(t, w, "r1")) for t in ("acme", "globex") for w in ("alice", "bob")} | {
        store.manifest_path(t, w, "t1") for t in ("acme", "globex") for w in ("alice", "bob")
    }
    assert len(paths) == 8
    store.create_run(run(tenant="acme", worker="alice"))
    store.create_run(run(tenant="globex", worker="alice"))
    assert store.list_runs("acme", "alice", limit=10) == [run(tenant="acme", worker="alice")]
    assert store.list_runs("acme", "bob", limit=10) == []
    with pytest.raises(RunNotFound):
        store.read_run(RunRef("acme", "bob", "r1"))


@pytest.mark.parametrize("bad", ["..", "../other", "a/b", "", "-x", "x" * 200])
def test_ids_are_validated_before_touching_the_disk(store: TaskStore, bad: str) -> None:
    with pytest.raises(InvalidIdError):
        store.worker_dir(bad, "w")
    with pytest.raises(InvalidIdError):
        store.manifest_path("acme", "w", bad)
    with pytest.raises(InvalidIdError):
        store.list_runs("acme", bad, limit=1)


def test_a_symlinked_runs_folder_cannot_lead_outside(store: TaskStore, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    worker = store.root / "tenants" / "acme" / "workers" / "w"
    worker.mkdir(parents=True)
    (worker / "runs").symlink_to(outside)
    with pytest.raises(PathEscapeError):
        store.create_run(run())
    assert list(outside.iterdir()) == []


def test_a_run_file_symlinked_outside_is_refused_after_its_folder_was_checked(store: TaskStore, tmp_path: Path) -> None:
    """The runs/ folder is checked once per process; the file itself is checked every time."""
    store.create_run(run(run_id="r0"))  # worker and runs/ folders are now known free of symlinks
    secret = tmp_path / "secret.json"
    secret.write_text("{}", encoding="utf-8")
    (store.run_path(RunRef("acme", "w", "r0")).parent / "r1.json").symlink_to(secret)
    with pytest.raises(PathEscapeError):
        store.read_run(RunRef("acme", "w", "r1"))
    with pytest.raises(PathEscapeError):
        store.save_run(run())
    assert secret.read_text(encoding="utf-8") == "{}"


def test_a_symlink_inside_the_worker_folder_is_still_followed(store: TaskStore) -> None:
    store.create_run(run(run_id="r0"))
    runs = store.run_path(RunRef("acme", "w", "r0")).parent
    (runs / "alias.json").symlink_to(runs / "r0.json")  # resolves inside: allowed, as before
    assert store.read_run(RunRef("acme", "w", "alias")).run_id == "r0"


# -- writes -------------------------------------------------------------------------


def test_runs_and_manifests_round_trip(store: TaskStore) -> None:
    record = run()
    store.create_run(record)
    assert store.read_run(record.ref) == record
    store.create_manifest(manifest())
    assert store.read_manifest("acme", "w", "t1") == manifest()


def test_runs_and_manifests_are_created_once(store: TaskStore) -> None:
    store.create_run(run())
    with pytest.raises(RunExists, match="acme/w/r1 already exists"):
        store.create_run(replace(run(), task_id="other"))
    assert store.read_run(run().ref).task_id == "task-r1"
    store.create_manifest(manifest())
    with pytest.raises(TaskExists):
        store.create_manifest(manifest(run_id="r2"))
    assert store.finish_manifest("acme", "w", "t1")
    with pytest.raises(TaskExists):  # a finished task id is not reused either
        store.create_manifest(manifest(run_id="r3"))


def test_finishing_a_manifest_moves_it_once(store: TaskStore) -> None:
    store.create_manifest(manifest())
    assert store.finish_manifest("acme", "w", "t1") is True
    assert not store.manifest_path("acme", "w", "t1").exists()
    assert store.manifest_path("acme", "w", "t1", done=True).exists()
    assert store.finish_manifest("acme", "w", "t1") is True  # already moved: a no-op
    assert store.read_manifest("acme", "w", "t1") == manifest()
    assert store.finish_manifest("acme", "w", "missing") is False
    with pytest.raises(TaskNotFound):
        store.read_manifest("acme", "w", "missing")


def test_save_replaces_atomically_and_leaves_no_temp_files(store: TaskStore) -> None:
    store.create_run(run())
    store.save_run(replace(run(), state=RunState.RUNNING, version=2))
    folder = store.run_path(run().ref).parent
    assert [p.name for p in folder.iterdir()] == ["r1.json"]
    assert store.read_run(run().ref).state is RunState.RUNNING


def test_a_failed_replace_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "f.json"
    path.write_bytes(b"old")

    def broken(self: Path, target: Path) -> Path:
        raise OSError("disk full")

    monkeypatch.setattr(Path, "replace", broken)
    monkeypatch.setattr(fsutil, "_RENAMEAT2", None)  # the rename path (the exchange's: tests/unit/test_fsutil.py)
    with pytest.raises(OSError, match="disk full"):
        write_atomic(path, b"new")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]


def test_exclusive_create_has_one_winner(tmp_path: Path) -> None:
    path = tmp_path / "claim.json"
    assert create_exclusive(path, b"first") is True
    assert create_exclusive(path, b"second") is False
    assert path.read_bytes() == b"first"
    assert [p.name for p in tmp_path.iterdir()] == ["claim.json"]


def test_file_lock_is_exclusive_while_held(tmp_path: Path) -> None:
    lock = tmp_path / ".locks" / "r1.lock"

    def try_lock() -> bool:
        fd = os.open(lock, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
        finally:
            os.close(fd)

    with file_lock(lock):
        assert try_lock() is False
    assert try_lock() is True


def test_claims_round_trip(store: TaskStore) -> None:
    claim = IdempotencyClaim("plan:p:v1", "r1", "t1", T0)
    assert store.read_claim("acme", "w", "plan:p:v1") is None
    assert store.claim_idempotency("acme", "w", claim) is True
    assert store.claim_idempotency("acme", "w", replace(claim, run_id="r2")) is False
    assert store.read_claim("acme", "w", "plan:p:v1") == claim
    store.discard_claim("acme", "w", "plan:p:v1")
    assert store.read_claim("acme", "w", "plan:p:v1") is None


# -- listing ------------------------------------------------------------------------


def test_list_runs_newest_first_with_limit_offset_and_cursor(store: TaskStore) -> None:
    for i in range(5):
        store.create_run(run(f"r{i}", at=T0 + timedelta(minutes=i)))
    store.create_run(run("r2b", at=T0 + timedelta(minutes=2)))  # same instant as r2: run_id breaks the tie

    def ids(**kw: Any) -> list[str]:
        return [r.run_id for r in store.list_runs("acme", "w", **kw)]

    assert ids(limit=10) == ["r4", "r3", "r2b", "r2", "r1", "r0"]
    assert ids(limit=2) == ["r4", "r3"]
    assert ids(limit=2, offset=2) == ["r2b", "r2"]
    assert ids(limit=10, before=T0 + timedelta(minutes=2)) == ["r1", "r0"]
    assert ids(limit=0) == []
    with pytest.raises(ValueError, match="limit"):
        ids(limit=-1)
    with pytest.raises(ValueError, match="timezone-aware"):
        ids(limit=1, before=datetime(2025, 1, 1))  # noqa: DTZ001


def test_listing_skips_temp_lock_and_claim_files(store: TaskStore) -> None:
    store.create_run(run())
    store.claim_idempotency("acme", "w", IdempotencyClaim("k", "r1", "t1", T0))
    folder = store.run_path(run().ref).parent
    (folder / ".r1.json.abc.tmp").write_text("{", encoding="utf-8")
    (folder / "notes.txt").write_text("x", encoding="utf-8")
    with file_lock(folder / ".locks" / "r1.lock"):
        pass
    assert [r.run_id for r in store.list_runs("acme", "w", limit=10)] == ["r1"]
    assert store.run_refs("acme", "w") == [run().ref]


def test_workers_lists_valid_tenant_and_worker_folders(store: TaskStore) -> None:
    for t, w in [("acme", "alice"), ("acme", "bob"), ("globex", "carol")]:
        (store.root / "tenants" / t / "workers" / w).mkdir(parents=True)
    (store.root / "tenants" / "acme" / "workers" / ".trash").mkdir()
    assert list(store.workers()) == [("acme", "alice"), ("acme", "bob"), ("globex", "carol")]
    assert list(TaskStore(store.root / "empty").workers()) == []


# -- unreadable files ----------------------------------------------------------------


def write_raw(store: TaskStore, content: str) -> Path:
    path = store.run_path(run().ref)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content, encoding="utf-8")
    return path


def valid_json() -> dict[str, Any]:
    return {
        "run_id": "r1",
        "task_id": "t1",
        "tenant_id": "acme",
        "worker_id": "w",
        "state": "queued",
        "timings": {"queued_at": "2025-03-01T09:00:00Z"},
        "schema_version": 1,
    }


def test_a_minimal_valid_file_reads(store: TaskStore) -> None:
    write_raw(store, json.dumps(valid_json()))
    assert store.read_run(run().ref).timings.queued_at == T0


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"run_id": "r1", ', "not valid JSON"),
        ("[1, 2]", "expected a JSON object, got list"),
        (json.dumps({**valid_json(), "schema_version": None}), "schema_version is missing"),
        (json.dumps({k: v for k, v in valid_json().items() if k != "schema_version"}), "schema_version is missing"),
        (json.dumps({**valid_json(), "schema_version": 2}), "schema_version 2 is not supported"),
        (json.dumps({**valid_json(), "schema_version": "1"}), "schema_version '1' is not supported"),
        (json.dumps({**valid_json(), "schema_version": True}), "schema_version True is not supported"),
        (json.dumps({**valid_json(), "state": "sleeping"}), "state:"),
        (json.dumps({**valid_json(), "colour": "blue"}), "colour: Unexpected keyword argument"),
        (json.dumps({**valid_json(), "timings": {"queued_at": "2025-03-01T09:00:00"}}), "timezone-aware"),
        (json.dumps({**valid_json(), "worker_id": "../x"}), "worker_id"),
    ],
)
def test_unreadable_run_files_name_the_file(store: TaskStore, content: str, message: str) -> None:
    path = write_raw(store, content)
    with pytest.raises(TaskFileError, match=message) as caught:
        store.read_run(run().ref)
    assert caught.value.path == path
    assert str(caught.value).startswith(f"{path}: ")


def test_listing_reports_a_corrupt_file_by_name(store: TaskStore) -> None:
    store.create_run(run("r0"))
    bad = write_raw(store, "{oops")
    with pytest.raises(TaskFileError, match=f"^{bad}: not valid JSON"):
        store.list_runs("acme", "w", limit=10)


def test_manifest_with_unknown_schema_version_names_the_file(store: TaskStore) -> None:
    path = store.manifest_path("acme", "w", "t1")
    path.parent.mkdir(parents=True)
    data = {"task_id": "t1", "run_id": "r1", "tenant_id": "acme", "worker_id": "w", "text": "x"}
    path.write_text(json.dumps({**data, "created_at": "2025-03-01T09:00:00Z", "schema_version": 9}), encoding="utf-8")
    with pytest.raises(TaskFileError, match=r"t1\.json: schema_version 9 is not supported \(this runtime reads"):
        store.read_manifest("acme", "w", "t1")
