"""Suite-wide fixtures: the demo workspace, tmp workspaces, and real services.

Tests never read the live `workspace/` folder (a developer adds workers there and a running
server writes runtime state into it): they get the demo as git tracks it, copied once per
session (`demo_workspace_src`), and each test works on its own copy (`demo_workspace`). An audit
hook fails any test that opens, lists or changes anything under the live folder, and
tests/structural/test_live_workspace.py finds paths to it in the source.

Tests that need Redis skip with a one-line reason on a laptop without it, and fail
when GENWORKER_REQUIRE_REDIS=1 (CI).
"""

from __future__ import annotations

import fnmatch
import functools
import ipaddress
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
REDIS_TEST_URL = os.environ.get("REDIS_TEST_URL", "redis://127.0.0.1:6379/15")


_real_getaddrinfo = socket.getaddrinfo


def _local_only_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
    """Accidental calls to real model providers (or anything off this machine) fail the suite."""
    name = host.decode() if isinstance(host, bytes) else host
    if name not in (None, "localhost", "testserver", "testclient"):
        try:
            local = ipaddress.ip_address(name).is_loopback
        except ValueError:
            local = False
        if not local:
            raise OSError(f"test suite blocks network access to {name!r}: only loopback is allowed")
    return _real_getaddrinfo(host, *args, **kwargs)


@pytest.fixture(autouse=True, scope="session")
def _no_external_network() -> Iterator[None]:
    socket.getaddrinfo = _local_only_getaddrinfo
    try:
        yield
    finally:
        socket.getaddrinfo = _real_getaddrinfo


_PATH_EVENTS = frozenset(
    {
        "open", "os.listdir", "os.scandir", "os.mkdir", "os.remove", "os.rmdir", "os.rename", "os.chmod",
        "os.utime", "os.truncate", "os.symlink", "os.link", "shutil.copyfile", "shutil.copytree",
        "shutil.rmtree", "shutil.move",
    }
)  # fmt: skip


class LiveWorkspaceGuard:
    """An audit hook recording every open, listing or change of a path under `root` while `on`."""

    def __init__(self, root: Path) -> None:
        self.root = str(root)
        self.on = True
        self.touched: list[str] = []

    def __call__(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.on or event not in _PATH_EVENTS:
            return
        for arg in args[:2]:
            if not isinstance(arg, str | bytes | os.PathLike):
                continue
            path = os.fsdecode(arg)
            if not os.path.isabs(path):  # noqa: PTH117 - pathlib here would cost every open() a Path
                try:
                    path = os.path.join(os.getcwd(), path)  # noqa: PTH109, PTH118
                except OSError:  # the working directory is gone
                    continue
            path = os.path.normpath(path)
            if path == self.root or path.startswith(self.root + os.sep):
                self.touched.append(path)

    def take(self) -> list[str]:
        """What was touched since the last take."""
        touched, self.touched = self.touched, []
        return sorted(set(touched))

    @contextmanager
    def off(self) -> Iterator[None]:
        self.on = False
        try:
            yield
        finally:
            self.on = True

    @contextmanager
    def watching(self, root: Path) -> Iterator[list[str]]:
        """Watch `root` instead for a while (to test the guard); yields what is touched there."""
        saved = self.root, self.touched
        self.root, self.touched = str(root), []
        try:
            yield self.touched
        finally:
            self.root, self.touched = saved


_GUARD = LiveWorkspaceGuard(ROOT / "workspace")
sys.addaudithook(_GUARD)


@pytest.fixture(autouse=True)
def _live_workspace_untouched() -> Iterator[None]:
    """Fails the test whose run (or module/session fixture set up for it) touched the live folder."""
    yield
    if touched := _GUARD.take():
        pytest.fail(f"the test touched the live workspace/ folder (use demo_workspace): {touched[:3]}", pytrace=False)


@pytest.fixture
def live_workspace_guard() -> LiveWorkspaceGuard:
    return _GUARD


def _demo_files(root: Path) -> tuple[list[str], str]:
    """The demo's files (paths relative to root, under workspace/) and where the list came from.

    In a git checkout: the tracked files (`git ls-files`), as they are in the working tree, so an
    edit to a demo file is tested while an added worker or runtime state is not. Otherwise (an
    unpacked tarball): every file on disk except the runtime state .gitignore names.
    """
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--", "workspace"],
            cwd=root,
            capture_output=True,
            text=True,
            encoding="utf-8",
            check=True,
        ).stdout.split("\0")
    except (OSError, subprocess.CalledProcessError) as exc:
        said = exc.stderr.strip() if isinstance(exc, subprocess.CalledProcessError) else str(exc)
        reason = said.splitlines()[0] if said else "git ls-files failed"
    else:
        files = sorted(p for p in listed if p and (root / p).is_file())
        if files:
            return files, "git ls-files workspace/ (tracked files only)"
        reason = "git tracks no files under workspace/"
    gitignore = root / ".gitignore"
    lines = gitignore.read_text(encoding="utf-8").splitlines() if gitignore.is_file() else []
    ignored = [line.strip().rstrip("/") for line in lines if line.strip().startswith("workspace/")]
    files = []
    for path in sorted((root / "workspace").rglob("*")):
        rel = path.relative_to(root).as_posix()
        prefixes = ["/".join(rel.split("/")[:n]) for n in range(1, rel.count("/") + 2)]
        if path.is_file() and not any(
            p.count("/") == pattern.count("/") and fnmatch.fnmatch(p, pattern) for p in prefixes for pattern in ignored
        ):
            files.append(rel)
    return files, f"workspace/ on disk minus .gitignore'd runtime state ({reason}; files added there are included)"


