"""The load cache (workspace/load_cache.py): a restart serves unchanged workers from the snapshot
and never an outdated one.

Files written by a test are seconds old, which the cache rightly distrusts (`SETTLE_NS`): the
caches here start their loads with a clock an hour ahead unless a test is about that rule.
"""

from __future__ import annotations

import logging
import os
import pickle
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from genworker.settings import load_settings
from genworker.workspace import load_cache as load_cache_module
from genworker.workspace.documents import explaining
from genworker.workspace.load_cache import CACHE_FILE, SETTLE_NS, LoadCache
from genworker.workspace.registry import WorkspaceRegistry
from genworker.workspace.snapshot import Worker

HOUR_NS = 3600 * 10**9


def _later() -> int:
    return time.time_ns() + HOUR_NS


def build(ws) -> None:
    ws.tenant("acme", trust_level=2)
    ws.persona(worker_id="w", extra="default_skill: helper\n")
    ws.duty("triage")
    ws.write("tenants/acme/workers/w/goals/launch.md", "---\ngoal_id: launch\ntitle: Launch\n---\n")
    ws.write("tenants/acme/workers/w/rules/directives/tone.md", "Be brief.\n")
    ws.write("tenants/acme/workers/w/contacts/configured/dana.md", "---\nname: Dana\n---\nCEO.\n")
    ws.skill("tenants/acme/workers/w/skills/helper")
    ws.persona(worker_id="other")
    ws.skill("tenants/acme/skills/shared")
    ws.skill("system/skills/general")
    ws.tenant("globex")
    ws.persona("globex", "g")


def cache_for(ws, **kwargs) -> LoadCache:
    registry = WorkspaceRegistry(ws.root)
    return LoadCache(registry.root, registry.limits, **({"clock": _later} | kwargs))


def load(ws, cache: LoadCache | None) -> WorkspaceRegistry:
    registry = WorkspaceRegistry(ws.root, product_skills=None, cache=cache or False)
    registry.load_all()
    return registry


def same(a: WorkspaceRegistry, b: WorkspaceRegistry) -> None:
    assert a.workers() == b.workers()
    for x, y in zip(a.workers(), b.workers(), strict=True):  # == does not compare which fields a file set
        assert x.persona.model_fields_set == y.persona.model_fields_set
        assert [d.model_fields_set for d in x.duties.values()] == [d.model_fields_set for d in y.duties.values()]
    assert a.failures() == b.failures()
    assert a.issues() == b.issues()
    assert a.notes() == b.notes()
    assert a.describe() == b.describe()
    assert a.summary() == b.summary()


def next_tick(ws, *paths: Path) -> None:
    """Wait until the file system's clock has moved past the ctime of `paths`, so that a change
    made now gets a later stamp (Linux stamps files with a clock that ticks every few ms)."""
    newest = max(p.stat().st_ctime_ns for p in paths)
    probe = ws.root.parent / "tick-probe"
    for _ in range(1_000_000):
        probe.write_bytes(b"")
        if probe.stat().st_ctime_ns > newest:
            return
    raise AssertionError("the file system clock did not move")


def test_a_restart_serves_every_worker_from_the_cache_with_the_same_result(ws) -> None:
    build(ws)
    cache = cache_for(ws)
    first = load(ws, cache)
    assert cache.last is not None
    assert (cache.last.cached, cache.last.parsed, cache.last.stored, cache.last.written) == (0, 3, 3, True)
    assert (ws.root / CACHE_FILE).is_file()
    second = load(ws, cache)
    assert (cache.last.cached, cache.last.parsed, cache.last.written) == (3, 0, False)
    same(second, load(ws, None))
    same(first, second)
    worker = second.worker("acme", "w")
    assert worker is not None
    assert sorted(worker.skills) == ["general", "helper", "shared"]
    assert worker.skills["shared"] is second.tenant("acme").skills["shared"]  # type: ignore[union-attr]


