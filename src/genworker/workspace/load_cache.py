"""The load cache: each worker's last good load, kept so that a restart with an unchanged
workspace does not parse and validate every file again.

A worker is served from the cache only when nothing it was made from can have changed:

- every path its load looked at (files read, folders listed, files found absent: `inputs.py`)
  has the same mode, inode, device, size, mtime_ns and ctime_ns;
- the tenant's and the system layer's inputs (TENANT.json, tenant, system and product skills)
  have too, since inherited skills and the tenant's trust level shape a worker;
- the file was written by this cache schema, the same genworker code (the version and every
  `.py` file of the package by size and mtime), Python, pydantic, PyYAML, workspace root and
  file size limits.

Anything else is a miss and that worker is parsed again. A load is stored only when every
input is older than `SETTLE_NS` at the start of the load: a file rewritten within the
file system's timestamp granularity of the moment it was read could keep its stamp. Failed
workers are never stored (their errors are found again on every start), nor workers with
CHANNEL_CREDENTIALS.json (no secrets in the cache). An unreadable, corrupt or foreign cache
file is ignored with a warning; the load goes on without it.
"""

from __future__ import annotations

import copyreg
import dataclasses
import enum
import io
import logging
import pickle
import struct
import sys
import time
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel, SecretBytes, SecretStr
from pydantic_core import PydanticUndefined

import genworker
from genworker.fsutil import write_atomic
from genworker.workspace.documents import explaining_active
from genworker.workspace.inputs import Inputs, Key, stamps_now
from genworker.workspace.limits import FileLimits
from genworker.workspace.models import SkillLevel
from genworker.workspace.snapshot import Worker, frozen_map

__all__ = ["CACHE_FILE", "SCHEMA_VERSION", "SETTLE_NS", "CacheStats", "LoadCache", "LoadSession", "TenantCache"]

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
CACHE_FILE = Path("runtime") / "cache" / "workers.pickle"  # under the workspace root
SETTLE_NS = 2_000_000_000  # coarser than any local file system's timestamps (FAT: 2 s)
_MAGIC = b"genworker-load-cache\n"
_FRAME = struct.Struct("<IQ")  # crc32 of the rest, length of the header


@dataclass(frozen=True, slots=True)
class _Entry:
    inputs: Key
    context: tuple[Key, Key]  # the system's and the tenant's inputs
    worker: Worker  # its own skills only; version 0


@dataclass(slots=True)
class CacheStats:
    cached: int = 0  # workers served from the cache
    parsed: int = 0  # workers loaded from their files (including those that failed)
    stored: int = 0  # loads added to the cache
    written: bool = False
    problem: str = ""  # why the cache file was not used or not written


class LoadCache:
    """The cache file of one workspace; `begin()` starts a full load that uses it."""

    def __init__(
        self,
        root: Path,
        limits: FileLimits,
        *,
        path: Path | None = None,
        clock: Callable[[], int] = time.time_ns,
        settle_ns: int | None = None,
    ) -> None:
        self.root = root
        self.path = path if path is not None else root / CACHE_FILE
        self.limits = limits
        self._clock = clock
        self._settle_ns = SETTLE_NS if settle_ns is None else settle_ns
        self.last: CacheStats | None = None  # of the latest load

    def begin(self) -> LoadSession:
        stats = CacheStats()
        self.last = stats
        header = _header(self.root, self.limits)
        entries = self._read(header, stats)
        return LoadSession(self, header, entries, self._clock() - self._settle_ns, stats)

    def clear(self) -> bool:
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        return True

    def _read(self, header: tuple[Any, ...], stats: CacheStats) -> dict[tuple[str, str], _Entry]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            return _ignored(stats, f"cannot read {self.path}: {exc.strerror or exc}")
        start = len(_MAGIC) + _FRAME.size
        if not data.startswith(_MAGIC) or len(data) < start:
            return _ignored(stats, f"{self.path} is not a load cache file")
        crc, header_size = _FRAME.unpack_from(data, len(_MAGIC))
        if zlib.crc32(memoryview(data)[start:]) != crc:
            return _ignored(stats, f"{self.path} is damaged (checksum mismatch)")
        try:
            found = _loads(data[start : start + header_size])
            if found != header:
                stats.problem = "written by another version or for another workspace"
                log.info("load cache %s: %s; every worker is parsed", self.path, stats.problem)
                return {}
            entries = _loads(data[start + header_size :])
        except Exception as exc:  # whatever is wrong with the file, it is only a cache
            return _ignored(stats, f"{self.path} cannot be read back ({type(exc).__name__}: {exc})")
        if not isinstance(entries, dict) or not all(isinstance(e, _Entry) for e in entries.values()):
            return _ignored(stats, f"{self.path} holds something else than worker entries")
        return entries

    def _write(self, header: tuple[Any, ...], entries: Mapping[tuple[str, str], _Entry], stats: CacheStats) -> None:
        try:
            head, body = _dumps(header), _dumps(dict(entries))
            frame = _FRAME.pack(zlib.crc32(body, zlib.crc32(head)), len(head))
            # not fsynced: a file lost or torn by a crash fails its checksum and is only a cache miss
            write_atomic(self.path, _MAGIC + frame + head + body, durable=False)
        except Exception as exc:  # start-up never fails because of the cache
            stats.problem = f"not written: {type(exc).__name__}: {exc}"
            log.warning("load cache %s %s", self.path, stats.problem)
            return
        stats.written = True