def _materialise_demo(root: Path, dest: Path) -> str:
    """Copy root's demo files into dest (the workspace folder itself); return where the list came from."""
    files, source = _demo_files(root)
    dest.mkdir(parents=True)
    for rel in files:
        target = dest / Path(rel).relative_to("workspace")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / rel, target)
    return source


@functools.cache
def _demo_source() -> str:
    with _GUARD.off():
        return _demo_files(ROOT)[1]


def pytest_report_header() -> str:
    return f"demo workspace for tests: {_demo_source()}"


@pytest.fixture(scope="session")
def materialise_demo() -> Callable[[Path, Path], str]:
    """The function behind demo_workspace_src, for tests of it on other checkouts."""
    return _materialise_demo


@pytest.fixture(scope="session")
def demo_workspace_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo workspace as git tracks it, copied once per session. Read-only by convention:
    copy it (or use `demo_workspace`) before loading a runtime on it."""
    dest = tmp_path_factory.mktemp("demo-src") / "workspace"
    with _GUARD.off():
        _materialise_demo(ROOT, dest)
    return dest


@pytest.fixture
def demo_workspace(demo_workspace_src: Path, tmp_path: Path) -> Path:
    """This test's own copy of the demo workspace, at tmp_path/"workspace"."""
    dest = tmp_path / "workspace"
    shutil.copytree(demo_workspace_src, dest)
    return dest


@pytest.fixture
def model_server() -> Iterator[Any]:
    """A real local OpenAI-compatible server answering from a script; leftovers fail the test."""
    from genworker.testing import ScriptedModelServer

    with ScriptedModelServer() as server:
        yield server
        server.assert_done()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def keyword_skill() -> Callable[[str, str], str]:
    """The SKILL.md text of a skill the matcher picks by one weighted keyword."""

    def text(name: str, keyword: str) -> str:
        return (
            f"---\nname: {name}\ndescription: Handles {keyword} work.\nmetadata:\n  genworker:\n"
            f"    keywords:\n      - {{keyword: {keyword}, weight: 2.0}}\n---\nDo the {keyword} work.\n"
        )

    return text


@pytest.fixture
def write_tree(tmp_path: Path) -> Callable[[Mapping[str, str]], Path]:
    """Write {relative path: text} under tmp_path/"ws" and return that root."""

    def write(files: Mapping[str, str]) -> Path:
        root = tmp_path / "ws"
        for rel, text in files.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        root.mkdir(exist_ok=True)
        return root

    return write


@pytest.fixture
def redis_url() -> str:
    import redis

    client = redis.Redis.from_url(REDIS_TEST_URL, socket_connect_timeout=1)
    try:
        client.ping()
    except redis.RedisError as exc:
        if os.environ.get("GENWORKER_REQUIRE_REDIS") == "1":
            pytest.fail(f"GENWORKER_REQUIRE_REDIS=1 but Redis at {REDIS_TEST_URL} is unreachable: {exc}")
        pytest.skip(f"Redis not reachable at {REDIS_TEST_URL}")
    finally:
        client.close()
    return REDIS_TEST_URL


@pytest.fixture
def redis_prefix(redis_url: str) -> Iterator[str]:
    """A key prefix no other test uses; every `{prefix}:*` key is deleted afterwards."""
    import uuid

    import redis

    prefix = f"gwtest-{uuid.uuid4().hex}"
    yield prefix
    with redis.Redis.from_url(redis_url) as client:
        keys = list(client.scan_iter(match=f"{prefix}:*"))
        if keys:
            client.delete(*keys)


def tenant_json(tenant_id: str, default_worker: str | None = None) -> str:
    default = f', "default_worker": "{default_worker}"' if default_worker else ""
    return f'{{"tenant_id": "{tenant_id}", "name": "{tenant_id}", "trust_level": 2{default}}}'


def persona_md(worker_id: str, role: str = "assistant", extra: str = "") -> str:
    return (
        f"---\nidentity:\n  name: {worker_id.title()}\n  worker_id: {worker_id}\n  role: {role}\n"
        f"mode: personal\n{extra}---\nYou are {worker_id}.\n"
    )


@pytest.fixture
def small_workspace(write_tree: Callable[[Mapping[str, str]], Path]) -> Callable[..., Path]:
    """A workspace with tenants {tenant: [workers]}; the first worker is the default."""

    def build(tenants: Mapping[str, list[str]] | None = None, extra: Mapping[str, str] | None = None) -> Path:
        files: dict[str, str] = {}
        for tenant, workers in (tenants or {"acme": ["alice", "bob"]}).items():
            files[f"tenants/{tenant}/TENANT.json"] = tenant_json(tenant, workers[0] if workers else None)
            for worker in workers:
                files[f"tenants/{tenant}/workers/{worker}/PERSONA.md"] = persona_md(worker)
        files.update(extra or {})
        return write_tree(files)

    return build