def _same_size_same_mtime(ws, folder: Path) -> None:
    persona = folder / "PERSONA.md"
    before = persona.stat()
    text = persona.read_text(encoding="utf-8")
    with persona.open("r+", encoding="utf-8") as fh:  # in place: same inode
        fh.write(text.replace("Be helpful.", "Be HELPFUL."))
    os.utime(persona, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = persona.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)


def _replaced(ws, folder: Path) -> None:
    tmp = folder / ".PERSONA.md.tmp"
    tmp.write_text((folder / "PERSONA.md").read_text(encoding="utf-8").replace("helpful", "HELPFUL"), encoding="utf-8")
    tmp.replace(folder / "PERSONA.md")


def _state_folders(ws, folder: Path) -> None:
    (folder / "runtime" / "outbox").mkdir(parents=True)
    (ws.root / "tenants" / "acme" / "sessions").mkdir()


def _instructions(worker: Worker | None) -> object:
    return worker.instructions if worker else None


# edit made while down -> what acme/w shows after the restart (None: it failed to load)
EDITS: dict[str, tuple[Callable[[Any, Path], object], Callable[[Worker | None], object], object]] = {
    "in place, same size, mtime put back": (_same_size_same_mtime, _instructions, "Be HELPFUL."),
    "replaced by a new file (editor save)": (_replaced, _instructions, "Be HELPFUL."),
    "a new duty file": (lambda ws, _: ws.duty("intake"), lambda w: w and sorted(w.duties), ["intake", "triage"]),
    "a goal file deleted": (lambda _, f: (f / "goals" / "launch.md").unlink(), lambda w: w and dict(w.goals), {}),
    "contacts/index.jsonl appears": (
        lambda ws, f: ws.write(f"{f}/contacts/index.jsonl", "not json\n"),
        lambda w: w,
        None,
    ),
    "duties/_defaults.md appears": (
        lambda ws, f: ws.write(f"{f}/duties/_defaults.md", "---\nposture:\n  default: draft\n---\n"),
        lambda w: w and w.duties["triage"].posture.default,
        "draft",
    ),
    "CHANNEL_CREDENTIALS.json appears": (
        lambda ws, f: ws.write(f"{f}/CHANNEL_CREDENTIALS.json", '{"slack": {"bot_token": "x", "signing_secret": "s"}}'),
        lambda w: w and w.credentials is not None,
        True,
    ),
}


@pytest.mark.parametrize("edit", list(EDITS))
def test_an_edit_made_while_the_process_was_down_is_seen(ws, edit: str) -> None:
    build(ws)
    cache = cache_for(ws)
    load(ws, cache)
    folder = ws.worker_dir("acme", "w")
    next_tick(ws, *folder.rglob("*"))
    change, show, expected = EDITS[edit]
    change(ws, folder)
    restarted = load(ws, cache)
    assert cache.last is not None
    assert (cache.last.cached, cache.last.parsed) == (2, 1)  # only acme/w is parsed again
    same(restarted, load(ws, None))
    assert show(restarted.worker("acme", "w")) == expected


def test_runtime_state_folders_next_to_the_definitions_are_not_edits(ws) -> None:
    build(ws)
    cache = cache_for(ws)
    load(ws, cache)
    _state_folders(ws, ws.worker_dir("acme", "w"))
    load(ws, cache)
    assert cache.last is not None
    assert (cache.last.cached, cache.last.parsed) == (3, 0)