class LoadSession:
    """One full load: looks workers up, collects the loads to keep, writes the file at the end."""

    def __init__(
        self,
        cache: LoadCache,
        header: tuple[Any, ...],
        entries: dict[tuple[str, str], _Entry],
        settled_before_ns: int,
        stats: CacheStats,
    ) -> None:
        self._cache = cache
        self._header = header
        self._old = entries
        self._new: dict[tuple[str, str], _Entry] = {}
        self._settled_before_ns = settled_before_ns
        self.stats = stats
        self.system: Key = ((), b"")
        self._system_settled = False

    def set_system(self, found: Inputs) -> None:
        self.system = found.key()
        self._system_settled = self._settled(found)

    def tenant(self, tenant_id: str, found: Inputs) -> TenantCache | None:
        """The cache for the workers of `tenant_id`, whose own files were recorded in `found`
        (None while `genworker check --explain` asks for notes no cached load has)."""
        if explaining_active():
            return None
        storable = self._system_settled and self._settled(found)
        return TenantCache(self, tenant_id, (self.system, found.key()), storable)

    def finish(self) -> CacheStats:
        """Write the file when what it would hold changed (a worker stored, changed or gone)."""
        if self._new.keys() != self._old.keys() or any(e is not self._old.get(k) for k, e in self._new.items()):
            self._cache._write(self._header, self._new, self.stats)
        return self.stats

    def _settled(self, found: Inputs) -> bool:
        return found.newest_ns < self._settled_before_ns


@dataclass(slots=True)
class TenantCache:
    session: LoadSession
    tenant_id: str
    context: tuple[Key, Key]
    storable: bool  # the context's inputs are settled

    def lookup(self, worker_id: str) -> Worker | None:
        """The cached worker (its own skills only) if none of its inputs changed."""
        key = (self.tenant_id, worker_id)
        entry = self.session._old.get(key)
        if entry is None or entry.context != self.context or not _unchanged(entry.inputs):
            self.session.stats.parsed += 1
            return None
        self.session._new[key] = entry
        self.session.stats.cached += 1
        return entry.worker

    def store(self, worker: Worker, found: Inputs) -> None:
        if not self.storable or worker.credentials is not None or not self.session._settled(found):
            return
        own = {name: skill for name, skill in worker.skills.items() if skill.level is SkillLevel.WORKER}
        kept = replace(worker, skills=frozen_map(own), version=0)
        self.session._new[(self.tenant_id, worker.worker_id)] = _Entry(found.key(), self.context, kept)
        self.session.stats.stored += 1


def _unchanged(key: Key) -> bool:
    paths, stamps = key
    return stamps_now(paths) == stamps


def _ignored(stats: CacheStats, problem: str) -> dict[tuple[str, str], _Entry]:
    stats.problem = problem
    log.warning("load cache ignored: %s; every worker is parsed", problem)
    return {}