def test_a_tenant_or_system_skill_edit_reloads_the_workers_that_inherit_it(ws) -> None:
    build(ws)
    cache = cache_for(ws)
    load(ws, cache)
    next_tick(ws, *ws.root.rglob("*"))
    ws.skill("tenants/acme/skills/extra")
    restarted = load(ws, cache)
    assert cache.last is not None
    assert (cache.last.cached, cache.last.parsed) == (1, 2)  # acme's two workers; globex's from the cache
    assert "extra" in restarted.worker("acme", "other").skills  # type: ignore[union-attr]
    ws.skill("system/skills/general", body="Changed.")
    restarted = load(ws, cache)
    assert (cache.last.cached, cache.last.parsed) == (0, 3)
    assert restarted.worker("globex", "g").skills["general"].instructions == "Changed."  # type: ignore[union-attr]
    next_tick(ws, *ws.root.rglob("*"))
    ws.tenant("acme", trust_level=0)  # the same size
    load(ws, cache)
    assert (cache.last.cached, cache.last.parsed) == (1, 2)


def test_a_deleted_worker_disappears_and_a_new_one_appears(ws) -> None:
    build(ws)
    cache = cache_for(ws)
    load(ws, cache)
    for path in sorted(ws.worker_dir("acme", "other").rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    ws.worker_dir("acme", "other").rmdir()
    ws.persona("globex", "new")
    restarted = load(ws, cache)
    assert cache.last is not None
    assert (cache.last.cached, cache.last.parsed, cache.last.written) == (2, 1, True)
    assert sorted(w.key for w in restarted.workers()) == [("acme", "w"), ("globex", "g"), ("globex", "new")]
    load(ws, cache)
    assert (cache.last.cached, cache.last.parsed) == (3, 0)


def test_a_worker_with_errors_is_reported_with_file_and_line_on_every_start(ws) -> None:
    build(ws)
    ws.duty("broken", "triggers: nope\n", worker_id="other")
    cache = cache_for(ws)
    fresh = load(ws, cache)
    errors = [str(i) for i in fresh.issues() if i.severity == "error"]
    assert errors
    assert all("tenants/acme/workers/other/duties/broken.md:" in e for e in errors)
    for _ in range(2):
        restarted = load(ws, cache)
        assert cache.last is not None
        assert (cache.last.cached, cache.last.parsed) == (2, 1)
        assert [str(i) for i in restarted.issues() if i.severity == "error"] == errors
        assert restarted.worker("acme", "other") is None


def test_files_changed_within_the_settle_time_are_not_stored(ws) -> None:
    build(ws)
    doubtful = cache_for(ws, clock=time.time_ns, settle_ns=HOUR_NS)  # every file changed "just now"
    load(ws, doubtful)
    assert doubtful.last is not None
    assert (doubtful.last.parsed, doubtful.last.stored, doubtful.last.written) == (3, 0, False)
    assert not (ws.root / CACHE_FILE).exists()
    assert SETTLE_NS >= 2 * 10**9  # FAT's 2 s mtime, the coarsest local file system


def test_workers_of_a_tenant_whose_own_files_are_unsettled_are_not_stored(ws) -> None:
    build(ws)
    next_tick(ws, *ws.root.rglob("*"))
    newest = ws.tenant("acme", trust_level=2).stat().st_ctime_ns  # TENANT.json rewritten last
    cache = cache_for(ws, clock=lambda: newest, settle_ns=1)  # settled: older than `newest`
    load(ws, cache)
    assert cache.last is not None
    assert (cache.last.parsed, cache.last.stored) == (3, 1)  # globex's worker only
    load(ws, cache)
    assert (cache.last.cached, cache.last.parsed, cache.last.stored) == (1, 2, 0)


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda data: data[: len(data) // 2], id="truncated"),
        pytest.param(lambda data: data[:-100] + bytes(b ^ 0xFF for b in data[-100:]), id="bytes flipped"),
        pytest.param(lambda data: b"", id="empty"),
        pytest.param(lambda data: b"not a cache at all\n", id="another file"),
    ],
)
def test_a_corrupt_cache_file_is_ignored_with_a_warning(
    ws, caplog: pytest.LogCaptureFixture, damage: Callable[[bytes], bytes]
) -> None:
    build(ws)
    cache = cache_for(ws)
    expected = load(ws, cache)
    path = ws.root / CACHE_FILE
    path.write_bytes(damage(path.read_bytes()))
    with caplog.at_level(logging.WARNING, logger="genworker.workspace.load_cache"):
        restarted = load(ws, cache)
    assert cache.last is not None
    assert (cache.last.cached, cache.last.parsed, cache.last.written) == (0, 3, True)
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "load cache ignored" in caplog.records[0].getMessage()
    same(restarted, expected)
    load(ws, cache)
    assert cache.last.cached == 3  # rewritten whole


def test_a_cache_file_naming_other_code_is_refused_without_running_it(ws, caplog: pytest.LogCaptureFixture) -> None:
    build(ws)
    cache = cache_for(ws)
    load(ws, cache)
    marker = ws.root.parent / "ran"

    class Payload:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (os.system, (f"touch {marker}",))

    header = load_cache_module._header(cache.root, cache.limits)
    head, body = pickle.dumps(header), pickle.dumps({("acme", "w"): Payload()})
    import struct
    import zlib

    frame = struct.pack("<IQ", zlib.crc32(body, zlib.crc32(head)), len(head))
    (ws.root / CACHE_FILE).write_bytes(load_cache_module._MAGIC + frame + head + body)
    with caplog.at_level(logging.WARNING, logger="genworker.workspace.load_cache"):
        load(ws, cache)
    assert not marker.exists()
    assert cache.last is not None
    assert cache.last.cached == 0
    assert "is not a value the load cache holds" in caplog.records[0].getMessage()


def test_another_genworker_version_or_limit_invalidates_the_whole_file(
    ws, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    build(ws)
    cache = cache_for(ws)
    load(ws, cache)
    monkeypatch.setattr("genworker.__version__", "99.0")
    with caplog.at_level(logging.INFO, logger="genworker.workspace.load_cache"):
        load(ws, cache)
    assert cache.last is not None
    assert (cache.last.cached, cache.last.parsed) == (0, 3)
    assert "written by another version" in cache.last.problem
    assert [r.levelname for r in caplog.records] == ["INFO"]  # expected after an upgrade: not a warning
    load(ws, cache)
    assert cache.last.cached == 3
    monkeypatch.setattr(load_cache_module, "_code_stamp", lambda: 1)  # a source file edited
    load(ws, cache)
    assert cache.last.cached == 0


def test_explain_bypasses_the_cache(ws) -> None:
    build(ws)
    cache = cache_for(ws)
    load(ws, cache)
    with explaining():
        explained = load(ws, cache)
    assert cache.last is not None
    assert cache.last.cached == 0
    assert any(i.message.startswith("understood:") for i in explained.notes())


def test_workers_with_channel_credentials_are_never_written_to_the_cache(ws) -> None:
    build(ws)
    ws.write(
        "tenants/acme/workers/other/CHANNEL_CREDENTIALS.json",
        '{"slack": {"bot_token": "xoxb-secret-never-cached", "signing_secret": "also-secret"}}',
    )
    cache = cache_for(ws)
    load(ws, cache)
    assert cache.last is not None
    assert (cache.last.parsed, cache.last.stored) == (3, 2)
    data = (ws.root / CACHE_FILE).read_bytes()
    assert b"never-cached" not in data
    assert b"also-secret" not in data
    restarted = load(ws, cache)
    assert (cache.last.cached, cache.last.parsed) == (2, 1)
    assert restarted.worker("acme", "other").credentials is not None  # type: ignore[union-attr]


def test_an_unwritable_cache_folder_never_fails_the_load(ws, caplog: pytest.LogCaptureFixture) -> None:
    build(ws)
    (ws.root / "runtime").write_text("a file where the folder would be", encoding="utf-8")
    cache = cache_for(ws)
    with caplog.at_level(logging.WARNING, logger="genworker.workspace.load_cache"):
        registry = load(ws, cache)
    assert registry.summary().workers == 3
    assert cache.last is not None
    assert not cache.last.written
    assert "not written" in caplog.records[-1].getMessage()


def test_from_settings_uses_the_cache_only_when_asked_and_enabled(ws) -> None:
    build(ws)
    settings = load_settings(None, {}, workspace=ws.root)
    assert WorkspaceRegistry.from_settings(settings).cache is None
    assert WorkspaceRegistry.from_settings(settings, cache=True).cache is not None
    off = load_settings(None, {"GENWORKER_LOAD_CACHE": "false"}, workspace=ws.root)
    assert WorkspaceRegistry.from_settings(off, cache=True).cache is None


def test_clear_removes_the_file(ws) -> None:
    build(ws)
    cache = cache_for(ws)
    load(ws, cache)
    assert cache.clear()
    assert not cache.clear()
    load(ws, cache)
    assert cache.last is not None
    assert cache.last.cached == 0


def test_every_path_a_worker_load_looks_at_is_part_of_its_key(ws, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the loader stats, lists or opens must be recorded, or sit in a recorded folder (whose
    mtime changes when an entry comes or goes), or be a folder above a recorded path (the symlink
    checks: a folder made a symlink changes what the paths below it resolve to).
    A new file access in the loader that bypasses workspace/inputs.py fails here."""
    build(ws)
    ws.write("tenants/acme/workers/w/contacts/index.jsonl", '{"person_id": "dana"}\n')
    ws.write("tenants/acme/workers/w/duties/_defaults.md", "---\nposture:\n  default: draft\n---\n")
    ws.skill("tenants/acme/workers/w/skills/group/nested")
    assert check_worker_inputs(monkeypatch, ws.root, None) == 3


def check_worker_inputs(monkeypatch: pytest.MonkeyPatch, root: Path, product_skills: Path | None) -> int:
    """Load `root` with every worker load spied on; assert the rule above; return the loads seen."""
    checked = _touched_by_worker_loads(monkeypatch, root, product_skills)
    for folder, touched, recorded in checked:
        for path in touched:
            above = folder.is_relative_to(path) or any(r.startswith(path + os.sep) for r in recorded)
            ok = path in recorded or str(Path(path).parent) in recorded or above
            assert ok, f"{path} was looked at while loading {folder} but is not in its inputs"
    return len(checked)


def _touched_by_worker_loads(
    monkeypatch: pytest.MonkeyPatch, root: Path, product_skills: Path | None
) -> list[tuple[Path, list[str], set[str]]]:
    import io

    from genworker.workspace import inputs, tenant_loader

    real_load = tenant_loader.load_worker
    spied = {(os, "stat"): os.stat, (os, "lstat"): os.lstat, (os, "scandir"): os.scandir, (io, "open"): io.open}
    touched: list[str] = []

    def spy(real: Callable[..., object]) -> Callable[..., object]:
        def call(path: object, *args: object, **kwargs: object) -> object:
            if isinstance(path, str | os.PathLike):
                touched.append(os.path.abspath(os.fspath(path)))  # noqa: PTH100
            return real(path, *args, **kwargs)

        return call

    checked: list[tuple[Path, list[str], set[str]]] = []

    def load_worker(scope, tenant, folder, inherited):  # type: ignore[no-untyped-def]
        touched.clear()
        for (module, name), real in spied.items():
            setattr(module, name, spy(real))
        try:
            return real_load(scope, tenant, folder, inherited)
        finally:
            for (module, name), real in spied.items():
                setattr(module, name, real)
            found = inputs._ACTIVE.get()
            assert found is not None
            checked.append((folder, list(touched), set(found.stamps)))

    monkeypatch.setattr(tenant_loader, "load_worker", load_worker)
    limits = WorkspaceRegistry(root).limits
    cache = LoadCache(root.resolve(), limits, clock=_later)
    WorkspaceRegistry(root, product_skills=product_skills, cache=cache).load_all()
    return checked