def _header(root: Path, limits: FileLimits) -> tuple[Any, ...]:
    return (
        SCHEMA_VERSION,
        genworker.__version__,
        _code_stamp(),
        sys.version,
        *(_version(p) for p in ("pydantic", "pydantic-core", "PyYAML", "python-frontmatter")),
        str(root),
        limits,
    )


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return ""


# The code a load runs: this layer, the leaf modules below it and tools/, which workspace models
# still import (tests/structural/test_layers.py keeps the loader from importing anything else).
_CODE_FOLDERS = ("workspace", "observability", "tools")


def _code_stamp() -> int:
    """A checksum of the size and mtime of every `.py` file the loader may import."""
    package = Path(genworker.__file__).parent
    files = sorted(package.glob("*.py"))
    for sub in _CODE_FOLDERS:
        files += sorted((package / sub).rglob("*.py"))
    crc = 0
    for path in files:
        info = path.stat()
        crc = zlib.crc32(f"{path}:{info.st_size}:{info.st_mtime_ns};".encode(), crc)
    return crc


# -- serialisation ---------------------------------------------------------------------------
# pickle keeps the loaded values exactly (pydantic models with their fields_set and extras, the
# compatibility notes) and is the fastest to read back: docs/benchmarks.md, "Restart from the
# load cache". Reading is restricted to the value classes a workspace load makes.

_new_object = object.__new__
_set_slot = object.__setattr__


def _model(cls: type[BaseModel], values: dict[str, Any], fields_set: set[str], extra: Any, private: Any) -> Any:
    """A model as it was validated, without validating it again: the header guarantees the same
    code made it. Cheaper than pydantic's `__setstate__` (no state dict per model)."""
    obj = _new_object(cls)
    _set_slot(obj, "__dict__", values)
    _set_slot(obj, "__pydantic_fields_set__", fields_set)
    _set_slot(obj, "__pydantic_extra__", extra)
    _set_slot(obj, "__pydantic_private__", private)
    return obj


def _reduce_model(obj: BaseModel) -> tuple[Any, ...]:
    private = obj.__pydantic_private__
    if private:  # as pydantic's __getstate__: unset private attributes are left out
        private = {k: v for k, v in private.items() if v is not PydanticUndefined}
    return (_model, (type(obj), obj.__dict__, obj.__pydantic_fields_set__, obj.__pydantic_extra__, private))


def _refuse_secret(value: object) -> tuple[Any, ...]:
    raise pickle.PicklingError(f"a {type(value).__name__} is never written to the load cache")


def _subclasses(cls: type) -> Iterable[type]:
    sub: type
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


class _Pickler(pickle.Pickler):
    dispatch_table = copyreg.dispatch_table.copy()
    dispatch_table[MappingProxyType] = lambda m: (frozen_map, (dict(m),))
    dispatch_table[SecretStr] = _refuse_secret
    dispatch_table[SecretBytes] = _refuse_secret


def _dumps(value: object) -> bytes:
    models = (c for c in _subclasses(BaseModel) if c.__module__.startswith("genworker."))
    _Pickler.dispatch_table.update(dict.fromkeys(models, _reduce_model))  # read when a pickler is made
    out = io.BytesIO()
    _Pickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    return out.getvalue()


_STDLIB: frozenset[tuple[str, str]] = frozenset(
    {
        ("datetime", "date"),
        ("datetime", "datetime"),
        ("datetime", "time"),
        ("datetime", "timedelta"),
        ("datetime", "timezone"),
        ("zoneinfo", "ZoneInfo._unpickle"),
        ("decimal", "Decimal"),
        ("re", "_compile"),
        ("genworker.workspace.snapshot", "frozen_map"),
        ("genworker.workspace.load_cache", "_model"),
        ("genworker.workspace.limits", "FileLimits"),
        ("genworker.workspace.limits", "SizeLimit"),
    }
)


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _STDLIB:
            return super().find_class(module, name)
        if module.startswith("genworker.") and "." not in name:
            found = super().find_class(module, name)
            if isinstance(found, type) and (
                issubclass(found, BaseModel | enum.Enum) or dataclasses.is_dataclass(found)
            ):
                return found
        raise pickle.UnpicklingError(f"{module}.{name} is not a value the load cache holds")


def _loads(data: bytes) -> Any:
    return _Unpickler(io.BytesIO(data)).load()
